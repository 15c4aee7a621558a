"""Which DeviceClasses can give GPUs (`GpuClasses`), read from the classes the cluster publishes: what a
pod's own claims are counted against quotas and RBAC by (webhook/dra/claimed.py `requested_gpus`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# Drivers whose devices are GPUs: NVIDIA's GPU DRA driver (whole GPUs and MIG devices) and AMD's.
GPU_DRIVERS = ("gpu.nvidia.com", "gpu.amd.com")


class GpuClasses:
    """Which DeviceClasses can give GPUs, by the classes the cluster publishes.

    A class gives no GPU only when it says so plainly: one of its selectors requires a driver that is not
    a GPU driver (`pinned_driver`: a top-level `&&` term `device.driver == "<name>"`, as NVIDIA's
    `compute-domain-default-channel.nvidia.com` and most NIC classes are written). Every other class is a
    GPU class: one that names a GPU driver (`GPU_DRIVERS`), one with no selector (it matches every device),
    and one whose selectors KGWE cannot read as excluding GPUs (`device.driver.endsWith('nvidia.com')`, a
    driver other than one, an `||`, a selector on memory alone): an administrator's class is not
    evaluated, and a GPU it lets through must never count as none. A class the snapshot does not know
    counts as a GPU class too: only an administrator creates classes, and a claim can be allocated only
    once its class exists, so an unknown name is a class too new to be seen.
    """

    def __init__(self, device_classes: Mapping[str, Mapping[str, Any]], drivers: Iterable[str] = GPU_DRIVERS):
        self._drivers = tuple(drivers)
        self._known = device_classes
        self._verdicts: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return True
        verdict = self._verdicts.get(name)
        if verdict is None:
            verdict = self._verdicts[name] = self._judge(name)
        return verdict

    def _judge(self, name: str) -> bool:
        device_class = self._known.get(name)
        if device_class is None:
            return True
        spec = device_class.get("spec")
        selectors = spec.get("selectors") if isinstance(spec, dict) else None
        if not isinstance(selectors, list) or not selectors:
            return True
        for selector in selectors[:MAX_SELECTORS]:
            cel = selector.get("cel") if isinstance(selector, dict) else None
            expression = cel.get("expression") if isinstance(cel, dict) else None
            driver = pinned_driver(expression) if isinstance(expression, str) else None
            if driver is not None and driver not in self._drivers:
                return False  # every device of the class comes from that driver
        return True


MAX_SELECTORS = 32  # DeviceClassSpec.selectors
MAX_EXPRESSION = 10 * 1024  # a CEL selector expression is at most 10 Ki characters
MAX_PARENTHESES = 4  # pairs removed around one term; a pin under more is not read (the class counts)
# `device.driver == "name"`, either way round, either quote.
_DRIVER_IS = re.compile(
    r"""device\.driver\s*==\s*(?P<q>['"])(?P<a>[^'"]+)(?P=q)|(?P<r>['"])(?P<b>[^'"]+)(?P=r)\s*==\s*device\.driver"""
)
# What the small scanner below does not model, so an expression holding it is never read as excluding
# GPUs: escapes and raw strings (a backslash), triple-quoted strings, comments.
_UNREAD = ("\\", '"""', "'''", "//")


def pinned_driver(expression: str) -> str | None:
    """The driver a CEL selector requires of every device it matches, when one of its top-level `&&` terms
    (outside brackets and string literals, outer parentheses removed) is `device.driver == "<name>"`.

    None when there is no such term, when the expression has a top-level `||` or `?` (both bind looser
    than `&&`, so no term alone decides), or when it holds what the scanner does not model (`_UNREAD`):
    a None only makes the class count as a GPU class, never the other way round."""
    if len(expression) > MAX_EXPRESSION or any(token in expression for token in _UNREAD):
        return None
    terms = _top_level_terms(expression)
    for term in terms or ():
        term = term.strip()
        for _ in range(MAX_PARENTHESES):  # each pass rescans the term: bounded, so a deep nest costs little
            if not (term.startswith("(") and term.endswith(")") and _top_level_terms(term[1:-1]) == [term[1:-1]]):
                break
            term = term[1:-1].strip()  # parentheses around the whole term, with no `&&`, `||` or `?` inside
        match = _DRIVER_IS.fullmatch(term)
        if match is not None:
            return match.group("a") or match.group("b")
    return None


def _top_level_terms(expression: str) -> list[str] | None:
    """The expression's top-level `&&` terms; None when it has a top-level `||` or `?`, unbalanced
    brackets or an unclosed string."""
    terms: list[str] = []
    depth, start, quote, index = 0, 0, "", 0
    while index < len(expression):
        char = expression[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and expression.startswith("&&", index):
            terms.append(expression[start:index])
            start = index + 2
            index += 1
        elif depth == 0 and (expression.startswith("||", index) or char == "?"):
            return None
        index += 1
    if quote or depth:
        return None
    terms.append(expression[start:])
    return terms
