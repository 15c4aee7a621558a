"""The agent's usage metrics in the chart (agent.metrics): off by default; on, the DaemonSet serves /metrics on
the DCGM exporter's port, mounts the kubelet's PodResources directory read-only, may list ResourceSlices, and
Prometheus reaches it through a NetworkPolicy and, if asked, a ServiceMonitor that keeps the GPUs' pod labels."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from chart_support import CHART, Rendered, render

from agent.main import build_parser

ON = {"agent": {"metrics": {"enabled": True}}}


def _pod(rendered: Rendered) -> dict[str, Any]:
    return dict(rendered.one("DaemonSet", "kgwe-agent")["spec"]["template"]["spec"])


def _container(rendered: Rendered) -> dict[str, Any]:
    containers = _pod(rendered)["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _agent_args(rendered: Rendered) -> Any:
    """The DaemonSet's arguments, read by `kgwe agent`'s own parser."""
    args = [a.replace("$(NODE_NAME)", "gpu-node-1") for a in _container(rendered)["args"]]
    assert args[0] == "agent"
    return build_parser().parse_args(args[1:])


def _agent_rules(rendered: Rendered) -> list[tuple[list[str], list[str], list[str]]]:
    role = rendered.one("ClusterRole", "kgwe-agent")
    return [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]]


def test_off_by_default_the_agent_serves_nothing_and_stays_unprivileged(default: Rendered) -> None:
    assert _agent_args(default).metrics_port == 0
    pod = _pod(default)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert "ports" not in _container(default)
    assert not any("hostPath" in volume for volume in pod["volumes"])
    assert _agent_rules(default) == [([""], ["nodes"], ["get", "patch"])]
    assert "kgwe-agent" not in default.names("NetworkPolicy")
    assert "kgwe-agent-metrics" not in default.names("Service")
    assert "kgwe-agent" not in default.names("ServiceMonitor")


def test_on_the_agent_serves_metrics_on_the_dcgm_exporters_port_with_pod_resources(
    rendered_scenarios: dict[str, Rendered],
) -> None:
    rendered = rendered_scenarios["agent-metrics"]
    args = _agent_args(rendered)
    container = _container(rendered)
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert args.metrics_port == 9400 and args.metrics_address == "0.0.0.0"
    assert args.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    pod = _pod(rendered)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert volumes["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    assert mounts["pod-resources"] == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                                       "readOnly": True}
    # The socket is root's: uid 0, but nothing more.
    assert pod["securityContext"]["runAsUser"] == 0 and pod["securityContext"]["runAsNonRoot"] is False
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    }
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    # Reading which GPU a DRA device is: list ResourceSlices, nothing else new.
    assert _agent_rules(rendered) == [([""], ["nodes"], ["get", "patch"]),
                                      (["resource.k8s.io"], ["resourceslices"], ["list"])]


def test_only_the_monitoring_namespace_reaches_the_metrics_port(rendered_scenarios: dict[str, Rendered]) -> None:
    rendered = rendered_scenarios["agent-metrics"]
    policy = rendered.one("NetworkPolicy", "kgwe-agent")
    assert policy["spec"]["podSelector"]["matchLabels"] == _selector(rendered)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    }]
    closed = render({**ON, "networkPolicy": {"monitoringNamespaceSelector": None}})
    assert closed.one("NetworkPolicy", "kgwe-agent")["spec"]["ingress"] == []
    assert "kgwe-agent" not in render({**ON, "networkPolicy": {"enabled": False}}).names("NetworkPolicy")


def _selector(rendered: Rendered) -> dict[str, str]:
    return dict(rendered.one("DaemonSet", "kgwe-agent")["spec"]["selector"]["matchLabels"])


def test_the_service_monitor_scrapes_every_agent_and_keeps_the_pods_labels(
    rendered_scenarios: dict[str, Rendered],
) -> None:
    rendered = rendered_scenarios["agent-metrics"]
    service = rendered.one("Service", "kgwe-agent-metrics")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == _selector(rendered)
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = rendered.one("ServiceMonitor", "kgwe-agent")
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kgwe-system"]}
    endpoint, = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("metrics", "/metrics", "http")
    # The series' own namespace/pod/container win, and the agent pod's are never added to an idle GPU.
    assert endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == [{"action": "labeldrop", "regex": "(namespace|pod|container)"}]
    no_monitor = render(ON)
    assert "kgwe-agent" not in no_monitor.names("ServiceMonitor")
    assert "kgwe-agent-metrics" not in no_monitor.names("Service")


def test_another_kubelet_root_and_port() -> None:
    rendered = render({"agent": {"metrics": {"enabled": True, "port": 9500, "kubeletPath": "/var/lib/k0s/kubelet/"}}})
    args = _agent_args(rendered)
    assert args.metrics_port == 9500 and _container(rendered)["ports"][0]["containerPort"] == 9500
    assert args.pod_resources_socket == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
    volumes = {v["name"]: v for v in _pod(rendered)["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"


def test_without_pod_resources_the_agent_stays_unprivileged() -> None:
    rendered = render({"agent": {"metrics": {"enabled": True, "podResources": False}}})
    args = _agent_args(rendered)
    assert args.metrics_port == 9400 and args.pod_resources_socket == ""
    pod = _pod(rendered)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert not any("hostPath" in volume for volume in pod["volumes"])


@pytest.mark.parametrize("bad", [
    {"port": 0}, {"port": 70000}, {"kubeletPath": "var/lib/kubelet"}, {"podResources": "yes"},
    {"serviceMonitor": {"interval": "often"}}, {"scrape": True},
])
def test_schema_refuses_broken_metrics_values(bad: dict[str, Any]) -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema({"agent": {"metrics": {"enabled": True}}})
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema({"agent": {"metrics": bad}})
