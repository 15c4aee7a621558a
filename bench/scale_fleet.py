"""The GPU fleet of issue 36's scale goals, generated as the API server would return it (dicts, not YAML).

At full size: 10,000 GPU nodes in 1,250 racks (`nvidia.com/gpu.clique`, as GPU feature discovery labels a
multi-node NVLink partition, and KGWE's agent's `kgwe.io/nvlink-clique`), 80,000 GPUs; 150,000 pods, of
which 100,000 ask GPUs (70,000 running, using every GPU, and 30,000 pending) and 50,000 are CPU-only
pods on the same nodes (DaemonSet-like). That is Kubernetes' published limits (5,000 nodes, 150,000
pods) and the issue's GPU fleet in one cluster.

The issue's three fleet numbers (10,000 nodes, 1,250 racks, 80,000 GPUs) make racks of 8 nodes of 8 GPUs;
a real GB200 NVL72 rack is 18 trays of 4 GPUs (1,250 of them would be 22,500 nodes and 90,000 GPUs). The
bench keeps the issue's numbers and labels each node as a GB200 tray is labelled (examples/cluster/
nodes-gb200.yaml) with 8 GPUs, so the counts that drive KGWE's cost (nodes, pods, GPUs, cliques) are those
the issue names.

Running GPU pods carry the cost annotations KGWE's bound-pod controller writes once a pod is bound (the
cluster has been served by KGWE before: a first start in a cluster of pods it never saw patches each once).
Pods spread over 100 namespaces; one more, `team-q`, has a TenantQuota of 16 GB200 GPUs held by two running
pods of 8 on the first rack (what the bench frees to see a pod change reach the quota controller).

Everything scales from `gpu_nodes` (pods are 15 per node), so the 10-node baseline is the same cluster,
smaller. Deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

GPUS_PER_NODE = 8
NODES_PER_RACK = 8
PODS_PER_NODE = 15  # 150,000 pods on 10,000 nodes
RUNNING_GPU_PODS_PER_NODE = 7  # six of 1 GPU and one of 2: every GPU used
PENDING_GPU_PODS_PER_NODE = 3
NAMESPACES = 100
TYPE = "nvidia-gb200-186gb"
QUOTA_NAMESPACE = "team-q"
PRICE_PER_GPU_HOUR = 9  # examples/config.yaml's price of the type
QUOTA_GPUS = 16


@dataclass(frozen=True)
class Fleet:
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    namespaces: list[dict[str, Any]]
    quotas: list[dict[str, Any]]

    @property
    def gpu_pods(self) -> int:
        return sum(1 for p in self.pods if "nvidia.com/gpu" in p["spec"]["containers"][0]["resources"]["limits"])

    def counts(self) -> dict[str, int]:
        return {"nodes": len(self.nodes), "racks": len({n["metadata"]["labels"]["nvidia.com/gpu.clique"]
                                                        for n in self.nodes}),
                "gpus": GPUS_PER_NODE * len(self.nodes), "pods": len(self.pods), "gpu_pods": self.gpu_pods}


def clique(rack: int) -> str:
    return f"5b1c7e2a-0000-4000-8000-{rack:012d}.17044"


def gpu_node(name: str, rack: int) -> dict[str, Any]:
    resources = {"cpu": "144", "memory": "1800Gi", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GB200",
            "nvidia.com/gpu.memory": "189471", "nvidia.com/gpu.count": str(GPUS_PER_NODE),
            "nvidia.com/gpu.family": "blackwell", "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.clique": clique(rack), "kgwe.io/accelerator-type": TYPE,
            "kgwe.io/nvlink-domain-size": str(GPUS_PER_NODE * NODES_PER_RACK), "kgwe.io/nvlink-clique": clique(rack),
            "topology.kubernetes.io/zone": f"zone-{rack % 3}"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def pod(name: str, namespace: str, node: str | None, gpus: int, *, created: str = "2026-11-01T00:00:00Z"
        ) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": "4", "memory": "32Gi"}
    annotations: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
        annotations["kgwe.io/accelerator"] = TYPE
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                            "resources": {"limits": limits, "requests": dict(limits)}}]}
    if gpus:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    status: dict[str, Any] = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": created}
        if gpus:  # what KGWE's bound-pod controller wrote once it ran: the cluster has been served by KGWE
            annotations["kgwe.io/accelerator-type"] = TYPE
            annotations["kgwe.io/hourly-cost"] = str(PRICE_PER_GPU_HOUR * gpus)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                         "labels": {"app": name.rsplit("-", 1)[0]}, "creationTimestamp": created},
            "spec": spec, "status": status}


def _node_pods(index: int, node: str) -> Iterator[dict[str, Any]]:
    namespace = f"team-{index % NAMESPACES:03d}"
    if index < QUOTA_GPUS // GPUS_PER_NODE:  # team-q's two 8-GPU pods hold its whole quota
        yield pod(f"q-run-{index}", QUOTA_NAMESPACE, node, GPUS_PER_NODE)
    else:
        for slot in range(RUNNING_GPU_PODS_PER_NODE):
            yield pod(f"train-{index:05d}-{slot}", namespace, node, 2 if slot == 0 else 1)
    for slot in range(PENDING_GPU_PODS_PER_NODE):
        yield pod(f"queued-{index:05d}-{slot}", namespace, None, 1)
    for slot in range(PODS_PER_NODE - RUNNING_GPU_PODS_PER_NODE - PENDING_GPU_PODS_PER_NODE):
        yield pod(f"agent-{index:05d}-{slot}", namespace, node, 0)


def generate_fleet(gpu_nodes: int) -> Fleet:
    nodes = [gpu_node(f"gb200-r{i // NODES_PER_RACK:04d}-t{i % NODES_PER_RACK}", i // NODES_PER_RACK)
             for i in range(gpu_nodes)]
    pods = [p for i, n in enumerate(nodes) for p in _node_pods(i, n["metadata"]["name"])]
    names = sorted({p["metadata"]["namespace"] for p in pods})
    namespaces = [{"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}} for ns in names]
    quotas = [{"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": QUOTA_NAMESPACE},
               "spec": {"tenant": QUOTA_NAMESPACE, "namespaces": [QUOTA_NAMESPACE],
                        "limits": [{"acceleratorType": TYPE, "gpus": QUOTA_GPUS}]}}]
    return Fleet(nodes, pods, namespaces, quotas)
