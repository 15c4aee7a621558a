"""Which MIG layouts one GPU may have: every multiset of a model's profiles that the slice rules place.

Pure, over the data of policies/vocabulary/mig_geometry.py: an instance takes a run of memory slices from
one of its shape's start places, no two instances share a memory slice, and their compute fits the GPU.
Layouts are enumerated once per model (a few dozen on a 7-slice GPU) and remembered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import cache

from policies.vocabulary.mig_geometry import MIG_RULES, MigModelRules, compute_slices

# One GPU's layout: (profile, count) pairs sorted by profile name, so equal layouts compare equal.
Layout = tuple[tuple[str, int], ...]


def layout_of(profiles: Iterable[str]) -> Layout:
    return tuple(sorted(Counter(profiles).items()))


def _placeable(rules: MigModelRules, instances: list[str]) -> bool:
    """Whether the instances fit the GPU's memory slices at their allowed starts (backtracking, largest first)."""
    geometry = rules.geometry
    if sum(compute_slices(p) for p in instances) > geometry.compute_slices:
        return False
    shapes = sorted(((compute_slices(p), rules.memory_slices[p]) for p in instances), key=lambda s: (-s[1], -s[0]))
    used = [False] * geometry.memory_slices

    def place(index: int) -> bool:
        if index == len(shapes):
            return True
        shape = shapes[index]
        for start in geometry.starts.get(shape, ()):
            span = range(start, start + shape[1])
            if span.stop <= geometry.memory_slices and not any(used[i] for i in span):
                for i in span:
                    used[i] = True
                if place(index + 1):
                    return True
                for i in span:
                    used[i] = False
        return False

    return place(0)


def valid(type_id: str, layout: Layout) -> bool:
    """Whether one GPU of `type_id` can hold `layout` (unknown models and profiles: no)."""
    rules = MIG_RULES.get(type_id)
    if rules is None or any(p not in rules.memory_slices for p, _n in layout):
        return False
    return _placeable(rules, [p for p, n in layout for _ in range(n)])


@cache
def layouts(type_id: str) -> tuple[Layout, ...]:
    """Every non-empty valid layout of one GPU of `type_id`, in a fixed order; () for a model without rules."""
    rules = MIG_RULES.get(type_id)
    if rules is None:
        return ()
    profiles = sorted(rules.memory_slices, key=lambda p: (compute_slices(p), rules.memory_slices[p], p))
    found: set[Layout] = set()

    def grow(start: int, chosen: list[str]) -> None:
        for index in range(start, len(profiles)):
            candidate = [*chosen, profiles[index]]
            if _placeable(rules, candidate):
                found.add(layout_of(candidate))
                grow(index, candidate)

    grow(0, [])
    return tuple(sorted(found))


@cache
def maximal_layouts(type_id: str) -> tuple[Layout, ...]:
    """The valid layouts to which no further instance can be added: the ones worth planning (no slice idle
    that some profile could use)."""
    rules = MIG_RULES.get(type_id)
    if rules is None:
        return ()
    out = []
    for layout in layouts(type_id):
        instances = [p for p, n in layout for _ in range(n)]
        if not any(_placeable(rules, [*instances, extra]) for extra in rules.memory_slices):
            out.append(layout)
    return tuple(out)


def compute_of(layout: Layout) -> int:
    return sum(compute_slices(p) * n for p, n in layout)


def describe(layout: Layout) -> str:
    """`3g.40gb + 2g.20gb + 2x1g.10gb`: largest first."""
    parts = sorted(layout, key=lambda item: (-compute_slices(item[0]), item[0]))
    return " + ".join(f"{n}x{p}" if n > 1 else p for p, n in parts)
