"""Kubernetes quantities (`10Gi`, `500m`, `1e3`) as Decimal, via the kubernetes client's parser, bounded.

One parser for the policy layer and the webhook: every amount a pod states goes through it.
"""

from __future__ import annotations

from decimal import Decimal

from policies.vocabulary.kube_quantity import parse_quantity as _k8s_parse_quantity

# Kubernetes reads quantities into int64; anything larger (or `inf`) is not a real amount, and turning
# `1e999999` into an int would hold the event loop for tens of seconds (docs/performance.md).
MAX_MAGNITUDE = Decimal(2**63 - 1)
# Byte units: GPU memory and MIG profile sizes are read as binary units (docs/decisions.md).
GIB = Decimal(1024**3)
MIB = Decimal(1024**2)


# Parsed quantity strings. Pods repeat a handful of amounts (`1`, `16Gi`, `500m`) in every request and the
# parser is the slowest part of reading them. The key is the whole string (only strings that parsed, of
# at most MAX_MEMO_KEY characters), so two different strings never share an entry; the values are
# immutable. Bounded: a flood of distinct amounts only starts the memo again.
_PARSED: dict[str, Decimal] = {}
PARSED_MEMO_SIZE = 4096
MAX_MEMO_KEY = 64


def _bounded(amount: Decimal, value: object) -> Decimal:
    # An exponent past the decimal context's range (`9e999999999`) overflows on any arithmetic, `abs` included:
    # decimal.Overflow is an ArithmeticError, not the ValueError every caller catches (a pod annotation like it
    # made each quota controller pass raise).
    try:
        out_of_range = not amount.is_finite() or abs(amount) > MAX_MAGNITUDE
    except ArithmeticError:
        out_of_range = True
    if out_of_range:
        raise ValueError(f"not a quantity: {value!r} is out of range")
    return amount


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity; raise ValueError with the offending value for anything else."""
    if type(value) is str:
        found = _PARSED.get(value)
        if found is not None:
            return found
        amount = _parse(value)
        if len(value) <= MAX_MEMO_KEY:
            if len(_PARSED) >= PARSED_MEMO_SIZE:
                _PARSED.clear()
            _PARSED[value] = amount
        return amount
    return _parse(value)


def _parse(value: object) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float | Decimal):
        try:
            return _bounded(Decimal(str(value)), value)
        except ArithmeticError as exc:
            raise ValueError(f"not a quantity: {value!r}") from exc
    text = str(value).strip()
    if not text or len(text) > 64:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        amount = Decimal(_k8s_parse_quantity(text))
    except (ValueError, ArithmeticError, TypeError) as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc
    return _bounded(amount, value)
