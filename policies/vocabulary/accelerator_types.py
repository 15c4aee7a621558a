"""Canonical accelerator type ids (SPEC section 2) and the table that maps vendor names into them.

Shared by the node agent (which names the type of the GPUs it sees through NVML) and the webhook
(which names the type of a node from its labels). Pure data and pure functions: no I/O.

A type id is `<vendor>-<model>-<memory>gb` in lower case with memory in whole GB as marketed.
Product strings are data, never code: every source (NVML names, GFD product labels, GKE, Karpenter,
AKS instance types) goes through one alias table that an admin can extend in the configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from policies.vocabulary.product_names import normal_device_id, sanitise_product, slug, split_product

UNKNOWN = "unknown"
MIXED = "mixed"


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile of one GPU model, e.g. `1g.10gb` on an A100-80GB."""

    name: str
    compute_slices: int
    memory_gb: int
    max_instances: int

    @property
    def gpu_equivalents(self) -> float:
        # SPEC section 6: a MIG slice costs its compute slices over the GPU's seven.
        return self.compute_slices / 7


@dataclass(frozen=True)
class AcceleratorType:
    type_id: str
    product_name: str
    architecture: str
    memory_gb: int
    aliases: tuple[str, ...] = ()
    gke_names: tuple[str, ...] = ()
    karpenter_names: tuple[str, ...] = ()
    azure_instance_patterns: tuple[str, ...] = ()
    mig_profiles: tuple[MigProfile, ...] = ()
    nvswitch: bool = False
    vendor: str = "nvidia"
    # PCI device ids (lower-case hex, no 0x), as AMD's node labeller publishes them.
    device_ids: tuple[str, ...] = ()

    def mig_profile(self, name: str) -> MigProfile | None:
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        return None


def _mig(*specs: tuple[str, int]) -> tuple[MigProfile, ...]:
    profiles = []
    for name, max_instances in specs:
        match = re.fullmatch(r"(\d+)g\.(\d+)gb", name)
        if match is None:  # pragma: no cover - guarded by the table below
            raise ValueError(name)
        profiles.append(MigProfile(name, int(match.group(1)), int(match.group(2)), max_instances))
    return tuple(profiles)


_MIG_A100_40 = _mig(("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1))
_MIG_80 = _mig(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1))
_MIG_H100_NVL = _mig(("1g.12gb", 7), ("1g.24gb", 4), ("2g.24gb", 3), ("3g.47gb", 2), ("4g.47gb", 1), ("7g.94gb", 1))
_MIG_H200 = _mig(("1g.18gb", 7), ("1g.35gb", 4), ("2g.35gb", 3), ("3g.71gb", 2), ("4g.71gb", 1), ("7g.141gb", 1))
_MIG_B200 = _mig(("1g.23gb", 7), ("1g.45gb", 4), ("2g.45gb", 3), ("3g.90gb", 2), ("4g.90gb", 1), ("7g.180gb", 1))
_MIG_GB200 = _mig(("1g.23gb", 7), ("1g.47gb", 4), ("2g.47gb", 3), ("3g.93gb", 2), ("4g.93gb", 1), ("7g.186gb", 1))
_MIG_A30 = _mig(("1g.6gb", 4), ("2g.12gb", 2), ("4g.24gb", 1))

BUILTIN_TYPES: tuple[AcceleratorType, ...] = (
    AcceleratorType(
        "nvidia-h100-80gb",
        "NVIDIA H100 80GB",
        "hopper",
        80,
        aliases=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-SXM5-80GB", "NVIDIA-H100"),
        gke_names=("nvidia-h100-80gb", "nvidia-h100-mega-80gb"),
        karpenter_names=("h100",),
        azure_instance_patterns=(r"Standard_ND96isr_H100_v5", r"Standard_NC\d+ads_H100_v5"),
        mig_profiles=_MIG_80,
        nvswitch=True,
    ),
    AcceleratorType(
        "nvidia-h100-94gb",
        "NVIDIA H100 NVL 94GB",
        "hopper",
        94,
        aliases=("NVIDIA-H100-NVL",),
        mig_profiles=_MIG_H100_NVL,
    ),
    AcceleratorType(
        "nvidia-h200-141gb",
        "NVIDIA H200 141GB",
        "hopper",
        141,
        aliases=("NVIDIA-H200", "NVIDIA-H200-NVL", "NVIDIA-H200-SXM5-141GB", "NVIDIA-H200-141GB-HBM3e"),
        gke_names=("nvidia-h200-141gb",),
        karpenter_names=("h200",),
        azure_instance_patterns=(r"Standard_ND96isr_H200_v5",),
        mig_profiles=_MIG_H200,
        nvswitch=True,
    ),
    AcceleratorType(
        "nvidia-a100-80gb",
        "NVIDIA A100 80GB",
        "ampere",
        80,
        aliases=("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe", "A100-SXM4-80GB", "A100-80GB-PCIe"),
        gke_names=("nvidia-a100-80gb",),
        azure_instance_patterns=(r"Standard_ND96amsr_A100_v4", r"Standard_NC\d+ads_A100_v4"),
        mig_profiles=_MIG_80,
        nvswitch=True,
    ),
    AcceleratorType(
        "nvidia-a100-40gb",
        "NVIDIA A100 40GB",
        "ampere",
        40,
        aliases=("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB", "A100-SXM4-40GB", "A100-PCIE-40GB"),
        gke_names=("nvidia-tesla-a100",),
        azure_instance_patterns=(r"Standard_ND96asr_v4",),
        mig_profiles=_MIG_A100_40,
        nvswitch=True,
    ),
    AcceleratorType(
        "nvidia-a30-24gb",
        "NVIDIA A30 24GB",
        "ampere",
        24,
        aliases=("NVIDIA-A30",),
        mig_profiles=_MIG_A30,
    ),
    AcceleratorType(
        "nvidia-a10g-24gb",
        "NVIDIA A10G 24GB",
        "ampere",
        24,
        aliases=("NVIDIA-A10G",),
        karpenter_names=("a10g",),
    ),
    AcceleratorType(
        "nvidia-a10-24gb",
        "NVIDIA A10 24GB",
        "ampere",
        24,
        aliases=("NVIDIA-A10",),
        azure_instance_patterns=(r"Standard_NV\d+ads_A10_v5", r"Standard_NC\d+ads_A10_v4"),
    ),
    AcceleratorType(
        "nvidia-l4-24gb",
        "NVIDIA L4 24GB",
        "ada-lovelace",
        24,
        aliases=("NVIDIA-L4",),
        gke_names=("nvidia-l4",),
        karpenter_names=("l4",),
    ),
    AcceleratorType(
        "nvidia-l40s-48gb",
        "NVIDIA L40S 48GB",
        "ada-lovelace",
        48,
        aliases=("NVIDIA-L40S",),
        karpenter_names=("l40s",),
    ),
    AcceleratorType(
        "nvidia-v100-16gb",
        "NVIDIA V100 16GB",
        "volta",
        16,
        aliases=("Tesla-V100-SXM2-16GB", "Tesla-V100-PCIE-16GB"),
        gke_names=("nvidia-tesla-v100",),
        karpenter_names=("v100",),
        nvswitch=False,
    ),
    AcceleratorType(
        "nvidia-t4-16gb",
        "NVIDIA T4 16GB",
        "turing",
        16,
        aliases=("Tesla-T4", "NVIDIA-T4"),
        gke_names=("nvidia-tesla-t4",),
        karpenter_names=("t4",),
        azure_instance_patterns=(r"Standard_NC\d+as_T4_v3",),
    ),
    AcceleratorType(
        "nvidia-b200-180gb",
        "NVIDIA B200 180GB",
        "blackwell",
        180,
        aliases=("NVIDIA-B200",),
        gke_names=("nvidia-b200",),
        karpenter_names=("b200",),
        mig_profiles=_MIG_B200,
        nvswitch=True,
    ),
    AcceleratorType(
        "nvidia-gb200-186gb",
        "NVIDIA GB200 186GB",
        "blackwell",
        186,
        aliases=("NVIDIA-GB200",),
        gke_names=("nvidia-gb200",),
        mig_profiles=_MIG_GB200,
        nvswitch=True,
    ),
    # AMD Instinct: aliases are the product names AMD's node labeller publishes (`amd.com/gpu.product-name`,
    # e.g. `AMD_Instinct_MI300X_OAM`); device ids are the PCI ids it publishes as `amd.com/gpu.device-id`.
    AcceleratorType(
        "amd-mi300x-192gb",
        "AMD Instinct MI300X 192GB",
        "cdna3",
        192,
        aliases=("AMD-Instinct-MI300X", "AMD-Instinct-MI300X-OAM", "AMD-Instinct-MI300X-HF", "MI300X"),
        vendor="amd",
        device_ids=("74a1", "74a9"),
    ),
    AcceleratorType(
        "amd-mi325x-256gb",
        "AMD Instinct MI325X 256GB",
        "cdna3",
        256,
        aliases=("AMD-Instinct-MI325X", "AMD-Instinct-MI325X-OAM", "AMD-Instinct-MI325-OAM", "MI325X"),
        vendor="amd",
        device_ids=("74a5",),
    ),
    AcceleratorType(
        "amd-mi210-64gb",
        "AMD Instinct MI210 64GB",
        "cdna2",
        64,
        aliases=("AMD-Instinct-MI210", "MI210"),
        vendor="amd",
        device_ids=("740f",),
    ),
)


@dataclass
class AcceleratorTable:
    """The alias table: every vendor spelling maps to one type id. Admins extend it via configuration."""

    types: dict[str, AcceleratorType] = field(default_factory=dict)
    _by_alias: dict[str, str] = field(default_factory=dict)
    _by_gke: dict[str, str] = field(default_factory=dict)
    _by_karpenter: dict[str, list[str]] = field(default_factory=dict)
    _azure: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    _by_device_id: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, extra: Iterable[AcceleratorType] = ()) -> AcceleratorTable:
        table = cls()
        for accel in (*BUILTIN_TYPES, *extra):
            table.add(accel)
        return table

    def add(self, accel: AcceleratorType) -> None:
        self.types[accel.type_id] = accel
        for alias in (*accel.aliases, accel.product_name):
            self._by_alias[sanitise_product(alias).lower()] = accel.type_id
        for name in accel.gke_names:
            self._by_gke[name.lower()] = accel.type_id
        for name in accel.karpenter_names:
            self._by_karpenter.setdefault(name.lower(), []).append(accel.type_id)
        for pattern in accel.azure_instance_patterns:
            self._azure.append((re.compile(pattern, re.IGNORECASE), accel.type_id))
        for device_id in accel.device_ids:
            self._by_device_id[normal_device_id(device_id)] = accel.type_id

    def get(self, type_id: str) -> AcceleratorType | None:
        return self.types.get(type_id)

    def from_product(self, product: str, memory_mib: int | None = None) -> str:
        """Type id of a GFD product label or an NVML device name; fallback model + round(MiB/1024)."""
        base, _profile, _shared = split_product(product)
        known = self._by_alias.get(base.lower()) or self._by_alias.get(base.lower().replace("_", "-"))
        if known:
            return known
        without_vendor = re.sub(r"^(nvidia|tesla)[-_ ]", "", base, flags=re.IGNORECASE)
        known = self._by_alias.get(f"nvidia-{without_vendor}".lower())
        if known:
            return known
        if memory_mib is None or memory_mib <= 0:
            return UNKNOWN
        vendor = "amd" if base.lower().startswith("amd") else "nvidia"
        model = slug(re.sub(r"^(nvidia[-_ ]|tesla[-_ ]|amd[-_ ](instinct[-_ ])?)", "", base, flags=re.IGNORECASE))
        model = re.sub(r"-(oam|sxm\d?|pcie)$", "", model) or model
        model = re.sub(r"-?\d+gb$", "", model) or model
        return f"{vendor}-{model}-{round(memory_mib / 1024)}gb"

    def from_amd(self, product: str | None, device_id: str | None, vram_gb: int | None) -> str:
        """Type id of an AMD GPU from AMD's node labeller: product name, else PCI device id, else the
        fallback model + VRAM (`amd-<model>-<GB>gb`); `unknown` when nothing identifies it."""
        if product:
            type_id = self.from_product(product if product.lower().startswith("amd") else f"AMD-{product}")
            if type_id != UNKNOWN:
                return type_id
        if device_id:
            known = self._by_device_id.get(normal_device_id(device_id))
            if known:
                return known
        if product and vram_gb:
            return self.from_product(
                product if product.lower().startswith("amd") else f"AMD-{product}", vram_gb * 1024
            )
        return UNKNOWN

    def from_gke(self, accelerator: str) -> str:
        return self._by_gke.get(accelerator.lower(), UNKNOWN)

    def from_karpenter(self, gpu_name: str, memory_mib: int | None) -> str:
        candidates = self._by_karpenter.get(gpu_name.lower(), [])
        if len(candidates) == 1:
            return candidates[0]
        if memory_mib:
            gb = round(memory_mib / 1024)
            for type_id in candidates:
                if abs(self.types[type_id].memory_gb - gb) <= 2:
                    return type_id
            return f"nvidia-{slug(gpu_name)}-{gb}gb"
        return UNKNOWN

    def from_azure_instance(self, instance_type: str) -> str:
        for pattern, type_id in self._azure:
            if pattern.fullmatch(instance_type):
                return type_id
        return UNKNOWN

    def memory_gb(self, type_id: str) -> int | None:
        """Marketed memory of a type: from the table, else from the id's `<N>gb` suffix."""
        accel = self.types.get(type_id)
        if accel is not None:
            return accel.memory_gb
        match = re.search(r"-(\d+)gb$", type_id)
        return int(match.group(1)) if match else None


def extra_types_from_config(entries: Iterable[Mapping[str, object]]) -> list[AcceleratorType]:
    """Admin extensions of the table, from the configuration's `acceleratorTypes` list."""
    extra: list[AcceleratorType] = []
    for entry in entries:
        type_id = str(entry["id"])
        memory = entry.get("memoryGB") or re.search(r"-(\d+)gb$", type_id)
        memory_gb = int(memory.group(1)) if isinstance(memory, re.Match) else int(str(memory or 0))
        profiles = tuple(
            MigProfile(str(p["name"]), int(p["computeSlices"]), int(p["memoryGB"]), int(p.get("maxInstances", 1)))
            for p in entry.get("migProfiles", []) or []  # type: ignore[attr-defined]
        )
        extra.append(
            AcceleratorType(
                type_id=type_id,
                product_name=str(entry.get("productName", type_id)),
                architecture=str(entry.get("architecture", "unknown")),
                memory_gb=memory_gb,
                aliases=tuple(str(a) for a in entry.get("aliases", []) or []),  # type: ignore[attr-defined]
                gke_names=tuple(str(a) for a in entry.get("gke", []) or []),  # type: ignore[attr-defined]
                karpenter_names=tuple(str(a) for a in entry.get("karpenter", []) or []),  # type: ignore[attr-defined]
                azure_instance_patterns=tuple(
                    str(a)
                    for a in entry.get("azureInstanceTypes", []) or []  # type: ignore[attr-defined]
                ),
                mig_profiles=profiles,
                nvswitch=bool(entry.get("nvswitch", False)),
                vendor=str(entry.get("vendor", type_id.split("-", 1)[0])),
                device_ids=tuple(str(a) for a in entry.get("deviceIds", []) or []),  # type: ignore[attr-defined]
            )
        )
    return extra


@lru_cache(maxsize=1)
def default_table() -> AcceleratorTable:
    return AcceleratorTable.build()
