"""Quota test fixtures: the example cluster's quotas and prices."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
import yaml
from quota_fixtures import ROOT, load_objects


@pytest.fixture
def example_quotas() -> list[dict[str, Any]]:
    return load_objects("tenant-quotas.yaml")


@pytest.fixture
def price_of() -> Callable[[str], Decimal | None]:
    prices = yaml.safe_load((ROOT / "examples" / "config.yaml").read_text())["pricing"]["perGPUHour"]

    def lookup(type_id: str) -> Decimal | None:
        return Decimal(str(prices[type_id])) if type_id in prices else None

    return lookup
