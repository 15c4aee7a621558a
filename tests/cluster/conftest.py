from __future__ import annotations

from collections.abc import Iterator

import pytest
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client

from agent.accelerator_types import AcceleratorTable
from webhook.cluster.model import ClusterStore


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.close()


@pytest.fixture
def api_client(apiserver: FakeApiServer) -> Iterator[k8s_client.ApiClient]:
    configuration = k8s_client.Configuration()
    configuration.host = apiserver.url
    with k8s_client.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def store() -> ClusterStore:
    return ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0.0)
