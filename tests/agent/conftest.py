from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_node_api import NodeApi, node, serving
from kubelet_podresources import Kubelet, short_dir
from kubelet_podresources import serving as serving_kubelet
from kubernetes import client


@pytest.fixture
def node_api() -> Iterator[NodeApi]:
    with serving(NodeApi(node("gpu-node-1"))) as api:
        yield api


@pytest.fixture
def core_v1(node_api: NodeApi) -> Iterator[Any]:
    configuration = client.Configuration()
    configuration.host = node_api.url
    with client.ApiClient(configuration) as api_client:
        yield client.CoreV1Api(api_client)


@pytest.fixture
def kubeconfig(node_api: NodeApi, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: test, cluster: {{server: '{node_api.url}'}}}}]\n"
        "users: [{name: test, user: {token: test-token}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    return path


@pytest.fixture
def kubelet() -> Iterator[Kubelet]:
    """A fake kubelet PodResources server on a unix socket (no pods until a test sets them)."""
    with short_dir() as folder, serving_kubelet(Kubelet(folder / "kubelet.sock")) as server:
        yield server
