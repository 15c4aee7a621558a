"""When an admission answer is due: our own budget, or the API server's `?timeout=` minus a margin."""

from __future__ import annotations

import re
from functools import lru_cache

_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

# Leave this much of the API server's timeout for the response to travel back (and at least 50 ms of it).
MARGIN_FRACTION = 0.2
MARGIN_MAX_SECONDS = 0.5
MIN_BUDGET_SECONDS = 0.05


# The API server sends the same `?timeout=` on every call of a webhook: parse each distinct value once.
@lru_cache(maxsize=64)
def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go duration string as the API server writes it (`10s`, `1m30s`, `500ms`); None if invalid."""
    text = text.strip()
    if not text:
        return None
    total = 0.0
    position = 0
    for match in _GO_DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total if position == len(text) else None


def budget_seconds(configured: float, api_server_timeout: str | None) -> float:
    """Seconds we may spend on one request."""
    budget = configured
    if api_server_timeout:
        timeout = parse_go_duration(api_server_timeout)
        if timeout is not None and timeout > 0:
            margin = min(MARGIN_MAX_SECONDS, timeout * MARGIN_FRACTION)
            budget = min(budget, timeout - margin)
    return max(budget, MIN_BUDGET_SECONDS)
