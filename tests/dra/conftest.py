"""DRA fixtures: a copy of examples/cluster-dra with quotas and prices, served over HTTPS, with the
ResourceClaimTemplates it names created in a fake API server."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dra_support import DRA_CLUSTER, ROOT, Webhook, serve_replica
from kube_fake_apiserver import FakeApiServer

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime

CONFIG = {
    "mode": "enforce",
    "pricing": {"currency": "USD", "perGPUHour": {"nvidia-h100-80gb": 4.5, "nvidia-a100-80gb": 2.8,
                                                  "nvidia-gb200-186gb": 9.0}},
}
QUOTA = {
    "apiVersion": "kgwe.io/v1alpha1",
    "kind": "TenantQuota",
    "metadata": {"name": "team-a"},
    "spec": {
        "tenant": "team-a",
        "namespaces": ["team-a"],
        "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 6}],
    },
}
# A pod KGWE wrote for DRA earlier, running on dra-h100-01 with 2 GPUs: it counts against team-a's quota.
RUNNING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer-0", "namespace": "team-a",
                 "annotations": {"kgwe.io/dra-claims": '{"main":{"nvidia.com/gpu":"2"}}'}},
    "spec": {
        "nodeName": "dra-h100-01",
        "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "kgwe-gpu-0d6e4079e3"}]}}],
        "resourceClaims": [{"name": "kgwe-gpu-0d6e4079e3", "resourceClaimTemplateName": "kgwe-0123456789abcdef0123"}],
    },
    "status": {"phase": "Running"},
}


@pytest.fixture(scope="module")
def dra_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dra")
    cluster = root / "cluster"
    shutil.copytree(DRA_CLUSTER, cluster)
    (cluster / "quota.yaml").write_text(yaml.safe_dump_all([QUOTA, RUNNING]))
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return root


@pytest.fixture(scope="module")
def fake_api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def dra_runtime(dra_dir: Path) -> Runtime:
    return build_runtime(load_config(dra_dir / "config.yaml"), dra_dir / "cluster")


@pytest.fixture(scope="module")
def webhook(dra_dir: Path, fake_api: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    yield from serve_replica(dra_dir, fake_api, tmp_path_factory.mktemp("certs"))


__all__ = ["ROOT"]
