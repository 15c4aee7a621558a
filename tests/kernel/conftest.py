from __future__ import annotations

# The fake API server lives with the cluster-source tests (tests/cluster is on pytest's pythonpath).
from kube_fake_apiserver import api_client, apiserver  # noqa: F401  (fixtures shared with tests/cluster)
