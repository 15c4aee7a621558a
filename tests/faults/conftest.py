"""Fault tests reuse the fake API server (tests/cluster), the OPA REST stand-in (tests/policies) and the fake
NVML machines (tests/fixtures/nvml, tests/agent) as they are: those folders are on pytest's pythonpath."""

from __future__ import annotations


