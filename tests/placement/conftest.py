"""The example cluster loaded into a runtime (the fixtures live in placement_support.py, shared with tests/mutation)."""

from __future__ import annotations

from placement_support import admit, runtime  # noqa: F401
