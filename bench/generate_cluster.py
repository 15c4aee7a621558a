"""Generated clusters for benchmarks: realistic GPU node pools, pods on them, profiles and quotas.

Node pools follow what real fleets look like, each labelled the way its source labels it:

| pool | share | GPUs | labels |
| --- | --- | --- | --- |
| dgx-h100 | 22% | 8 H100 SXM, NVSwitch | GFD + KGWE agent labels, GPU taint |
| hgx-a100 | 14% | 8 A100-80GB SXM | GFD only |
| a100-mig | 6% | 8 A100-80GB, MIG mixed (all-balanced) | GFD with MIG labels and resources |
| a100-40-mig-single | 3% | 8 A100-40GB, MIG single 1g.5gb (56 devices) | GFD, product `...-MIG-1g.5gb` |
| h200 | 8% | 8 H200, NVSwitch | GFD + agent labels |
| l40s | 8% | 4 L40S PCIe | GFD |
| l4 | 10% | 2 L4 | GFD |
| l4-mps | 6% | 2 L4, MPS x4 | GFD `-SHARED`, sharing-strategy mps |
| l4-ts | 4% | 2 L4, time-slicing x8 | GFD `-SHARED`, sharing-strategy time-slicing |
| gb200 | 5% | 4 GB200 per tray, 18 trays per NVL72 clique | GFD + agent labels with clique |
| gke-t4 | 4% | 4 T4 | GKE `cloud.google.com/gke-accelerator` only |
| unlabelled | 1% | 2 GPUs, no labels | type `unknown` |
| cpu | 9% | none | - |

About one node in fifty is cordoned. Everything is deterministic for a given (n, seed), so numbers
from two runs describe the same cluster.

    from generate_cluster import generate_nodes, generate_pods
    nodes = generate_nodes(1000)          # list of Node dicts, as the API returns them
    pods = generate_pods(nodes, 0.6)      # bound pods using ~60% of the GPUs, plus some pending
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

ZONES = ("zone-a", "zone-b", "zone-c")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CLIQUE_TRAYS = 18  # GB200 NVL72: 18 compute trays of 4 GPUs


def _node(name: str, labels: dict[str, str], allocatable: dict[str, str], *, taints: bool = True,
          unschedulable: bool = False) -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "1000Gi", "pods": "110", **allocatable}
    spec: dict[str, Any] = {}
    if taints and any(k.startswith("nvidia.com/") for k in allocatable):
        spec["taints"] = [dict(GPU_TAINT)]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels},
            "resourceVersion": "1",
        },
        "spec": spec,
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _gfd(product: str, memory_mib: int, count: int, family: str, *, replicas: int = 1,
         sharing: str = "none") -> dict[str, str]:
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": sharing,
    }


def _agent(type_id: str, domain: int, clique: str | None = None) -> dict[str, str]:
    labels = {"kgwe.io/accelerator-type": type_id, "kgwe.io/nvlink-domain-size": str(domain)}
    if clique:
        labels["kgwe.io/nvlink-clique"] = clique
    return labels


def _dgx_h100(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    labels = {**_gfd("NVIDIA-H100-80GB-HBM3", 81559, 8, "hopper"), **_agent("nvidia-h100-80gb", 8),
              "nvidia.com/gpu.machine": "DGX-H100", "nvidia.com/mig.capable": "true"}
    return labels, {"nvidia.com/gpu": "8"}


def _hgx_a100(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return _gfd("NVIDIA-A100-SXM4-80GB", 81920, 8, "ampere"), {"nvidia.com/gpu": "8"}


def _a100_mig(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    labels = {**_gfd("NVIDIA-A100-SXM4-80GB", 81920, 8, "ampere"), "nvidia.com/mig.capable": "true",
              "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced",
              "nvidia.com/mig.config.state": "success"}
    counts = {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}
    for profile, count in counts.items():
        labels[f"nvidia.com/mig-{profile}.count"] = str(count)
        labels[f"nvidia.com/mig-{profile}.product"] = f"NVIDIA-A100-SXM4-80GB-MIG-{profile}"
    allocatable = {"nvidia.com/gpu": "0", **{f"nvidia.com/mig-{p}": str(c) for p, c in counts.items()}}
    return labels, allocatable


def _a100_40_mig_single(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    labels = {**_gfd("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 4864, 56, "ampere"), "nvidia.com/mig.capable": "true",
              "nvidia.com/mig.strategy": "single", "nvidia.com/mig.config": "all-1g.5gb",
              "nvidia.com/mig.config.state": "success"}
    return labels, {"nvidia.com/gpu": "56"}


def _h200(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return {**_gfd("NVIDIA-H200", 143771, 8, "hopper"), **_agent("nvidia-h200-141gb", 8)}, {"nvidia.com/gpu": "8"}


def _l40s(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return _gfd("NVIDIA-L40S", 46068, 4, "ada-lovelace"), {"nvidia.com/gpu": "4"}


def _l4(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return _gfd("NVIDIA-L4", 23034, 2, "ada-lovelace"), {"nvidia.com/gpu": "2"}


def _l4_mps(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    labels = {**_gfd("NVIDIA-L4-SHARED", 23034, 2, "ada-lovelace", replicas=4, sharing="mps"),
              "nvidia.com/mps.capable": "true"}
    return labels, {"nvidia.com/gpu": "8"}


def _l4_time_sliced(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return _gfd("NVIDIA-L4-SHARED", 23034, 2, "ada-lovelace", replicas=8, sharing="time-slicing"), {
        "nvidia.com/gpu": "16"}


def _gb200(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    clique = f"6f1e9a3c-0000-4000-8000-{index // CLIQUE_TRAYS:012d}.17044"
    labels = {**_gfd("NVIDIA-GB200", 189471, 4, "blackwell"), **_agent("nvidia-gb200-186gb", 4, clique),
              "nvidia.com/gpu.clique": clique, "kubernetes.io/arch": "arm64"}
    return labels, {"nvidia.com/gpu": "4"}


def _gke_t4(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    labels = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4", "cloud.google.com/gke-accelerator-count": "4",
              "cloud.google.com/gke-nodepool": "t4-pool"}
    return labels, {"nvidia.com/gpu": "4"}


def _unlabelled(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return {}, {"nvidia.com/gpu": "2"}


def _cpu(name: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    return {}, {}


Pool = Callable[[str, int], tuple[dict[str, str], dict[str, str]]]
# (pool name, weight in percent, builder)
POOLS: tuple[tuple[str, int, Pool], ...] = (
    ("dgx-h100", 22, _dgx_h100),
    ("hgx-a100", 14, _hgx_a100),
    ("a100-mig", 6, _a100_mig),
    ("a100-40-mig-single", 3, _a100_40_mig_single),
    ("h200", 8, _h200),
    ("l40s", 8, _l40s),
    ("l4", 10, _l4),
    ("l4-mps", 6, _l4_mps),
    ("l4-ts", 4, _l4_time_sliced),
    ("gb200", 5, _gb200),
    ("gke-t4", 4, _gke_t4),
    ("unlabelled", 1, _unlabelled),
    ("cpu", 9, _cpu),
)


def _pool_sizes(n: int) -> list[int]:
    """Split n nodes over the pools by weight (largest remainders), every pool present once n >= len(POOLS)."""
    total = sum(weight for _name, weight, _build in POOLS)
    exact = [n * weight / total for _name, weight, _build in POOLS]
    sizes = [int(x) for x in exact]
    if n >= len(POOLS):
        sizes = [max(1, s) for s in sizes]
    while sum(sizes) > n:
        sizes[sizes.index(max(sizes))] -= 1
    order = sorted(range(len(POOLS)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order:
        if sum(sizes) >= n:
            break
        sizes[i] += 1
    return sizes


def generate_nodes(n: int, *, seed: int = 0, cordoned_every: int = 50) -> list[dict[str, Any]]:
    """`n` Node objects over the pools above (deterministic for a given n and seed)."""
    rng = random.Random(seed)
    nodes = []
    counter = 0
    for (pool, _weight, build), size in zip(POOLS, _pool_sizes(n), strict=True):
        for index in range(size):
            name = f"{pool}-{index:05d}"
            labels, allocatable = build(name, index)
            labels = {**labels, "topology.kubernetes.io/zone": ZONES[rng.randrange(len(ZONES))],
                      "node.kubernetes.io/instance-type": pool}
            counter += 1
            cordoned = bool(cordoned_every) and counter % cordoned_every == 0 and bool(allocatable)
            nodes.append(_node(name, labels, allocatable, unschedulable=cordoned))
    return nodes


def _gpu_resources(node: dict[str, Any]) -> dict[str, int]:
    allocatable = node["status"]["allocatable"]
    return {k: int(v) for k, v in allocatable.items() if k.startswith("nvidia.com/") and int(v) > 0}


def _pod(name: str, namespace: str, resource: str, amount: int, node: str | None,
         annotations: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{
        "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"limits": {resource: str(amount), "cpu": "8", "memory": "64Gi"}},
    }]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def generate_pods(
    nodes: list[dict[str, Any]], fill: float = 0.6, *, seed: int = 0, namespaces: int = 20, pending_every: int = 10
) -> list[dict[str, Any]]:
    """GPU pods bound to `nodes`, taking about `fill` of each node's GPU resources, plus pending pods.

    Pods spread over `namespaces` namespaces `team-00`..; every `pending_every`-th pod is also
    queued, unbound, for the same type (the `kgwe.io/accelerator-type` annotation names it).
    """
    rng = random.Random(seed)
    pods: list[dict[str, Any]] = []
    for node in nodes:
        labels = node["metadata"]["labels"]
        type_id = labels.get("kgwe.io/accelerator-type", "")
        for resource, allocatable in _gpu_resources(node).items():
            left = int(allocatable * fill)
            while left > 0:
                amount = min(left, rng.choice((1, 1, 2, 4, 8)))
                left -= amount
                namespace = f"team-{len(pods) % namespaces:02d}"
                annotations = {"kgwe.io/tenant": namespace}
                if type_id:
                    annotations["kgwe.io/accelerator-type"] = type_id
                pods.append(_pod(f"job-{len(pods):06d}", namespace, resource, amount, node["metadata"]["name"],
                                 annotations))
                if pending_every and len(pods) % pending_every == 0 and type_id:
                    pods.append(_pod(f"queued-{len(pods):06d}", namespace, resource, amount, None, dict(annotations)))
    return pods


def generate_profiles() -> list[dict[str, Any]]:
    """HardwareProfiles over the generated types: exclusive, MIG, MPS and time-sliced, some priced."""

    def profile(name: str, types: list[str], sharing: dict[str, Any], price: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"displayName": name.replace("-", " ").title(), "acceleratorTypes": types,
                                "sharing": sharing}
        if price:
            spec["pricePerGPUHour"] = price
        return {"apiVersion": "kgwe.io/v1alpha1", "kind": "HardwareProfile", "metadata": {"name": name}, "spec": spec}

    return [
        profile("premium-h100", ["nvidia-h100-80gb"], {"mode": "exclusive"}, "4.50"),
        profile("hopper-any", ["nvidia-h200-141gb", "nvidia-h100-80gb"], {"mode": "exclusive"}),
        profile("a100-training", ["nvidia-a100-80gb"], {"mode": "exclusive"}),
        profile("small-mig", ["nvidia-a100-80gb"], {"mode": "mig", "migProfile": "1g.10gb"}),
        profile("medium-mig", ["nvidia-a100-80gb"], {"mode": "mig", "migProfile": "3g.40gb"}),
        profile("tiny-mig-40", ["nvidia-a100-40gb"], {"mode": "mig", "migProfile": "1g.5gb"}),
        profile("shared-l4", ["nvidia-l4-24gb"], {"mode": "mps", "gpuFraction": 0.25}),
        profile("sliced-l4", ["nvidia-l4-24gb"], {"mode": "time-slicing"}),
        profile("inference-l40s", ["nvidia-l40s-48gb", "nvidia-l4-24gb"], {"mode": "exclusive"}),
        profile("nvl72", ["nvidia-gb200-186gb"], {"mode": "exclusive"}, "9.00"),
        profile("t4-batch", ["nvidia-t4-16gb"], {"mode": "exclusive"}, "0.35"),
    ]


def generate_cluster(n: int, fill: float = 0.6, *, seed: int = 0) -> list[dict[str, Any]]:
    """Nodes, their pods, namespaces and profiles: everything a ClusterStore needs for a realistic cluster."""
    nodes = generate_nodes(n, seed=seed)
    pods = generate_pods(nodes, fill, seed=seed)
    namespaces = sorted({p["metadata"]["namespace"] for p in pods})
    namespace_objects = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, "kgwe.io/tenant": ns}}}
        for ns in namespaces
    ]
    return [*nodes, *pods, *namespace_objects, *generate_profiles()]
