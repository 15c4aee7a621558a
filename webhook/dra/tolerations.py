"""Device taints as a pod sees them: which of its tolerations a KGWE claim carries to the devices.

A DRA device tainted `NoSchedule` or `NoExecute` (webhook/cluster/device_model.py) is allocated only to a
request whose `tolerations` tolerate the taint. KGWE writes the claim, so it decides what the claim
tolerates, from what the pod tolerates: a toleration of the pod (or of its HardwareProfile, or one KGWE
adds for GPU nodes) that names a key and tolerates a `NoSchedule` or `NoExecute` taint some GPU device of
the pod's types carries is written on each GPU request, as a DeviceToleration (same fields; effect
`NoSchedule`, `NoExecute` or none). A toleration without a key (tolerate everything) is not carried: a
pod that tolerates every node taint has not said it wants a GPU its driver marked broken; name the device
taint's key.

Every device taint of a type is collected once per snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from webhook.cluster.device_model import DeviceTaint, tolerates
from webhook.cluster.model import ClusterModel

MAX_TOLERATIONS = 16  # the API's limit per request
_DERIVED = "dra.device_taints"
DEVICE_EFFECTS = ("", "NoSchedule", "NoExecute")


def type_taints(model: ClusterModel) -> dict[str, frozenset[DeviceTaint]]:
    """type -> every taint its nodes' DRA devices carry (per snapshot)."""
    known: dict[str, frozenset[DeviceTaint]] | None = model.derived.get(_DERIVED)
    if known is None:
        collected: dict[str, set[DeviceTaint]] = {}
        for facts in model.nodes.values():
            if facts.dra is None or not facts.accelerator_type:
                continue
            for device in (*facts.dra.gpus, *facts.dra.mig):
                if device.taints:
                    collected.setdefault(device.type_id if device.type_id != "unknown" else facts.accelerator_type,
                                         set()).update(device.taints)
        known = {t: frozenset(taints) for t, taints in collected.items()}
        model.derived[_DERIVED] = known
    return known


def _device_toleration(toleration: Mapping[str, Any]) -> dict[str, Any] | None:
    key = toleration.get("key")
    effect = toleration.get("effect") or ""
    operator = toleration.get("operator") or "Equal"
    if not isinstance(key, str) or not key or effect not in DEVICE_EFFECTS or operator not in ("Equal", "Exists"):
        return None
    out: dict[str, Any] = {"key": key, "operator": operator}
    if operator == "Equal":
        out["value"] = str(toleration.get("value") or "")
    if effect:
        out["effect"] = effect
    seconds = toleration.get("tolerationSeconds")
    if effect == "NoExecute" and isinstance(seconds, int) and not isinstance(seconds, bool):
        out["tolerationSeconds"] = seconds
    return out


def device_tolerations(
    tolerations: Iterable[Mapping[str, Any]], model: ClusterModel, types: Iterable[str]
) -> list[dict[str, Any]]:
    """The DeviceTolerations a claim for `types` carries: those of `tolerations` that tolerate a taint that
    keeps some device of these types from claims (sorted, without repeats, at most 16)."""
    taints = type_taints(model)
    published = {taint for t in types for taint in taints.get(t, ()) if taint.blocking}
    if not published:
        return []
    out: dict[bytes, dict[str, Any]] = {}
    for toleration in tolerations:
        if not isinstance(toleration, Mapping):
            continue
        device = _device_toleration(toleration)
        if device is not None and any(tolerates(device, taint) for taint in published):
            out[orjson.dumps(device, option=orjson.OPT_SORT_KEYS)] = device
    return [out[k] for k in sorted(out)][:MAX_TOLERATIONS]
