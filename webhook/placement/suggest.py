"""Did-you-mean hints for accelerator type ids a user wrote that this cluster does not know."""

from __future__ import annotations

import difflib

from policies.vocabulary.accelerator_types import UNKNOWN, AcceleratorTable


def suggest_type(written: str, present: list[str], table: AcceleratorTable) -> str | None:
    """The type id the user most likely meant by `written` (`h100`, a GFD product label, a typo).

    Prefers ids present in the cluster; a vendor product name is mapped through the same alias table
    the node labels go through.
    """
    written = written.strip()[:120]
    if not written or table.get(written.lower()) is not None:
        return None  # a real type id, just not in this cluster: the message lists what exists
    mapped = table.from_product(written)
    if mapped != UNKNOWN and mapped != written.lower() and (mapped in present or table.get(mapped) is not None):
        return mapped
    lowered = written.lower()
    containing = [t for t in present if lowered in t.split("-")]
    if len(containing) == 1:
        return containing[0]
    close = difflib.get_close_matches(lowered, present, n=1, cutoff=0.6)
    if close:
        return close[0]
    close = difflib.get_close_matches(lowered, sorted(table.types), n=1, cutoff=0.75)
    return close[0] if close else None


def with_hints(missing: list[str], present: list[str], table: AcceleratorTable) -> str:
    """`missing` joined for a message, each followed by its hint where there is one."""
    parts = []
    for written in missing:
        hint = suggest_type(written, present, table)
        parts.append(f"{written} (did you mean {hint}?)" if hint and hint != written else written)
    return ", ".join(parts)
