"""Kubernetes quantities as Decimal (the one bounded parser lives in `policies.quantities`) and byte units."""

from __future__ import annotations

from decimal import Decimal

from policies.quantities import MAX_MAGNITUDE, parse_quantity

GIB = Decimal(1024**3)
MIB = Decimal(1024**2)

__all__ = ["GIB", "MAX_MAGNITUDE", "MIB", "parse_quantity"]
