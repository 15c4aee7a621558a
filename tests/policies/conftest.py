"""Policy test fixtures: the example cluster's summary, a typical GPU pod request, runtimes."""

from __future__ import annotations

import copy
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from patience import WAIT_SECONDS
from policy_fixtures import ROOT

from policies.api import PolicyContext
from policies.runtime.policy_runtime import PolicyRuntime, build_runtime
from policies.vocabulary.accelerator_types import default_table
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource

EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def cluster_model() -> ClusterModel:
    store = ClusterStore(default_table())
    YamlDirectorySource(EXAMPLES / "cluster", store).load()
    return store.snapshot(force=True)


@pytest.fixture(scope="session")
def cluster_summary(cluster_model: ClusterModel) -> dict[str, Any]:
    return cluster_model.summary()


@pytest.fixture
def typical_request() -> dict[str, Any]:
    return json.loads((ROOT / "bench" / "data" / "typical-gpu-pod-request.json").read_text())


@pytest.fixture
def make_context(cluster_model: ClusterModel, cluster_summary: dict[str, Any]) -> Callable[..., PolicyContext]:
    def make(pod: dict[str, Any], *, operation: str = "CREATE", intent: dict[str, Any] | None = None,
             namespace_object: dict[str, Any] | None = None) -> PolicyContext:
        namespace = pod["metadata"].get("namespace", "default")
        ns = namespace_object if namespace_object is not None else cluster_model.namespaces.get(namespace)
        request = {"uid": "u1", "operation": operation, "namespace": namespace, "object": copy.deepcopy(pod),
                   "userInfo": {"username": "alice", "groups": ["system:authenticated"]}}
        return PolicyContext(request=request, namespace_object=ns, cluster=cluster_summary,
                             intent={"gpus": 1, **(intent or {})})

    return make


@pytest.fixture
def runtime() -> PolicyRuntime:
    return build_runtime()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def opa_server() -> Iterator[str]:
    binary = shutil.which("opa")
    if binary is None:
        pytest.skip("no `opa` binary on PATH: the real OPA server test needs one")
    port = _free_port()
    process = subprocess.Popen([binary, "run", "--server", "--addr", f"127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
