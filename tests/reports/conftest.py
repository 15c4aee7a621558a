"""Report command fixtures: the example cluster and configuration (see tests/fixtures/cluster_dirs.py)."""

from __future__ import annotations


