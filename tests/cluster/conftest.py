from __future__ import annotations

import pytest
from kube_fake_apiserver import api_client, apiserver  # noqa: F401  (fixtures shared with tests/controllers)

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.cluster.model import ClusterStore


@pytest.fixture
def store() -> ClusterStore:
    return ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0.0)
