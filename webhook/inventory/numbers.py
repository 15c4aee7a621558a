"""How the inventory views write numbers, prices, amounts of money and times (JSON numbers and strings
a dashboard shows as they are)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from webhook.costs import format_hourly_cost

ZERO = Decimal(0)
# 365 * 24 / 12: the month OpenCost and cloud price lists use.
HOURS_PER_MONTH = Decimal(730)


def number(value: Decimal) -> int | float:
    """A JSON number: an int when whole, else rounded to 2 decimal places."""
    if value == value.to_integral_value():
        return int(value)
    return round(float(value), 2)


def price_text(value: Decimal) -> str:
    """Prices as decimal strings with at least two decimals: 4.5 -> "4.50", 0.625 -> "0.625"."""
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent >= -2:
        return f"{value:.2f}"
    return format(value.normalize(), "f")


def money_text(value: Decimal) -> str:
    """An amount of money: rounded like cost annotations (4 places), shown with at least two decimals."""
    return price_text(Decimal(format_hourly_cost(value)))


def cents_text(value: Decimal) -> str:
    """An amount of money as a person reads a price: to the cent, half up ("0.4286" -> "0.43")."""
    return f"{value.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):f}"


def utc_stamp(moment: datetime) -> str:
    """A moment as RFC 3339 in UTC to the second (`generatedAt`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

