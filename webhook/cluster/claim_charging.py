"""What the quota wing asks of the DRA wing: the GPUs pods hold or ask through ResourceClaims of their own.

Quotas count DRA devices like device-plugin GPUs (SPEC section 9), but the quota wing must not import the
DRA wing (the wings are independent: docs/architecture.md). This slot is the seam between them: the DRA
wing's `webhook/dra/charges.py` fills it (webhook/assembly.py `register_model_wings`), the quota wing reads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from policies.quota.model import PodCharge
from webhook.cluster.model import ClusterModel
from webhook.dra_rendering import DraRendering
from webhook.ordered_seam import SeamSlot


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


CLAIM_CHARGING: SeamSlot[ClaimCharging] = SeamSlot("the DRA wing's claim charges")
