"""Audit fixtures: cluster directories with planted violations (see tests/fixtures/cluster_dirs.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
