"""The HardwareProfile view (`/api/v1/hardware-profiles`, the UI's profile cards, `kgwe profiles`): per
profile, its accelerator types with their total, available and pending capacity under the profile's
sharing mode, and what a pod of it pays: per type (the profile's own price, else the type's configured
one) and as a range over the types it can be given now, per GPU-hour and per unit a pod gets (a MIG
slice, an MPS share, a GPU), to the cent. Each pending pod counts once (webhook/inventory/profile_pending.py)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from policies.vocabulary.objects import ObjectView, mapping
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.inventory.capacity import Inventory
from webhook.inventory.numbers import ZERO, cents_text, number, price_text, utc_stamp
from webhook.inventory.profile_pending import ProfileOffer, pending_by_profile


def _profile_sharing(spec: Mapping[str, Any]) -> dict[str, Any]:
    raw = mapping(spec.get("sharing"))
    mode = str(raw.get("mode") or "exclusive")
    out: dict[str, Any] = {"mode": mode}
    if mode == "mig" and raw.get("migProfile"):
        out["migProfile"] = str(raw["migProfile"])
    if mode == "mps" and raw.get("gpuFraction") is not None:
        fraction = _decimal(raw["gpuFraction"])
        if fraction is not None:
            out["gpuFraction"] = float(fraction)
    return out


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value)) if value is not None else None
    except InvalidOperation:
        return None


def profile_price(spec: Mapping[str, Any], config: Config, type_id: str) -> Decimal | None:
    """What a GPU of `type_id` costs per hour under the profile: its own price, else the type's configured
    one (as webhook/costs.py prices a pod of the profile)."""
    own = _decimal(spec.get("pricePerGPUHour"))
    return own if own is not None else config.price_per_gpu_hour(type_id)


def unit_price_of(
    price: Decimal | None, sharing: dict[str, Any], model: ClusterModel, types: list[str]
) -> tuple[Decimal | None, str]:
    """(price per hour of what one pod unit of the profile gets, what that unit is), by the cost rule of
    docs/costs.md: a MIG slice is its compute slices / 7 of a GPU, an MPS share its gpuFraction."""
    mode = sharing.get("mode")
    if mode == "mig" and sharing.get("migProfile"):
        name = str(sharing["migProfile"])
        slices = next((p.compute_slices for t in types if (a := model.table.get(t)) for p in a.mig_profiles
                       if p.name == name), None)
        if slices is None:
            return None, f"MIG {name} slice"
        share = Decimal(slices) / 7
        return (price * share if price is not None else None), f"MIG {name} slice ({slices}/7 GPU)"
    if mode == "mps" and sharing.get("gpuFraction") is not None:
        fraction = Decimal(str(sharing["gpuFraction"]))
        return (price * fraction if price is not None else None), f"MPS share ({number(fraction)} GPU)"
    if mode == "time-slicing":
        return None, "time-sliced replica (priced per node: 1 / its replicas)"
    return price, "GPU"


def _price_range(rows: list[dict[str, Any]], prices: dict[str, tuple[Decimal | None, Decimal | None]]
                 ) -> dict[str, Any] | None:
    """min and max of what a pod pays on the types it can be given now (any free), else on every type
    (then `now` is false: nothing is free, this is what it will pay when something frees up)."""
    priced = [r["id"] for r in rows if prices[r["id"]][0] is not None]
    free = [t for t in priced if next(r for r in rows if r["id"] == t)["available"]]
    chosen = free or priced
    if not chosen:
        return None
    per_gpu = [p for t in chosen if (p := prices[t][0]) is not None]
    per_unit = [p for t in chosen if (p := prices[t][1]) is not None]
    return {
        "now": bool(free),
        "types": chosen,
        "perGPUHour": {"min": cents_text(min(per_gpu)), "max": cents_text(max(per_gpu))},
        "perUnitHour": {"min": cents_text(min(per_unit)), "max": cents_text(max(per_unit))} if per_unit else None,
    }


def hardware_profiles_view(inventory: Inventory) -> dict[str, Any]:
    model, config = inventory.model, inventory.config
    specs = {name: ObjectView(model.hardware_profiles[name]).spec for name in sorted(model.hardware_profiles)}
    sharings = {name: _profile_sharing(spec) for name, spec in specs.items()}
    pending = pending_by_profile(inventory, [
        ProfileOffer(name, [str(t) for t in spec.get("acceleratorTypes") or []], str(sharings[name]["mode"]),
                     sharings[name].get("migProfile"))
        for name, spec in specs.items()
    ])
    profiles = []
    for name, spec in specs.items():
        sharing = sharings[name]
        display = str(spec.get("displayName") or name)
        rows = []
        prices: dict[str, tuple[Decimal | None, Decimal | None]] = {}
        totals = [ZERO, ZERO, ZERO]
        units: list[tuple[bool, str]] = []  # (priced, what a pod gets) per type: the first priced one names it
        for type_id in (str(t) for t in spec.get("acceleratorTypes") or []):
            accel = model.table.get(type_id)
            total, available, _counted_on_each = inventory.profile_counts(type_id, sharing)
            waiting = pending.amount(name, type_id)
            totals = [a + b for a, b in zip(totals, (total, available, waiting), strict=True)]
            price = profile_price(spec, config, type_id)
            unit_price, type_unit = unit_price_of(price, sharing, model, [type_id])
            units.append((unit_price is not None, type_unit))
            prices[type_id] = (price, unit_price)
            rows.append({
                "id": type_id,
                "productName": accel.product_name if accel else None,
                "memoryGB": model.table.memory_gb(type_id),
                "architecture": accel.architecture if accel else None,
                "total": number(total),
                "available": number(available),
                "pending": number(waiting),
                "pricePerGPUHour": price_text(price) if price is not None else None,
                "pricePerUnitHour": cents_text(unit_price) if unit_price is not None else None,
            })
        unit = next((u for priced, u in units if priced), units[0][1] if units else unit_price_of(
            None, sharing, model, [])[1])
        price_range = _price_range(rows, prices)
        products = ", ".join(str(r["productName"] or r["id"]) for r in rows) or "no accelerator types"
        profiles.append({
            "name": name,
            "displayName": display,
            "description": str(spec.get("description") or ""),
            "sharing": sharing,
            # The low end of `priceRange` (single-type profiles: their one price), kept for older readers.
            "pricePerGPUHour": price_range["perGPUHour"]["min"] if price_range else None,
            # What a pod of this profile gets and pays per hour: a MIG slice or MPS share, not a whole GPU.
            "pricePerUnitHour": (price_range["perUnitHour"] or {}).get("min") if price_range else None,
            "priceRange": price_range,
            "unit": unit,
            "acceleratorTypes": rows,
            "total": number(totals[0]),
            "available": number(totals[1]),
            "pending": number(totals[2]),
            "pendingPods": pending.pods.get(name, 0),
            "summary": f"{display} ({products}) - {number(totals[1])} available",
        })
    return {"generatedAt": utc_stamp(inventory.generated_at), "currency": config.pricing.currency, "profiles": profiles}
