"""Propose a `HardwareProfile` from nodes an admin picks (`kgwe profiles --from-nodes`, the proposal API).

The nodes are picked by name (`a,b`), by a kubectl-style label selector (`pool=train,gpu in (h100)`) or
by accelerator type. The proposal names their types (most GPUs first), the sharing the nodes are set up
for, a nodeSelector that selects the types (plus the selector's own `key=value` parts), tolerations for
non-GPU taints every node carries, and the configured price when the types share one. Anything the
proposal had to choose is said in `notes`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml

from policies.vocabulary import keys
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts, Taint
from webhook.config import Config
from webhook.inventory.numbers import price_text
from webhook.label_selector import equality_labels, looks_like_selector, parse_label_selector

API_VERSION = keys.API_VERSION
MAX_NAME = 63


class ProposalError(ValueError):
    """The selection names no usable GPU node; the message says why."""


class NoSuchNodes(ProposalError):
    """The selection matches no node at all."""


@dataclass
class ProfileProposal:
    object: dict[str, Any]
    nodes: list[str]
    notes: list[str] = field(default_factory=list)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.object, sort_keys=False, default_flow_style=False)

    def as_document(self) -> dict[str, Any]:
        """The proposal API's answer."""
        return {"yaml": self.to_yaml(), "object": self.object, "nodes": self.nodes, "notes": self.notes}


def select_nodes(model: ClusterModel, selection: str) -> list[NodeFacts]:
    """Nodes named in `selection` (comma-separated), or matching it as a label selector."""
    text = selection.strip()
    if not text:
        raise ProposalError("select nodes by name (a,b) or by label selector (key=value)")
    if looks_like_selector(text):
        try:
            selector = parse_label_selector(text)
        except ValueError as exc:
            raise ProposalError(str(exc)) from exc
        chosen = [model.nodes[n] for n in sorted(model.nodes) if selector.matches(model.nodes[n].labels)]
        if not chosen:
            raise NoSuchNodes(f"no node matches the label selector {text!r}")
        return chosen
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    missing = [n for n in names if n not in model.nodes]
    if missing:
        raise NoSuchNodes(f"no such node: {', '.join(missing)}")
    return [model.nodes[n] for n in names]


def nodes_of_type(model: ClusterModel, type_id: str) -> list[NodeFacts]:
    summary = model.types.get(type_id)
    if summary is None or not summary.nodes:
        raise NoSuchNodes(f"no node has accelerator type {type_id!r}; types: {', '.join(model.type_ids()) or 'none'}")
    return [model.nodes[n] for n in summary.nodes]


def _mode(facts: NodeFacts) -> str:
    if facts.mig_profiles and facts.mig_ready:
        return "mig"
    if facts.sharing in ("mps", "time-slicing"):
        return facts.sharing
    return "exclusive"


def _sharing(mode: str, nodes: list[NodeFacts], notes: list[str]) -> dict[str, Any]:
    if mode == "mig":
        devices: Counter[str] = Counter()
        everywhere = set(nodes[0].mig_profiles)
        for facts in nodes:
            devices.update(facts.mig_profiles)
            everywhere &= set(facts.mig_profiles)
        pool = everywhere or set(devices)
        if not everywhere:
            notes.append("no MIG profile is offered on every selected node; using the most plentiful one")
        profile = max(sorted(pool), key=lambda p: devices[p])
        others = sorted(set(devices) - {profile})
        if others:
            notes.append(f"the nodes also offer MIG {', '.join(others)}; propose one profile per slice size")
        return {"mode": "mig", "migProfile": profile}
    if mode == "mps":
        replicas = min(max(1, f.replicas) for f in nodes)
        return {"mode": "mps", "gpuFraction": round(1 / replicas, 4)}
    return {"mode": mode}


def _common_taints(nodes: list[NodeFacts], gpu_taint_keys: Sequence[str]) -> list[Taint]:
    """Taints every node carries, except GPU taints (admission tolerates those for any GPU pod)."""
    common = set(nodes[0].taints)
    for facts in nodes[1:]:
        common &= set(facts.taints)
    keys = tuple(gpu_taint_keys)
    return sorted(
        (t for t in common if t.effect in ("NoSchedule", "NoExecute") and not t.key.startswith(keys)),
        key=lambda t: (t.key, t.value or "", t.effect),
    )


def _toleration(taint: Taint) -> dict[str, Any]:
    if taint.value:
        return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def _product_name(model: ClusterModel, type_id: str) -> str:
    accel = model.table.get(type_id)
    return accel.product_name if accel is not None else type_id


def _name(types: list[str], sharing: dict[str, Any]) -> str:
    base = types[0] + (f"-plus{len(types) - 1}" if len(types) > 1 else "")
    mode = sharing["mode"]
    if mode == "mig":
        base += "-mig-" + str(sharing["migProfile"]).replace(".", "-").replace("+", "-")
    elif mode != "exclusive":
        base += f"-{mode}"
    return base[:MAX_NAME].rstrip("-")


def _display_name(products: list[str], sharing: dict[str, Any]) -> str:
    text = " / ".join(products)
    mode = sharing["mode"]
    if mode == "mig":
        return f"{text}, MIG {sharing['migProfile']}"
    if mode == "mps":
        return f"{text} (MPS, {sharing['gpuFraction']:g} GPU)"
    if mode == "time-slicing":
        return f"{text} (time-sliced)"
    return text


def propose_profile(
    model: ClusterModel,
    config: Config,
    *,
    selection: str | None = None,
    type_id: str | None = None,
    name: str | None = None,
) -> ProfileProposal:
    """A HardwareProfile for the nodes `selection` picks (names or label selector), or every node of `type_id`."""
    if selection:
        picked = select_nodes(model, selection)
    elif type_id:
        picked = nodes_of_type(model, type_id)
    else:
        raise ProposalError("say which nodes: names, a label selector, or an accelerator type")
    notes: list[str] = []
    typed = [f for f in picked if f.is_typed]
    skipped = [f.name for f in picked if not f.is_typed]
    if skipped:
        notes.append(f"skipped nodes without GPUs of a known type: {', '.join(skipped)}")
    if not typed:
        names = ", ".join(f.name for f in picked)
        raise ProposalError(f"none of the selected nodes has GPUs of a known type ({names})")

    # One sharing mode per profile: the one most of the selected GPUs are set up for.
    gpus_by_mode: Counter[str] = Counter()
    for facts in typed:
        gpus_by_mode[_mode(facts)] += max(1, facts.gpu_count)
    mode = max(sorted(gpus_by_mode), key=lambda m: gpus_by_mode[m])
    chosen = [f for f in typed if _mode(f) == mode]
    if len(chosen) < len(typed):
        left_out = [f.name for f in typed if _mode(f) != mode]
        notes.append(f"proposing {mode} for most of the GPUs; left out nodes set up otherwise: {', '.join(left_out)}")
    sharing = _sharing(mode, chosen, notes)

    gpus_by_type: Counter[str] = Counter()
    for facts in chosen:
        gpus_by_type[facts.accelerator_type] += facts.gpu_count
    types = sorted(gpus_by_type, key=lambda t: (-gpus_by_type[t], t))
    products = [_product_name(model, t) for t in types]

    node_selector: dict[str, str] = {}
    if len(types) == 1:
        selector = model.types[types[0]].selector()
        if selector is not None and len(selector[1]) == 1:
            node_selector[selector[0]] = selector[1][0]
    else:
        notes.append("several types: acceleratorTypes selects their nodes (a nodeSelector cannot name several)")
    if selection and looks_like_selector(selection):
        node_selector.update(equality_labels(selection))

    spec: dict[str, Any] = {
        "displayName": _display_name(products, sharing),
        "description": (
            f"Proposed by kgwe from {len(chosen)} node(s) with {sum(gpus_by_type.values())} GPUs: "
            + ", ".join(f.name for f in chosen[:5])
            + (f" and {len(chosen) - 5} more" if len(chosen) > 5 else "")
        ),
        "acceleratorTypes": types,
        "sharing": sharing,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    tolerations = [_toleration(t) for t in _common_taints(chosen, config.gpu_taint_keys)]
    if tolerations:
        spec["tolerations"] = tolerations
    prices = {config.price_per_gpu_hour(t) for t in types}
    if len(prices) == 1 and None not in prices:
        price = next(iter(prices))
        assert isinstance(price, Decimal)
        spec["pricePerGPUHour"] = price_text(price)
    elif len(prices) > 1:
        notes.append("the types have different prices: no pricePerGPUHour, each type keeps its configured price")
    else:
        notes.append(f"no price configured for {', '.join(types)}")
    obj = {
        "apiVersion": API_VERSION,
        "kind": "HardwareProfile",
        "metadata": {"name": name or _name(types, sharing)},
        "spec": spec,
    }
    return ProfileProposal(obj, [f.name for f in chosen], notes)
