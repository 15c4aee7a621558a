"""The MIG layout of one node that best serves what is wanted (pure; SPEC section 11).

Per GPU, greedily: the valid layout (webhook/migplan/layouts.py) whose instances serve the most weighted
wanted compute slices still unserved (waiting pods before recommended workloads), then the strategy's
preferred mix, then the fewest idle slices; ties go to the layout the node has now, then a fixed order, so
the same cluster gives the same plan. A GPU nothing is wanted of keeps the node's current per-GPU layout
(the GPU operator's `all-balanced` when that cannot be read). Under the single strategy every GPU gets the
same one-profile layout, as GFD requires.

A node is left as it is, and the plan says why, when its GPUs hold any running pod (KGWE never evicts and the
MIG manager would fail on a GPU in use), when the MIG manager is busy with it, when nothing it would serve
differs from now, or when the demand would fill less than `minUtilization` of its slices.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from policies.vocabulary.mig_geometry import MIG_RULES, compute_slices
from webhook.migplan.demand import Want
from webhook.migplan.layouts import Layout, compute_of, layout_of, maximal_layouts, valid

UNSETTLED_STATES = ("pending", "rebooting")


@dataclass
class Wanted:
    """The wants still unserved, as slices left per want; the planner takes from it node after node."""

    wants: list[Want]
    left: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.left:
            self.left = [w.slices for w in self.wants]

    def copy(self) -> Wanted:
        return Wanted(self.wants, list(self.left))


@dataclass(frozen=True)
class NodeInput:
    """What the planner needs of one node (from its facts, webhook/migplan/views.py)."""

    name: str
    type_id: str
    gpus: int
    strategy: str  # mixed | single
    current: dict[str, int]  # profile -> MIG devices on the node now
    config_label: str | None  # nvidia.com/mig.config now
    config_state: str | None  # nvidia.com/mig.config.state now
    running_pods: tuple[str, ...]  # namespace/name of pods holding its GPUs


@dataclass
class NodePlan:
    node: str
    type_id: str
    gpus: int
    action: str  # change | keep
    reason: str
    current: dict[str, int]
    planned: dict[str, int]
    layouts: list[Layout]  # per GPU, index = GPU index
    serves: list[tuple[str, str, str, int]] = field(default_factory=list)  # (source, who, profile, slices)
    fill: float = 0.0  # share of the node's compute slices the served wants fill


def _units(wanted: Wanted, type_id: str) -> dict[str, list[tuple[int, int]]]:
    """Per profile of this type: (weight, want index) per unserved slice, heaviest first."""
    out: dict[str, list[tuple[int, int]]] = {}
    for index, want in enumerate(wanted.wants):
        profile = want.profile_on(type_id)
        if profile is not None and wanted.left[index] > 0:
            out.setdefault(profile, []).extend([(want.weight, index)] * wanted.left[index])
    for units in out.values():
        units.sort(key=lambda unit: (-unit[0], unit[1]))
    return out


def _score(layout: Layout, units: dict[str, list[tuple[int, int]]], preferred: Counter[str],
           current: Layout | None) -> tuple[int, int, int, int]:
    served = sum(weight * compute_slices(p) for p, n in layout for weight, _i in units.get(p, [])[:n])
    liked = sum(min(n, preferred[p]) * compute_slices(p) for p, n in layout)
    return served, liked, compute_of(layout), int(layout == current)


def _take(layout: Layout, units: dict[str, list[tuple[int, int]]], wanted: Wanted,
          preferred: Counter[str]) -> list[tuple[int, str]]:
    """Serve what the layout holds: (want index, profile) per slice served; preferred counts go down too."""
    taken: list[tuple[int, str]] = []
    for profile, count in layout:
        for _weight, index in units.get(profile, [])[:count]:
            wanted.left[index] -= 1
            taken.append((index, profile))
        units[profile] = units.get(profile, [])[count:]
        preferred[profile] = max(0, preferred[profile] - count)
    return taken


def current_layout(node: NodeInput) -> Layout | None:
    """The node's per-GPU layout when every GPU has the same one (the usual `devices: all` config)."""
    if node.gpus <= 0 or not node.current or any(n % node.gpus for n in node.current.values()):
        return None
    layout = tuple(sorted((p, n // node.gpus) for p, n in node.current.items()))
    return layout if valid(node.type_id, layout) else None


def _candidates(node: NodeInput) -> tuple[Layout, ...]:
    found = maximal_layouts(node.type_id)
    if node.strategy == "single":
        rules = MIG_RULES[node.type_id]
        # One profile per GPU, as many as fit (7x1g, 4x1g double, 3x2g, 2x3g, 1x4g, 1x7g).
        found = tuple(layout_of([p] * max(n for n in range(1, 8) if valid(node.type_id, ((p, n),))))
                      for p in sorted(rules.memory_slices) if valid(node.type_id, ((p, 1),)))
    return found


def preferred_counts(type_id: str, gpus: int, preferred: list[tuple[str, float]]) -> Counter[str]:
    """Instances of each preferred profile the node should have: its share of the node's compute slices."""
    total = MIG_RULES[type_id].geometry.compute_slices * gpus
    out: Counter[str] = Counter()
    for profile, share in preferred:
        if profile in MIG_RULES[type_id].memory_slices:
            out[profile] += int(share * total) // compute_slices(profile)
    return out


def plan_node(node: NodeInput, wanted: Wanted, preferred: list[tuple[str, float]],
              min_utilization: float) -> NodePlan:
    """The node's plan; `wanted` loses what the plan serves when the plan changes the node."""
    plan = NodePlan(node.name, node.type_id, node.gpus, "keep", "", dict(node.current),
                    dict(node.current), [])
    if node.running_pods:
        shown = ", ".join(node.running_pods[:3]) + (" ..." if len(node.running_pods) > 3 else "")
        plan.reason = f"its GPUs hold {len(node.running_pods)} running pod(s) ({shown}): KGWE never evicts"
        return plan
    if node.config_state in UNSETTLED_STATES:
        plan.reason = f"the MIG manager is reconfiguring it (nvidia.com/mig.config.state={node.config_state})"
        return plan
    trial = wanted.copy()
    units = _units(trial, node.type_id)
    liked = preferred_counts(node.type_id, node.gpus, preferred)
    now = current_layout(node)
    idle = now or layout_of(MIG_RULES[node.type_id].balanced)
    candidates = _candidates(node)
    taken: list[tuple[int, str]] = []
    if node.strategy == "single":
        best = max(candidates, key=lambda c: (_score(layout_of([p for p, n in c for _ in range(n * node.gpus)]),
                                                     units, liked, None), c == now, c))
        plan.layouts = [best] * node.gpus
        for _gpu in range(node.gpus):
            taken += _take(best, units, trial, liked)
    else:
        for _gpu in range(node.gpus):
            best = max(candidates, key=lambda c: (_score(c, units, liked, now), c))
            if _score(best, units, liked, now)[:2] == (0, 0):
                best = idle  # nothing wanted of this GPU: leave it as it is
            plan.layouts.append(best)
            taken += _take(best, units, trial, liked)
    planned: Counter[str] = Counter()
    for layout in plan.layouts:
        for profile, count in layout:
            planned[profile] += count
    plan.planned = dict(sorted(planned.items()))
    served: Counter[tuple[int, str]] = Counter(taken)
    plan.serves = [(wanted.wants[i].source, wanted.wants[i].who, p, n) for (i, p), n in sorted(served.items())]
    capacity = MIG_RULES[node.type_id].geometry.compute_slices * node.gpus
    plan.fill = round(sum(compute_slices(p) * n for (_i, p), n in served.items()) / capacity, 3) if capacity else 0.0
    if plan.planned == dict(sorted(node.current.items())):
        plan.reason = "its layout already serves what is wanted of it"
        return plan
    if not taken and not preferred:
        plan.reason = "nothing waits for or is recommended onto its MIG slices"
        return plan
    if plan.fill < min_utilization:
        plan.reason = f"what is wanted would fill {plan.fill:.0%} of its slices, below minUtilization " \
                      f"{min_utilization:.0%}"
        return plan
    plan.action = "change"
    plan.reason = f"serves {sum(n for *_x, n in plan.serves)} wanted slice(s)" if taken else \
        "the strategy's preferred profiles"
    wanted.left = trial.left
    return plan
