from __future__ import annotations

import sys
from pathlib import Path

# The fake API server lives with the cluster-source tests; the gang tests extend it (gang_support.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
