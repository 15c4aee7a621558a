"""`python -m bench`: every benchmark, one table, results under bench/results/ (see bench/run.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import main

sys.exit(main())
