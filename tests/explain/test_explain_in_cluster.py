"""`kgwe explain NAMESPACE/NAME` against a cluster's API (the fake API server over HTTP), read-only."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_dirs import EXAMPLE_CLUSTER, gpu_pod
from kube_fake_apiserver import FakeApiServer, serving_cluster, write_kubeconfig

from webhook.cli import main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeApiServer, Path]]:
    api = serving_cluster(EXAMPLE_CLUSTER)
    path = write_kubeconfig(tmp_path / "kubeconfig", api.url)
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KGWE_TEST_KUBECONFIG", str(path))
    try:
        yield api, path
    finally:
        api.close()


def test_explains_a_pending_pod_read_from_the_api(kubeconfig: tuple[FakeApiServer, Path]) -> None:
    api, _path = kubeconfig
    api.put("Pod", gpu_pod("too-big", "ml-research", gpus=16, phase="Pending",
                           annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["explain", "ml-research/too-big", "-o", "json"]) == 0
    body = json.loads(out.getvalue())
    assert body["state"] == "pending"
    assert body["trace"][-1]["dropped"] == [
        {"type": "nvidia-h100-80gb", "why": "at most 8 GPUs on one node, the pod asks for 16"}
    ]
    assert body["blocking"]
    assert not [r for r in api.requests if r.method in ("POST", "PUT", "PATCH", "DELETE")]  # read-only


def test_an_unknown_pod_is_one_line(kubeconfig: tuple[FakeApiServer, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ml-research/absent"]) == 2
    assert capsys.readouterr().err.strip() == "kgwe explain: ml-research/absent: no such pod in the cluster"


def test_without_any_cluster_it_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("KGWE_TEST_KUBECONFIG", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    assert main(["explain", "ml-research/anything"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach a Kubernetes cluster" in err and "--cluster DIR" in err
