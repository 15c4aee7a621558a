from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s_client

# The fake API server lives with the cluster-source tests; the controllers talk to the same one.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))

from kube_fake_apiserver import FakeApiServer


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
