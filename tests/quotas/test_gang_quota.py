"""A sized gang that the tenant's quota could never hold whole is refused at its first member.

Its pods would be admitted up to the limit and the rest refused, so it would never start, while its first
member held a whole NVLink room for it, unlimited by the quota. Real admission path over the example
cluster, with a tenant `lab` that may use 4 GB200s (the example's GB200 clique has 8).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import review_pod

ROOT = Path(__file__).resolve().parents[2]
LAB = [
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": "lab", "labels": {"kubernetes.io/metadata.name": "lab"}}},
    {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "lab"},
     "spec": {"tenant": "lab", "namespaces": ["lab"],
              "limits": [{"acceleratorType": "nvidia-gb200-186gb", "gpus": 4}]}},
]


def _member(name: str, gang: str, size: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "lab", "annotations": {
            "kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": gang, "kgwe.io/gang-size": str(size)}},
        "spec": {"containers": [{"name": "main", "image": "cuda",
                                 "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}}}]},
    }


def test_a_gang_bigger_than_the_tenants_limit_is_refused_at_its_first_member(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(ROOT / "examples" / "cluster", cluster)
    (cluster / "lab.yaml").write_text(yaml.safe_dump_all(LAB))
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), cluster)
    too_big = review_pod(runtime.admission, _member("w-0", "llm", 2, 4))
    assert not too_big.allowed
    assert ("tenant lab: nvidia-gb200-186gb limit 4 GPUs, the gang asks 8; this gang could never run within it"
            in too_big.message)
    # A gang the limit can hold whole is judged like any pod.
    fits = review_pod(runtime.admission, _member("w-0", "small", 2, 2))
    assert fits.allowed, fits.message
