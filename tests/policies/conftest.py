"""Policy test fixtures: the example cluster's summary, a typical GPU pod request, runtimes."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from policy_fixtures import ROOT

from agent.accelerator_types import default_table
from policies.api import PolicyContext
from policies.runtime import PolicyRuntime, build_runtime
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
