"""Fault tests reuse the fake API server (tests/cluster), the OPA REST stand-in (tests/policies) and the fake
NVML machines (tests/fixtures/nvml, tests/agent) as they are."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for _path in (TESTS / "faults", TESTS / "cluster", TESTS / "policies", TESTS / "fixtures" / "nvml", TESTS / "agent"):
    if str(_path) not in sys.path:
        sys.path.append(str(_path))
