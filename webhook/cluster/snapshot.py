"""The immutable snapshot of the cluster admission reads (`ClusterModel`, built by `ClusterStore`, model.py) and
`data.kgwe.cluster`, its summary for policies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from policies.vocabulary.accelerator_types import UNKNOWN, AcceleratorTable
from policies.vocabulary.objects import ObjectView
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.type_index import TypeSummary


@dataclass(frozen=True)
class ClusterModel:
    """An immutable snapshot of the cluster as admission sees it."""

    nodes: dict[str, NodeFacts]
    node_objects: dict[str, dict[str, Any]]
    pods: dict[str, dict[str, Any]]
    namespaces: dict[str, dict[str, Any]]
    hardware_profiles: dict[str, dict[str, Any]]
    tenant_quotas: dict[str, dict[str, Any]]
    gpu_policies: dict[str, dict[str, Any]]
    rbac: dict[str, list[dict[str, Any]]]
    types: dict[str, TypeSummary]
    generation: int
    built_at: float
    table: AcceleratorTable
    device_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # DRA claims and (from a cluster directory) claim templates by `namespace/name`: what pods that name
    # their own claims ask for and hold (webhook/dra/claimed.py).
    resource_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    claim_templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Workloads of the kind table by `Kind/namespace/name` (webhook/cluster/workloads.py): views only.
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    # MIGStrategy objects by name (webhook/migplan): which nodes' MIG layouts follow demand.
    mig_strategies: dict[str, dict[str, Any]] = field(default_factory=dict)
    # API discovery of the group versions a source was asked to look up (`KubeClusterSource(discover=...)`): the
    # resources each serves; a group version the API server does not serve is absent. A directory serves none.
    api_resources: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def serves(self, group_version: str, *resources: str) -> bool:
        """Whether API discovery found `group_version` served with every one of `resources`."""
        served = self.api_resources.get(group_version)
        return served is not None and all(r in served for r in resources)

    def type_ids(self) -> list[str]:
        """The typed accelerator types of the snapshot, sorted (a new list: the caller may change it)."""
        return list(self._type_ids)

    @cached_property
    def _type_ids(self) -> tuple[str, ...]:
        return tuple(sorted(t for t in self.types if t != UNKNOWN))

    def namespace_labels(self, namespace: str, shared: bool = False) -> dict[str, str]:
        """The namespace's labels with `kubernetes.io/metadata.name` (a new dict: the caller may change it; `shared`:
        the snapshot's own, never to be changed, which every pod's charge keeps: one per namespace, not per pod)."""
        known = self._namespace_labels.get(namespace)
        if known is not None:
            return known if shared else dict(known)
        merged = dict(ObjectView(self.namespaces.get(namespace)).labels)
        merged.setdefault("kubernetes.io/metadata.name", namespace)
        return merged

    @cached_property
    def _namespace_labels(self) -> dict[str, dict[str, str]]:
        # Every namespace of the snapshot, once; a name it lacks is answered above (what a pod names cannot grow it).
        out: dict[str, dict[str, str]] = {}
        for name, obj in self.namespaces.items():
            merged = dict(ObjectView(obj).labels)
            merged.setdefault("kubernetes.io/metadata.name", name)
            out[name] = merged
        return out

    def summary(self) -> dict[str, Any]:
        """`data.kgwe.cluster` for policies: types with counts, MIG offers, NVLink and sharing. The same
        object for the whole snapshot (engines reload cluster data only when it changes)."""
        return self._summary

    @cached_property
    def _summary(self) -> dict[str, Any]:
        return build_summary(self)

    @cached_property
    def derived(self) -> dict[Any, Any]:
        """Facts derived from this snapshot alone, remembered for its life by the module that derives them
        (keys start with that module's name): a request reads them instead of recomputing them."""
        return {}


def build_summary(model: ClusterModel) -> dict[str, Any]:
    types: dict[str, Any] = {}
    for type_id, summary in model.types.items():
        accel = model.table.get(type_id)
        types[type_id] = {
            "nodes": len(summary.nodes),
            "gpus": summary.gpus_total,
            "maxGpusPerNode": summary.max_gpus_per_node,
            "maxNvlinkDomain": summary.max_nvlink_domain,
            "nvswitch": bool(accel and accel.nvswitch and summary.max_nvlink_domain > 1),
            "memoryGB": model.table.memory_gb(type_id),
            "mig": {p: {"devices": o.devices, "memoryGB": _profile_memory(p)} for p, o in summary.mig.items()},
            "mps": len(summary.mps_nodes) > 0,
            "timeSlicing": len(summary.timeslice_nodes) > 0,
            "cliques": sorted(summary.cliques),
        }
    return {"types": types, "typeIds": model.type_ids(), "nodes": len(model.nodes)}


def _profile_memory(profile: str) -> int | None:
    try:
        return int(profile.split(".")[-1].removesuffix("gb"))
    except ValueError:
        return None
