"""cel-cpp values read into Python without crashing the process.

cel-expr-python 0.1.3 cannot convert an optional value to Python, and tells it badly: an optional
reports the error type, and then `value()` raises TypeError; `plain_value()` of a list holding one raises
SystemError, and of a map holding one crashes the whole process (SIGSEGV). A policy whose expression
evaluates to one (`object.?metadata.?name` as a validation, `{'a': object.?spec.?x}` anywhere a value is
read) made every check raise past the failure mode, or took the webhook down.

`read` walks a value whose type may hold an optional (`may_hold_optional`, from the checker's type,
decided once per program) before converting it, and says why it cannot be read instead.
"""

from __future__ import annotations

from typing import Any

UNREADABLE = ("the expression's value holds an optional, which has no plain value: "
              "end it with .orValue(default) or .value()")
_MAX_DEPTH = 64  # deeper values are not walked further: the conversion refuses them too


def may_hold_optional(checked_type: Any) -> bool:
    """Whether values of this checked type (cel-expr-python's `return_type()`) may hold an optional."""
    name = str(checked_type).lower()
    return "optional" in name or "dyn" in name


def _holds_optional(value: Any, error_type: Any, depth: int) -> bool:
    kind = value.type()
    if kind == error_type:
        return True  # inside a container, only an optional reports the error type
    name = str(kind)
    if not name.startswith(("LIST", "MAP")):
        return False
    if depth >= _MAX_DEPTH:
        return True
    items = value.value()
    inner = items.values() if isinstance(items, dict) else items
    return any(_holds_optional(item, error_type, depth + 1) for item in inner)


def read(value: Any, error_type: Any, walk: bool) -> tuple[Any, str | None]:
    """(the value as plain Python, None), or (None, why it is an error or cannot be read).

    `walk`: the value's type may hold an optional (see `may_hold_optional`); otherwise it is converted
    directly, which for the common results (bools, strings, lists of them) costs nothing extra."""
    if value.type() == error_type:
        try:
            return None, str(value.value())
        except TypeError:  # an optional: it reports the error type, and has no value
            return None, UNREADABLE
    if walk and _holds_optional(value, error_type, 0):
        return None, UNREADABLE
    return value.plain_value(), None


__all__ = ["UNREADABLE", "may_hold_optional", "read"]
