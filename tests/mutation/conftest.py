"""Mutation tests admit pods against the example cluster (fixtures shared with tests/placement)."""

from __future__ import annotations

from placement_support import admit, runtime  # noqa: F401
