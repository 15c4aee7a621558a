"""Sustained load on `kgwe serve` over loopback TLS: every answer well-formed, no errors, memory flat.

The short run is part of every test run; the 10-second one is `slow` (the benchmark's soak runs 60 s).
No speed is asserted here: throughput and latency belong to bench/.
"""

from __future__ import annotations

import pytest
from soak import MEMORY_GROWTH_LIMIT, soak


def test_short_soak_answers_every_request_with_its_own_decision() -> None:
    # Bounded by time: a request cap reached inside the warm-up would leave no measured second at all.
    result = soak(seconds=2, connections=4, warmup_seconds=1, max_requests=200_000, pin=False)
    assert result["server_alive_at_end"]
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] > 0


@pytest.mark.slow
def test_ten_second_soak_has_no_errors_and_flat_memory() -> None:
    result = soak(seconds=10, connections=16, warmup_seconds=2, max_requests=200_000, pin=False)
    assert result["server_alive_at_end"]
    assert result["errors"] == 0, result["error_samples"]
    assert result["rss_growth"] is not None
    assert result["rss_growth"] < MEMORY_GROWTH_LIMIT, result
