"""The report commands without --cluster: the cluster comes from the API (a fake API server on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, gpu_pod
from kube_fake_apiserver import FakeApiServer, serving_cluster, write_kubeconfig

from webhook.audit import ApiPodReader
from webhook.cluster.kube_json import load_kube_client
from webhook.reports.commands import run


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    server = serving_cluster(EXAMPLE_CLUSTER)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    try:
        yield server, kubeconfig
    finally:
        server.close()


def _json(capsys: pytest.CaptureFixture[str], command: str, *argv: str) -> Any:
    assert run(command, list(argv)) == 0
    document = json.loads(capsys.readouterr().out)
    document.pop("generatedAt", None)
    return document


def test_nodes_from_the_api_match_the_directory(
    api: tuple[FakeApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _server, kubeconfig = api
    config = ["--config", str(EXAMPLE_CONFIG)]
    from_api = _json(capsys, "nodes", "--kubeconfig", str(kubeconfig), "-o", "json", *config)
    from_directory = _json(capsys, "nodes", "--cluster", str(EXAMPLE_CLUSTER), "-o", "json", *config)
    assert from_api == from_directory
    assert _json(capsys, "costs", "--kubeconfig", str(kubeconfig), "-o", "json", *config) == _json(
        capsys, "costs", "--cluster", str(EXAMPLE_CLUSTER), "-o", "json", *config)


def test_audit_from_the_api_judges_whole_pods(
    api: tuple[FakeApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, kubeconfig = api
    # securityContext is dropped from the model's slimmed pods: only the whole pod shows the violation.
    server.put("Pod", gpu_pod("root", "team-a", node="dgx-h100-02", privileged=True))
    findings = _json(capsys, "audit", "--kubeconfig", str(kubeconfig), "-o", "json", "--config", str(EXAMPLE_CONFIG))
    assert any(f["pod"] == "root" and f["policy"] == "kgwe.admission.privileged" for f in findings["findings"])


def test_pod_reader_reads_whole_pods_and_says_when_one_is_gone(api: tuple[FakeApiServer, Path]) -> None:
    server, kubeconfig = api
    server.put("Pod", gpu_pod("root", "team-a", node="dgx-h100-02", privileged=True))
    reader = ApiPodReader(load_kube_client(str(kubeconfig)))
    whole = reader({"metadata": {"namespace": "team-a", "name": "root"}})
    assert whole is not None and whole["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    assert reader({"metadata": {"namespace": "team-a", "name": "deleted-meanwhile"}}) is None
