"""Builders for policy tests: GPU pods and GPUPolicy objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from policies.runtime.policy_runtime import PolicyRuntime, build_runtime

ROOT = Path(__file__).resolve().parents[2]


def gpu_pod(name: str = "p", namespace: str = "team-a", *, gpus: str = "1", labels: dict[str, str] | None = None,
            memory: str | None = "16Gi", privileged: bool = False) -> dict[str, Any]:
    limits: dict[str, str] = {"nvidia.com/gpu": gpus}
    if memory:
        limits["memory"] = memory
    container: dict[str, Any] = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": {}},
            "spec": {"containers": [container]}}


def gpu_policy(name: str, action: str = "Deny", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": name},
            "spec": {"enforcementAction": action, **spec}}


# Answers compared across engines are answers, not timings: cel-python interprets in Python and, on a loaded
# machine, can pass the runtime's 50 ms CPU limit per expression, and regorus' interpreter its 0.5 s per request
# with twenty Rego policies (a differential run failed so while another suite ran); the limits have tests of
# their own (test_policy_failure_modes.py).
COMPARED_CEL_TIME_LIMIT = 10.0
COMPARED_REGO_TIME_LIMIT = 60.0


def comparing_runtime(engine: str = "cel-expr-python", **options: Any) -> PolicyRuntime:
    """A runtime on the CEL `engine` whose answers a test compares with another runtime's (see
    COMPARED_CEL_TIME_LIMIT); `options` go to build_runtime."""
    runtime = build_runtime(cel_engine=engine, **options)  # type: ignore[arg-type]
    runtime.cel_time_limit = COMPARED_CEL_TIME_LIMIT
    runtime.rego_time_limit = COMPARED_REGO_TIME_LIMIT
    return runtime
