"""What KGWE knows about one node's GPUs, derived from its labels, allocatable and topology annotation.

Sources, best first: the agent's `kgwe.io/topology` annotation while it is fresh, the agent's labels,
NVIDIA GFD labels, then GKE, Karpenter and AKS labels. A node with GPUs but none of these is type
`unknown`: shown, never selected, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from policies.vocabulary import keys, resources
from policies.vocabulary.accelerator_types import MIXED, UNKNOWN, AcceleratorTable, split_product
from policies.vocabulary.quantities import parse_quantity
from policies.vocabulary.topology_schema import (
    ANNOTATION,
    HEARTBEAT_ANNOTATION,
    LABEL_ACCELERATOR_TYPE,
    LABEL_NVLINK_CLIQUE,
    LABEL_NVLINK_DOMAIN_SIZE,
    TopologyDocument,
)

if TYPE_CHECKING:
    from webhook.dra.facts import DraNodeDevices

GPU_RESOURCE = resources.NVIDIA_GPU
MIG_RESOURCE_PREFIX = resources.NVIDIA_MIG_PREFIX
GPU_RESOURCE_PREFIXES = resources.GPU_RESOURCE_PREFIXES

L_PRODUCT = keys.NVIDIA_GPU_PRODUCT
L_MEMORY = keys.NVIDIA_GPU_MEMORY
L_COUNT = keys.NVIDIA_GPU_COUNT
L_REPLICAS = keys.NVIDIA_GPU_REPLICAS
L_SHARING = keys.NVIDIA_GPU_SHARING_STRATEGY
L_MIG_STRATEGY = keys.NVIDIA_MIG_STRATEGY
L_MIG_STATE = keys.NVIDIA_MIG_CONFIG_STATE
L_CLIQUE = keys.NVIDIA_GPU_CLIQUE
L_PRESENT = keys.NVIDIA_GPU_PRESENT
L_FAMILY = keys.NVIDIA_GPU_FAMILY
L_GKE_ACCEL = keys.GKE_ACCELERATOR
L_GKE_COUNT = keys.GKE_ACCELERATOR_COUNT
L_GKE_PARTITION = keys.GKE_GPU_PARTITION_SIZE
L_GKE_SHARING = keys.GKE_GPU_SHARING_STRATEGY
L_GKE_MAX_SHARED = keys.GKE_MAX_SHARED_CLIENTS
L_KARPENTER_NAME = keys.KARPENTER_GPU_NAME
L_KARPENTER_MEMORY = keys.KARPENTER_GPU_MEMORY
L_KARPENTER_COUNT = keys.KARPENTER_GPU_COUNT
L_AKS_ACCEL = keys.AKS_ACCELERATOR
L_INSTANCE_TYPE = keys.INSTANCE_TYPE
AMD_GPU_RESOURCE = resources.AMD_GPU
L_AMD_PRODUCT = keys.AMD_GPU_PRODUCT_NAME
L_AMD_VRAM = keys.AMD_GPU_VRAM
L_AMD_FAMILY = keys.AMD_GPU_FAMILY
L_AMD_DEVICE_ID = keys.AMD_GPU_DEVICE_ID
AMD_BETA_PREFIX = keys.AMD_BETA_PREFIX


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str


@dataclass
class NodeFacts:
    name: str
    labels: dict[str, str]
    accelerator_type: str  # a type id, `unknown`, `mixed`, or "" for a node without GPUs
    type_source: str  # topology | agent-label | gfd | amd-labeller | gke | karpenter | aks | none
    gpu_count: int  # physical GPUs (not MPS or time-slicing replicas)
    gpu_memory_mib: int | None
    product: str | None
    allocatable: dict[str, Decimal]
    taints: tuple[Taint, ...]
    unschedulable: bool
    mig_strategy: str  # none | single | mixed | gke
    mig_ready: bool  # nvidia.com/mig.config.state == success (or no mig-manager at all)
    mig_profiles: dict[str, int]  # profile -> devices on the node
    sharing: str  # none | mps | time-slicing
    replicas: int
    nvlink_domain_size: int
    clique: str | None
    clique_label: str | None  # the label key carrying the clique (kgwe.io/nvlink-clique or nvidia.com/gpu.clique)
    topology: TopologyDocument | None = None
    topology_age_seconds: float | None = None
    topology_stale: bool = False
    notes: list[str] = field(default_factory=list)
    # GPUs the node publishes through DRA ResourceSlices (webhook/dra/facts.py), None without any.
    dra: DraNodeDevices | None = None

    @property
    def has_gpus(self) -> bool:
        return self.gpu_count > 0 or any(self._gpu_allocatable()) or bool(self.dra and (self.dra.gpus or self.dra.mig))

    def _gpu_allocatable(self) -> list[str]:
        return [k for k, v in self.allocatable.items() if k.startswith(GPU_RESOURCE_PREFIXES) and v > 0]

    @property
    def is_typed(self) -> bool:
        return self.accelerator_type not in ("", UNKNOWN, MIXED)

    def selector_labels(self) -> dict[str, str]:
        """Labels that identify this node's accelerator type, usable in node selectors, best first."""
        out: dict[str, str] = {}
        for key in (
            LABEL_ACCELERATOR_TYPE,
            L_PRODUCT,
            L_AMD_PRODUCT,
            AMD_BETA_PREFIX + L_AMD_PRODUCT,
            L_AMD_DEVICE_ID,
            L_GKE_ACCEL,
            L_KARPENTER_NAME,
            L_INSTANCE_TYPE,
        ):
            if key in self.labels:
                out[key] = self.labels[key]
        return out


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class AmdLabels:
    """What AMD's node labeller says about a node's GPUs (None where it says nothing)."""

    product: str | None
    device_id: str | None
    vram_gb: int | None
    family: str | None

    @property
    def present(self) -> bool:
        return bool(self.product or self.device_id)


def _amd_value(labels: dict[str, str], key: str) -> str | None:
    """A labeller value: `amd.com/gpu.X=V`, `beta.amd.com/gpu.X=V`, or the oldest form, where the value
    is in the key and the label's value counts the GPUs (`beta.amd.com/gpu.X.V=8`; the most common wins)."""
    for name in (key, AMD_BETA_PREFIX + key):
        if labels.get(name):
            return labels[name]
    prefix = AMD_BETA_PREFIX + key + "."
    counted = [(_int(v) or 0, k[len(prefix) :]) for k, v in labels.items() if k.startswith(prefix)]
    return max(counted)[1] if counted else None


def amd_labels(labels: dict[str, str]) -> AmdLabels:
    vram = _amd_value(labels, L_AMD_VRAM)
    vram_gb = _int(vram.upper().removesuffix("GB").removesuffix("G")) if vram else None
    return AmdLabels(
        product=_amd_value(labels, L_AMD_PRODUCT),
        device_id=_amd_value(labels, L_AMD_DEVICE_ID),
        vram_gb=vram_gb,
        family=_amd_value(labels, L_AMD_FAMILY),
    )


def _taints(node: dict[str, Any]) -> tuple[Taint, ...]:
    taints = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if isinstance(taint, dict) and taint.get("key") and taint.get("effect"):
            taints.append(Taint(str(taint["key"]), taint.get("value"), str(taint["effect"])))
    return tuple(taints)


def _allocatable(node: dict[str, Any]) -> dict[str, Decimal]:
    status = node.get("status") or {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    out: dict[str, Decimal] = {}
    for key, value in raw.items():
        try:
            out[str(key)] = parse_quantity(value)
        except ValueError:
            continue
    return out


def _parse_topology(annotations: dict[str, str]) -> TopologyDocument | None:
    raw = annotations.get(ANNOTATION)
    if not raw:
        return None
    try:
        return TopologyDocument.model_validate_json(raw)
    except ValueError:
        return None


def _heartbeat(annotations: dict[str, str]) -> datetime | None:
    raw = annotations.get(HEARTBEAT_ANNOTATION)
    if not raw:
        return None
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def node_facts(
    node: dict[str, Any],
    table: AcceleratorTable,
    staleness_seconds: float,
    now: datetime | None = None,
) -> NodeFacts:
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    allocatable = _allocatable(node)
    notes: list[str] = []

    topology = _parse_topology(annotations)
    age: float | None = None
    stale = False
    if topology is not None:
        current = now or datetime.now(UTC)
        age = topology.age_seconds(current)
        beat = _heartbeat(annotations)
        if beat is not None:
            age = min(age, max(0.0, (current - beat).total_seconds()))
        stale = age > staleness_seconds
        if stale:
            notes.append(f"topology {int(age)}s old (stale after {int(staleness_seconds)}s): using GFD labels")
    elif ANNOTATION in annotations:
        notes.append("topology annotation unreadable: using GFD labels")
    fresh = topology if topology is not None and not stale else None

    product = labels.get(L_PRODUCT)
    memory_mib = _int(labels.get(L_MEMORY))
    mig_strategy = labels.get(L_MIG_STRATEGY, "none")
    if mig_strategy == "none" and any(k.startswith(MIG_RESOURCE_PREFIX) and v > 0 for k, v in allocatable.items()):
        # The resources say mixed even where the strategy label is missing (hand-made or older labelling).
        mig_strategy = "mixed"
    base_product, single_profile, _shared = split_product(product) if product else ("", None, False)

    # Accelerator type.
    type_id, source = "", "none"
    if fresh is not None and fresh.gpus:
        type_id, source = fresh.accelerator_type, "topology"
    elif labels.get(LABEL_ACCELERATOR_TYPE) and not stale:
        type_id, source = labels[LABEL_ACCELERATOR_TYPE], "agent-label"
    elif product:
        # Under MIG single the memory label is the slice's, not the GPU's: the table knows the model.
        type_id = table.from_product(base_product, None if single_profile else memory_mib)
        source = "gfd"
    elif (amd := amd_labels(labels)).present:
        type_id, source = table.from_amd(amd.product, amd.device_id, amd.vram_gb), "amd-labeller"
        product = amd.product
        memory_mib = amd.vram_gb * 1024 if amd.vram_gb else None
    elif labels.get(L_GKE_ACCEL):
        type_id, source = table.from_gke(labels[L_GKE_ACCEL]), "gke"
    elif labels.get(L_KARPENTER_NAME):
        type_id = table.from_karpenter(labels[L_KARPENTER_NAME], _int(labels.get(L_KARPENTER_MEMORY)))
        source = "karpenter"
    elif labels.get(L_AKS_ACCEL) and labels.get(L_INSTANCE_TYPE):
        type_id, source = table.from_azure_instance(labels[L_INSTANCE_TYPE]), "aks"

    # Sharing (MPS, time-slicing) and replicas.
    sharing = labels.get(L_SHARING, "none")
    replicas = _int(labels.get(L_REPLICAS)) or 1
    if sharing == "none" and labels.get("nvidia.com/mps.capable", "").lower() == "true":
        sharing = "mps"
    gke_sharing = labels.get(L_GKE_SHARING)
    if gke_sharing:
        sharing = "mps" if gke_sharing.lower() == "mps" else "time-slicing"
        replicas = _int(labels.get(L_GKE_MAX_SHARED)) or replicas
    if fresh is not None and fresh.sharing.strategy != "none":
        sharing, replicas = fresh.sharing.strategy, max(1, fresh.sharing.replicas)
    if sharing not in ("mps", "time-slicing"):
        sharing, replicas = "none", 1

    # Physical GPU count.
    gpu_count = 0
    if fresh is not None and fresh.gpus:
        gpu_count = len(fresh.gpus)
    elif mig_strategy == "single" and labels.get(L_COUNT):
        # Under MIG single gpu.count counts MIG devices, not GPUs: devices / instances per GPU of the
        # profile gives the physical GPUs (a pod's whole-GPU count is judged against those).
        devices = _int(labels.get(L_COUNT)) or 0
        accel = table.get(type_id)
        slice_profile = accel.mig_profile(single_profile) if accel is not None and single_profile else None
        gpu_count = -(-devices // slice_profile.max_instances) if slice_profile is not None else devices
    else:
        gpu_count = (
            _int(labels.get(L_COUNT)) or _int(labels.get(L_GKE_COUNT)) or _int(labels.get(L_KARPENTER_COUNT)) or 0
        )
        if not gpu_count:
            whole = allocatable.get(GPU_RESOURCE, Decimal(0)) or allocatable.get(AMD_GPU_RESOURCE, Decimal(0))
            gpu_count = int(whole) // max(1, replicas)
    has_any_gpu = gpu_count > 0 or any(k.startswith(GPU_RESOURCE_PREFIXES) and v > 0 for k, v in allocatable.items())
    if has_any_gpu and not type_id:
        type_id = UNKNOWN
        notes.append("GPUs without labels or topology: type unknown")
    if not has_any_gpu and source == "none":
        type_id = ""

    # MIG.
    mig_profiles: dict[str, int] = {}
    if mig_strategy == "mixed":
        for key, value in allocatable.items():
            if key.startswith(MIG_RESOURCE_PREFIX) and value > 0:
                mig_profiles[key[len(MIG_RESOURCE_PREFIX) :]] = int(value)
        for key, label_value in labels.items():
            if key.startswith("nvidia.com/mig-") and key.endswith(".count"):
                profile = key[len("nvidia.com/mig-") : -len(".count")]
                mig_profiles.setdefault(profile, _int(label_value) or 0)
    elif mig_strategy == "single" and single_profile:
        mig_profiles[single_profile] = _int(labels.get(L_COUNT)) or int(allocatable.get(GPU_RESOURCE, 0))
    elif labels.get(L_GKE_PARTITION):
        mig_strategy = "gke"
        mig_profiles[labels[L_GKE_PARTITION]] = int(allocatable.get(GPU_RESOURCE, 0))
    mig_state = labels.get(L_MIG_STATE)
    mig_ready = mig_state in (None, "success")
    if mig_profiles and not mig_ready:
        notes.append(f"MIG configuration state is {mig_state!r}: no MIG placement here")

    # NVLink domain and clique.
    nvlink = _int(labels.get(LABEL_NVLINK_DOMAIN_SIZE)) if not stale else None
    if fresh is not None and fresh.nvlink.domain_size:
        nvlink = fresh.nvlink.domain_size
    if nvlink is None:
        accel = table.get(type_id)
        # Without the agent, an NVSwitch SXM board is all-to-all; PCIe cards are not.
        board = (product or "").upper()
        sxm = "SXM" in board or "HBM" in board or "GB200" in board
        # MIG slices never use NVLink: a node whose GPUs are all partitioned has no NVLink domain to offer.
        partitioned = mig_strategy in ("single", "gke") and bool(single_profile or labels.get(L_GKE_PARTITION))
        nvswitched = accel is not None and accel.nvswitch and sxm and not partitioned
        nvlink = gpu_count if nvswitched else (1 if gpu_count else 0)
    clique, clique_label = None, None
    if labels.get(LABEL_NVLINK_CLIQUE) and not stale:
        clique, clique_label = labels[LABEL_NVLINK_CLIQUE], LABEL_NVLINK_CLIQUE
    elif labels.get(L_CLIQUE):
        clique, clique_label = labels[L_CLIQUE], L_CLIQUE
    if fresh is not None and fresh.fabric is not None and clique is None:
        clique = fresh.fabric.clique

    return NodeFacts(
        name=name,
        labels=labels,
        accelerator_type=type_id,
        type_source=source,
        gpu_count=gpu_count,
        gpu_memory_mib=memory_mib,
        product=product,
        allocatable=allocatable,
        taints=_taints(node),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        mig_strategy=mig_strategy,
        mig_ready=mig_ready,
        mig_profiles=mig_profiles,
        sharing=sharing,
        replicas=replicas,
        nvlink_domain_size=nvlink,
        clique=clique,
        clique_label=clique_label,
        topology=topology,
        topology_age_seconds=age,
        topology_stale=stale,
        notes=notes,
    )
