"""Kubernetes quantities (`10Gi`, `500m`, `1e3`) as Decimal, via the kubernetes client's parser."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity as _k8s_parse_quantity

GIB = Decimal(1024**3)
MIB = Decimal(1024**2)


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity; raise ValueError with the offending value for anything else."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float | Decimal):
        return Decimal(str(value))
    text = str(value).strip()
    if not text or len(text) > 64:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return Decimal(_k8s_parse_quantity(text))
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


def whole_number(value: Decimal) -> int | None:
    """The integer a quantity equals, or None when it is fractional."""
    return int(value) if value == value.to_integral_value() else None
