"""What the quota wing and the read side ask of the DRA wing: the GPUs pods hold or ask through ResourceClaims
of their own, as quota charges and, for costs, who pays for what each allocated claim holds.

Quotas count DRA devices like device-plugin GPUs (SPEC section 9), and the inventory and the cost history
price them, but none of them may import the DRA wing (only the assembly imports a wing: docs/architecture.md).
This slot is the seam between them: the DRA wing's `webhook/dra/charges.py` fills it (webhook/assembly.py
`register_model_wings`); the quota charges (webhook/quota_charges.py), the inventory and the spend read it.
What a held device is (`HeldGpu`, `ClaimHold`) is vocabulary both sides share, so it lives here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from policies.quota.model import PodCharge
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.dra_rendering import DraRendering
from webhook.ordered_seam import SeamSlot


@dataclass(frozen=True)
class HeldGpu:
    """One GPU device an allocated claim holds."""

    type_id: str
    equivalents: Decimal  # 1 for a whole GPU, compute slices / 7 for a MIG device
    memory_bytes: Decimal | None
    mig: bool = False  # a MIG device (a slice of a GPU), not a whole GPU


@dataclass(frozen=True)
class ClaimHold:
    """What one allocated claim a pod pays for holds."""

    claim: str  # namespace/name
    containers: tuple[str, ...]
    gpus: tuple[HeldGpu, ...]


class ClaimHolders(Protocol):
    """One snapshot's claims with their payers (a claim several pods name is paid for once)."""

    def held(self, pod: PodView | Mapping[str, Any]) -> list[ClaimHold]:
        """The allocated claims the pod pays for, with the GPU devices each holds (none: it pays for none)."""
        ...


class ClaimCharges(Protocol):
    """One snapshot's claims, read once, charged per pod."""

    def charges(self, pod: dict[str, Any]) -> list[PodCharge]: ...


class ClaimCharging(Protocol):
    def claim_charges(self, model: ClusterModel, mapped: Mapping[str, str]) -> ClaimCharges:
        """The snapshot's claims ready to charge pods (`mapped`: extended resource -> DeviceClass)."""
        ...

    def claimed_charges(self, model: ClusterModel) -> Iterator[tuple[dict[str, Any], list[PodCharge]]]:
        """Every unfinished pod with claims or DRA devices of its own, and what they charge."""
        ...

    def asks_own_devices(
        self, pod: Mapping[str, Any], rendering: DraRendering | None, device_classes: Mapping[str, Mapping[str, Any]]
    ) -> bool:
        """At admission: whether the pod asks DRA for devices of its own, past what KGWE rendered for it."""
        ...

    def claim_holders(self, model: ClusterModel) -> ClaimHolders:
        """The snapshot's claim payers, made once per snapshot (costs: the inventory, the spend)."""
        ...


CLAIM_CHARGING: SeamSlot[ClaimCharging] = SeamSlot("the DRA wing's claim charges")
