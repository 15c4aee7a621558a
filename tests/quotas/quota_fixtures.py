"""Helpers for the quota tests: the example cluster's objects and pod charges."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from policies.quota.model import PodCharge

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cluster"


def load_objects(*names: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for name in names:
        objects += [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return objects


def charge(
    namespace: str,
    name: str,
    gpus: str | int | Decimal,
    *types: str,
    bound: str | None = None,
    profile: str | None = None,
    tenant: str | None = None,
    memory_gi: int | None = None,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    gated: bool = False,
) -> PodCharge:
    return PodCharge(
        namespace=namespace,
        name=name,
        uid=uid,
        candidate_types=tuple(types),
        bound_type=bound,
        profile=profile,
        gpu_equivalents=Decimal(str(gpus)),
        gpu_memory_bytes=Decimal(memory_gi) * 1024**3 if memory_gi is not None else None,
        tenant=tenant,
        namespace_labels=labels or {},
        gated=gated,
    )
