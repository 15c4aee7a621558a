"""A workload kind's template path, as the configuration writes it (`workloads.kinds[].templates`) and the
kind table walks it (webhook/workload_kinds.py): dot-separated keys, `[*]` for every item of a list
and a `*` segment for every value of a map, e.g. `spec.replicatedJobs[*].template.spec.template`. Parsed
here, below both, so that the configuration checks a path when it is loaded without importing the wing."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEGMENT = re.compile(r"^(?P<key>[A-Za-z0-9_-]+|\*)(?P<list>\[\*\])?$")


@dataclass(frozen=True)
class Segment:
    key: str  # a field name, or "*" for every value of a map
    each_item: bool  # followed by [*]: the value is a list, every item is visited


@dataclass(frozen=True)
class TemplatePath:
    text: str
    segments: tuple[Segment, ...]

    @classmethod
    def parse(cls, text: str) -> TemplatePath:
        parts = text.split(".")
        segments = []
        for part in parts:
            match = _SEGMENT.match(part)
            if match is None:
                raise ValueError(f"template path {text!r}: bad segment {part!r} (keys, `*` or `key[*]`)")
            segments.append(Segment(match["key"], bool(match["list"])))
        if segments[0].key == "*":
            raise ValueError(f"template path {text!r} must start with a field name")
        return cls(text, tuple(segments))
