"""Render the difference between the pod as received and the pod after mutation as one RFC 6902 patch.

The patch must apply cleanly to exactly the object the API server sent (a patch that fails to apply is
a 500 that failurePolicy cannot soften): keys are escaped (`~0`, `~1`), a missing parent is added whole,
nothing is `replace`d or `remove`d unless it is there, and lists are replaced whole when their length
changes (never index arithmetic on a list the user may have reordered).
"""

from __future__ import annotations

from typing import Any

JsonPatch = list[dict[str, Any]]


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def diff(before: Any, after: Any, path: str = "") -> JsonPatch:
    if type(before) is not type(after) and not (_is_number(before) and _is_number(after)):
        return [{"op": "replace", "path": path, "value": after}] if path else _root_replace(after)
    if isinstance(before, dict):
        ops: JsonPatch = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in after.items():
            # The path is built only for a key that differs: most of a pod is left as it came.
            if key not in before:
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
            elif before[key] != value:
                ops.extend(diff(before[key], value, f"{path}/{escape(key)}"))
        return ops
    if isinstance(before, list):
        if len(before) != len(after):
            return [{"op": "replace", "path": path, "value": after}] if path else _root_replace(after)
        ops = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            if old != new:
                ops.extend(diff(old, new, f"{path}/{index}"))
        return ops
    if before != after or type(before) is not type(after):
        return [{"op": "replace", "path": path, "value": after}] if path else _root_replace(after)
    return []


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _root_replace(after: Any) -> JsonPatch:
    # Replacing the whole document is legal RFC 6902 (path ""), but the pipeline never does it.
    return [{"op": "replace", "path": "", "value": after}]
