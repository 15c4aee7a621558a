"""Where a pending pod counts among the hardware profiles: on one profile and one of its types, never on
two. A pod that may land on several types (or fits several profiles) is one pod waiting: counting it on
each would show more demand than there is, and the same pod on two cards.

The profile is the one the pod named (`kgwe.io/profile`), else, of the profiles that offer one of its types
in the way it asks (a MIG slice of its profile, a sharing mode it named, whole GPUs otherwise), the most
specific (the fewest types the pod did not ask for; then the first in the view's order); the type is its
first candidate type the profile has (the webhook writes them in order of preference). Amounts are in the
profile's unit: slices for MIG, physical GPUs otherwise (a shared node's replicas folded back, as
`Inventory.profile_counts` counts capacity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from webhook.inventory.capacity import SHARED_MODES, Inventory, PendingPod
from webhook.inventory.numbers import ZERO


@dataclass(frozen=True)
class ProfileOffer:
    """What a profile offers, as far as pending pods go."""

    name: str
    types: Sequence[str]
    mode: str  # exclusive | mig | mps | time-slicing
    mig_profile: str | None = None


def _fits(pod: PendingPod, offer: ProfileOffer) -> bool:
    if not set(pod.types) & set(offer.types):
        return False
    if offer.mode == "mig":
        return offer.mig_profile in pod.mig
    if not pod.whole_gpus:
        return False
    asked = pod.sharing if pod.sharing in SHARED_MODES else "exclusive"
    return asked == offer.mode


def _amount(pod: PendingPod, offer: ProfileOffer, type_id: str, inventory: Inventory) -> Decimal:
    if offer.mode == "mig":
        return Decimal(pod.mig.get(offer.mig_profile or "", 0))
    if offer.mode in SHARED_MODES:
        capacity = inventory.types.get(type_id)
        bucket = capacity.shared.get(offer.mode) if capacity is not None else None
        return Decimal(pod.whole_gpus) / max(1, bucket.min_replicas if bucket is not None else 1)
    return Decimal(pod.whole_gpus)


@dataclass
class Pending:
    """Per profile and type, what pending pods ask (in the profile's unit), and how many pods."""

    amounts: dict[tuple[str, str], Decimal]
    pods: dict[str, int]

    def amount(self, profile: str, type_id: str) -> Decimal:
        return self.amounts.get((profile, type_id), ZERO)


def pending_by_profile(inventory: Inventory, offers: Sequence[ProfileOffer]) -> Pending:
    """Each pending pod of `inventory` counted once, on the profile and type it would be served from."""
    by_name: Mapping[str, ProfileOffer] = {offer.name: offer for offer in offers}
    amounts: dict[tuple[str, str], Decimal] = {}
    pods: dict[str, int] = {}
    for pod in inventory.pending:
        named = by_name.get(pod.profile or "")
        if named is not None and set(pod.types) & set(named.types):
            offer: ProfileOffer | None = named
        else:
            # The most specific profile that offers it: the fewest types the pod did not ask for.
            fitting = [o for o in offers if _fits(pod, o)]
            offer = min(fitting, key=lambda o: len(set(o.types) - set(pod.types)), default=None)
        if offer is None:
            continue
        type_id = next(t for t in pod.types if t in offer.types)
        amounts[(offer.name, type_id)] = amounts.get((offer.name, type_id), ZERO) + _amount(
            pod, offer, type_id, inventory)
        pods[offer.name] = pods.get(offer.name, 0) + 1
    return Pending(amounts, pods)
