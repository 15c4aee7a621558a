"""Audit fixtures: cluster directories with planted violations (see tests/fixtures/cluster_dirs.py)."""

from __future__ import annotations


