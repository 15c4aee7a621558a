"""Defaults the agent's command line shows, kept apart from the modules that use them so that
`kgwe agent --help` imports neither gRPC nor prometheus_client."""

from __future__ import annotations

METRICS_PORT = 9400  # the DCGM exporter's
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"  # the kubelet's default
