"""The HardwareProfile view (`/api/v1/hardware-profiles`, the UI's profile cards, `kgwe profiles`): per
profile, its accelerator types with their total, available and pending capacity under the profile's
sharing mode, its price per GPU-hour and per unit a pod gets (a MIG slice, an MPS share, a GPU)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from policies.vocabulary.objects import ObjectView, mapping
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.inventory.capacity import Inventory
from webhook.inventory.numbers import ZERO, money_text, number, price_text, utc_stamp


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


def profile_price(spec: Mapping[str, Any], config: Config) -> Decimal | None:
    """The profile's price, else the configured price of its first type."""
    own = _decimal(spec.get("pricePerGPUHour"))
    if own is not None:
        return own
    types = [str(t) for t in spec.get("acceleratorTypes") or []]
    return config.price_per_gpu_hour(types[0]) if types else None


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


def hardware_profiles_view(inventory: Inventory) -> dict[str, Any]:
    model, config = inventory.model, inventory.config
    profiles = []
    for name in sorted(model.hardware_profiles):
        obj = model.hardware_profiles[name]
        spec = ObjectView(obj).spec
        sharing = _profile_sharing(spec)
        display = str(spec.get("displayName") or name)
        rows = []
        totals = [ZERO, ZERO, ZERO]
        for type_id in (str(t) for t in spec.get("acceleratorTypes") or []):
            accel = model.table.get(type_id)
            counts = inventory.profile_counts(type_id, sharing)
            totals = [a + b for a, b in zip(totals, counts, strict=True)]
            rows.append({
                "id": type_id,
                "productName": accel.product_name if accel else None,
                "memoryGB": model.table.memory_gb(type_id),
                "architecture": accel.architecture if accel else None,
                "total": number(counts[0]),
                "available": number(counts[1]),
                "pending": number(counts[2]),
            })
        price = profile_price(spec, config)
        unit_price, unit = unit_price_of(price, sharing, model, [str(t) for t in spec.get("acceleratorTypes") or []])
        products = ", ".join(str(r["productName"] or r["id"]) for r in rows) or "no accelerator types"
        profiles.append({
            "name": name,
            "displayName": display,
            "description": str(spec.get("description") or ""),
            "sharing": sharing,
            "pricePerGPUHour": price_text(price) if price is not None else None,
            # What a pod of this profile gets and pays per hour: a MIG slice or MPS share, not a whole GPU.
            "pricePerUnitHour": money_text(unit_price) if unit_price is not None else None,
            "unit": unit,
            "acceleratorTypes": rows,
            "total": number(totals[0]),
            "available": number(totals[1]),
            "pending": number(totals[2]),
            "summary": f"{display} ({products}) - {number(totals[1])} available",
        })
    return {"generatedAt": utc_stamp(inventory.generated_at), "currency": config.pricing.currency, "profiles": profiles}
