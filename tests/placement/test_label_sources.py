"""Clusters labelled by other sources than the example's: GFD only, GKE, Karpenter, AKS, MIG single,
MIG resources without a strategy label, MPS marked only by `mps.capable`, stale agent topology. Every
pod must still land exactly on the intended nodes (judged by the scheduler's predicates)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch
import pytest
from placement_support import review

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.runtime import Runtime
from webhook.scheduling.predicates import feasible_nodes


def node(
    name: str, labels: dict[str, str], allocatable: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **labels},
            "annotations": annotations or {},
        },
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", **allocatable}},
    }


def _stale_topology() -> dict[str, str]:
    stamp = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    doc = {
        "version": 1,
        "timestamp": stamp,
        "acceleratorType": "nvidia-h200-141gb",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-0",
                "product": "NVIDIA H200",
                "acceleratorType": "nvidia-h200-141gb",
                "memoryMiB": 143771,
            }
        ],
        "nvlink": {"domainSize": 8},
    }
    return {"kgwe.io/topology": json.dumps(doc)}


NODES = [
    node(
        "gfd-h100",
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
        {"nvidia.com/gpu": "8"},
    ),
    node(
        "gke-l4",
        {"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-accelerator-count": "1"},
        {"nvidia.com/gpu": "1"},
    ),
    node(
        "karpenter-a10g",
        {
            "karpenter.k8s.aws/instance-gpu-name": "a10g",
            "karpenter.k8s.aws/instance-gpu-count": "4",
            "karpenter.k8s.aws/instance-gpu-memory": "24576",
        },
        {"nvidia.com/gpu": "4"},
    ),
    node(
        "aks-a100",
        {"kubernetes.azure.com/accelerator": "nvidia", "node.kubernetes.io/instance-type": "Standard_ND96amsr_A100_v4"},
        {"nvidia.com/gpu": "8"},
    ),
    node(
        "mig-single",
        {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
            "nvidia.com/gpu.count": "56",
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/mig.config.state": "success",
        },
        {"nvidia.com/gpu": "56"},
    ),
    node(
        "mig-unlabelled-strategy",
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"},
        {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "4"},
    ),
    node(
        "mps-capable",
        {
            "nvidia.com/gpu.product": "NVIDIA-L40S",
            "nvidia.com/mps.capable": "true",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.replicas": "4",
        },
        {"nvidia.com/gpu": "4"},
    ),
    node(
        "stale-h200",
        {
            "nvidia.com/gpu.product": "NVIDIA-H200",
            "kgwe.io/accelerator-type": "nvidia-h200-141gb",
            "nvidia.com/gpu.count": "8",
        },
        {"nvidia.com/gpu": "8"},
        _stale_topology(),
    ),
]


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    config = Config.model_validate({"pricing": {"perGPUHour": {"nvidia-h100-80gb": 4.5}}})
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    store.replace_all([*NODES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
    store.mark_loaded()
    return build_runtime(config, None, store=store)


def create(runtime: Runtime, annotations: dict[str, str], limits: dict[str, str]) -> tuple[dict[str, Any], Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }
    mutated = runtime.admission.mutate(decode_review(review(pod)))
    final = jsonpatch.apply_patch(pod, mutated.patch)
    return final, runtime.admission.validate(decode_review(review(final)))


CASES = [
    ({"kgwe.io/accelerator": "nvidia-h100-80gb"}, {"nvidia.com/gpu": "2"}, {"gfd-h100"}),
    ({"kgwe.io/accelerator": "nvidia-l4-24gb"}, {"nvidia.com/gpu": "1"}, {"gke-l4"}),
    ({"kgwe.io/accelerator": "nvidia-a10g-24gb"}, {"nvidia.com/gpu": "1"}, {"karpenter-a10g"}),
    ({"kgwe.io/accelerator": "nvidia-a100-80gb"}, {"nvidia.com/gpu": "8"}, {"aks-a100"}),
    ({"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "5Gi"}, {"nvidia.com/gpu": "1"}, {"mig-single"}),
    ({"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "30Gi"}, {"nvidia.com/gpu": "1"}, {"mig-unlabelled-strategy"}),
    ({"kgwe.io/sharing": "mps", "kgwe.io/gpu-fraction": "0.5"}, {"nvidia.com/gpu": "1"}, {"mps-capable"}),
    ({"kgwe.io/accelerator": "nvidia-h200-141gb"}, {"nvidia.com/gpu": "1"}, {"stale-h200"}),
]


@pytest.mark.parametrize(("annotations", "limits", "expected"), CASES, ids=[str(c[0]) for c in CASES])
def test_each_label_source_places_exactly(
    runtime: Runtime, annotations: dict[str, str], limits: dict[str, str], expected: set[str]
) -> None:
    final, verdict = create(runtime, annotations, limits)
    assert verdict.allowed, verdict.message
    assert set(feasible_nodes(final, runtime.store.snapshot().nodes.values())) == expected


def test_stale_topology_falls_back_and_says_so(runtime: Runtime) -> None:
    final, _verdict = create(runtime, {"kgwe.io/accelerator": "nvidia-h200-141gb"}, {"nvidia.com/gpu": "1"})
    decision = json.loads(final["metadata"]["annotations"]["kgwe.io/decision"])
    assert decision["topology"] == "stale on 1 node(s): GFD labels used"
    facts = runtime.store.snapshot().nodes["stale-h200"]
    assert facts.topology_stale and facts.type_source == "gfd"
