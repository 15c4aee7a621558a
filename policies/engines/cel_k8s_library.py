"""Kubernetes' CEL library functions that GPU policies need, as plain Python over plain values.

Each CEL engine adapter binds these to its own function mechanism, so both engines behave alike.
Covered: quantity (`quantity`, `isQuantity`, `sign`, `isInteger`, `asInteger`, `asApproximateFloat`,
`add`, `sub`, `isLessThan`, `isGreaterThan`, `compareTo`), lists (`sum`, `min`, `max`, `isSorted`,
`indexOf`, `lastIndexOf`) and regex (`find`, `findAll`). Optional types and string extensions come
from the engine itself.

A quantity is carried through CEL as a one-key map holding its exact value as a normalised decimal
string, so `==` between two quantities is semantic equality, as in Kubernetes.

The functions keep CEL's semantics where Python's differ: `indexOf` compares with CEL equality (`true`
is not `1`, `[1]` is not `[true]`), `min`/`max`/`isSorted` order only values of one orderable kind
(numbers, strings, bools, bytes, quantities, timestamps, durations; a list of lists is an error), and
`find`/`findAll` use RE2, as Kubernetes (Go) does and as CEL's own `matches()` does: `$` is the end of
the text (not before a final newline), `\\d`, `\\w` and `\\s` are ASCII, look-arounds are refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from policies.vocabulary.kube_quantity import parse_quantity

QUANTITY_KEY = "kgwe.io/quantity"
MAX_QUANTITY_TEXT = 64
# Quantities KGWE computes with: |value| within 10^-40 .. 10^40 (Kubernetes itself caps them at 2^63-1),
# at most 64 significant digits. A 64-character text can say `1e999999`: turning that into digits took
# half a minute of CPU, longer as the exponent grows. Arithmetic is exact within these bounds.
MAX_QUANTITY_EXPONENT = 40
MAX_QUANTITY_DIGITS = 64
_EXACT = Context(prec=4 * MAX_QUANTITY_EXPONENT + MAX_QUANTITY_DIGITS, Emax=999999, Emin=-999999)


class CelLibraryError(ValueError):
    """Raised by a library function; engines turn it into a CEL evaluation error."""


def _normalise(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(_EXACT), "f")  # the default context would round to 28 digits


def _bounded(value: Decimal) -> Decimal:
    """`value` when KGWE computes with it (see MAX_QUANTITY_EXPONENT), else CelLibraryError."""
    if not value.is_finite():
        raise CelLibraryError(f"invalid quantity: {value}")
    if value and (abs(value.adjusted()) > MAX_QUANTITY_EXPONENT
                  or len(value.as_tuple().digits) > MAX_QUANTITY_DIGITS):
        raise CelLibraryError(f"quantity out of range: {value:.3e}")
    return value


def _as_decimal(quantity: Any) -> Decimal:
    if isinstance(quantity, dict) and QUANTITY_KEY in quantity:
        text = str(quantity[QUANTITY_KEY])
        if len(text) > 2 * MAX_QUANTITY_DIGITS:  # only our own normalised text comes this way
            raise CelLibraryError("quantity out of range")
        try:
            return _bounded(Decimal(text))
        except InvalidOperation as exc:
            raise CelLibraryError(f"not a quantity: {text!r}") from exc
    raise CelLibraryError(f"not a quantity: {quantity!r}")


def _wrap(value: Decimal) -> dict[str, str]:
    return {QUANTITY_KEY: _normalise(_bounded(value))}


@lru_cache(maxsize=1024)
def _parse(text: str) -> Decimal:
    if len(text) > MAX_QUANTITY_TEXT or text != text.strip() or not text:
        raise CelLibraryError(f"invalid quantity: {text!r}")
    try:
        value = Decimal(parse_quantity(text))
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise CelLibraryError(f"invalid quantity: {text!r}") from exc
    return _bounded(value)


def quantity(text: str) -> dict[str, str]:
    return _wrap(_parse(str(text)))


def is_quantity(text: str) -> bool:
    try:
        _parse(str(text))
    except CelLibraryError:
        return False
    return True


def quantity_sign(q: Any) -> int:
    value = _as_decimal(q)
    return (value > 0) - (value < 0)


def quantity_is_integer(q: Any) -> bool:
    value = _as_decimal(q)
    return value == value.to_integral_value() and -(2**63) <= value < 2**63


def quantity_as_integer(q: Any) -> int:
    if not quantity_is_integer(q):
        raise CelLibraryError("cannot convert quantity to integer: not an int64 value")
    return int(_as_decimal(q))


def quantity_as_float(q: Any) -> float:
    return float(_as_decimal(q))


def _operand(other: Any) -> Decimal:
    if isinstance(other, bool):
        raise CelLibraryError(f"not a quantity: {other!r}")
    if isinstance(other, int):
        return Decimal(other)
    return _as_decimal(other)


def quantity_add(q: Any, other: Any) -> dict[str, str]:
    return _wrap(_EXACT.add(_as_decimal(q), _operand(other)))


def quantity_sub(q: Any, other: Any) -> dict[str, str]:
    return _wrap(_EXACT.subtract(_as_decimal(q), _operand(other)))


def quantity_compare(q: Any, other: Any) -> int:
    left, right = _as_decimal(q), _as_decimal(other)
    return (left > right) - (left < right)


def quantity_less(q: Any, other: Any) -> bool:
    return quantity_compare(q, other) < 0


def quantity_greater(q: Any, other: Any) -> bool:
    return quantity_compare(q, other) > 0


def _orderable_kind(value: Any) -> str | None:
    """The kind of value CEL orders with `<` against values of the same kind; None when it orders none."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | Decimal):
        return "number"  # CEL compares int, uint and double with each other
    for kind in (str, bytes, datetime, timedelta):
        if isinstance(value, kind):
            return kind.__name__
    return None


def _comparable(items: Sequence[Any], name: str) -> list[Any]:
    """`items` as Python values that order as CEL orders them; CelLibraryError when CEL cannot order them."""
    values = list(items)
    if any(isinstance(v, dict) and QUANTITY_KEY in v for v in values):
        return [_as_decimal(v) for v in values]
    kinds = {_orderable_kind(v) for v in values}
    if None in kinds or len(kinds) > 1:
        raise CelLibraryError(f"{name}() needs comparable elements")
    return values


def _map_key(key: Any) -> tuple[str, Any]:
    # CEL map keys: a bool key is never a number key, though Python's True == 1.
    return ("bool", key) if isinstance(key, bool) else ("key", key)


def cel_equal(left: Any, right: Any) -> bool:
    """CEL's `==` over plain values: numbers of any type compare by value (NaN equals nothing), a bool
    equals only a bool, lists and maps compare element by element, values of other kinds only alike."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return bool(left == right)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        if len(left) != len(right):
            return False
        others = {_map_key(k): v for k, v in right.items()}
        missing = object()
        return all(cel_equal(v, others.get(_map_key(k), missing)) for k, v in left.items())
    if not (isinstance(left, type(right)) or isinstance(right, type(left))):
        return False  # a string is not bytes, null is nothing else
    return bool(left == right)


def list_sum(items: Sequence[Any]) -> Any:
    values = list(items)
    if not values:
        return 0
    kinds = {type(v) for v in values}
    if len(kinds) == 1 and (int in kinds or float in kinds):  # the common case: plain numbers of one type
        return _in_int64(sum(values))
    if all(isinstance(v, dict) and QUANTITY_KEY in v for v in values):
        total = Decimal(0)
        for v in values:
            total = _EXACT.add(total, _as_decimal(v))
        return _wrap(total)
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        raise CelLibraryError("sum() needs a list of numbers or quantities")
    if len({type(v) for v in values}) > 1:
        raise CelLibraryError("sum() needs a list of one numeric type")
    return _in_int64(sum(values))


def _in_int64(total: Any) -> Any:
    """CEL's ints are 64-bit and overflow is an error. (The binding turned a sum past 2^63-1 into a uint:
    `[9223372036854775807, 1].sum()` was 9223372036854775808u. The engines hand uints over as Python ints
    too, so a uint sum past 2^63-1 fails the same way.)"""
    if isinstance(total, int) and not -(2**63) <= total < 2**63:
        raise CelLibraryError("sum() overflows a 64-bit integer")
    return total


def _extreme(items: Sequence[Any], pick: Any, name: str) -> Any:
    values = list(items)
    if not values:
        raise CelLibraryError(f"{name}() of an empty list")
    keys = _comparable(values, name)
    try:
        index = keys.index(pick(keys))
    except TypeError as exc:  # timestamps with and without a zone
        raise CelLibraryError(f"{name}() needs comparable elements") from exc
    return values[index]


def list_min(items: Sequence[Any]) -> Any:
    return _extreme(items, min, "min")


def list_max(items: Sequence[Any]) -> Any:
    return _extreme(items, max, "max")


def list_is_sorted(items: Sequence[Any]) -> bool:
    keys = _comparable(items, "isSorted")
    try:
        return all(keys[i] <= keys[i + 1] for i in range(len(keys) - 1))
    except TypeError as exc:
        raise CelLibraryError("isSorted() needs comparable elements") from exc


def list_index_of(items: Sequence[Any], value: Any) -> int:
    for index, item in enumerate(items):
        if cel_equal(item, value):
            return index
    return -1


def list_last_index_of(items: Sequence[Any], value: Any) -> int:
    values = list(items)
    for index in range(len(values) - 1, -1, -1):
        if cel_equal(values[index], value):
            return index
    return -1


@lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    import re2  # google-re2; native, so imported on first use (after a pre-forking server forks)

    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise CelLibraryError(f"invalid regex {pattern!r}: {exc}") from exc


def regex_find(text: str, pattern: str) -> str:
    match = _regex(str(pattern)).search(str(text))
    return match.group(0) if match else ""


def regex_find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(str(pattern)).finditer(str(text))]
    return found if limit < 0 else found[:limit]
