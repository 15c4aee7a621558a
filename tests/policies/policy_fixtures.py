"""Builders for policy tests: GPU pods and GPUPolicy objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
