"""Report command fixtures: the example cluster and configuration (see tests/fixtures/cluster_dirs.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
