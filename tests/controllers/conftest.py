from __future__ import annotations

import sys
from pathlib import Path

# The fake API server lives with the cluster-source tests; the controllers talk to the same one.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))

from kube_fake_apiserver import api_client, apiserver  # noqa: F401  (fixtures shared with tests/cluster)
