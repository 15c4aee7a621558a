"""`kgwe agent` end to end: flags, dry run, no NVML, and one real publish through a kubeconfig."""

from __future__ import annotations

import json
from pathlib import Path

import nvml_machines as machines
import pynvml
import pytest
from agent_node_api import NodeApi
from fake_nvml import installed

from agent.main import run
from policies.vocabulary.topology_schema import ANNOTATION, LABEL_NVLINK_DOMAIN_SIZE, TopologyDocument


def test_dry_run_prints_the_document_and_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with installed(machines.h100_nvl_pairs()):
        status = run(["--dry-run", "--node-name", "nvl-1"])
    assert status == 0
    doc = TopologyDocument.model_validate_json(capsys.readouterr().out)
    assert doc.node == "nvl-1" and doc.nvlink.domain_size == 2 and len(doc.gpus) == 4


def test_no_nvml_exits_cleanly_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kubeconfig: Path, node_api: NodeApi
) -> None:
    def no_library(name: str, *args: object, **kwargs: object) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    pynvml._nvmlGetFunctionPointer_cache.clear()

    assert run(["--once", "--node-name", "gpu-node-1", "--kubeconfig", str(kubeconfig)]) == 0
    assert run(["--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "NVML is not available on this node" in err and "no NVIDIA GPUs to report" in err
    assert node_api.requests == []  # it never touched the API


def test_once_publishes_through_the_kubeconfig(kubeconfig: Path, node_api: NodeApi) -> None:
    with installed(machines.dgx_h100()):
        status = run(["--once", "--node-name", "gpu-node-1", "--kubeconfig", str(kubeconfig)])
    assert status == 0
    assert len(node_api.patches) == 1
    meta = node_api.node["metadata"]
    assert meta["labels"][LABEL_NVLINK_DOMAIN_SIZE] == "8"
    assert json.loads(meta["annotations"][ANNOTATION])["acceleratorType"] == "nvidia-h100-80gb"


def test_node_name_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, node_api: NodeApi
) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    with installed(machines.l4_mps()):
        assert run(["--once", "--kubeconfig", str(kubeconfig)]) == 0
    assert node_api.patches[0].path == "/api/v1/nodes/gpu-node-1"


def test_missing_node_name_is_an_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with installed(machines.l4_mps()):
        assert run(["--once"]) == 2
    assert "NODE_NAME" in capsys.readouterr().err


def test_a_missing_node_fails_once_with_status_one(kubeconfig: Path, node_api: NodeApi) -> None:
    with installed(machines.l4_mps()):
        assert run(["--once", "--node-name", "no-such-node", "--kubeconfig", str(kubeconfig)]) == 1
    assert node_api.patches == []


def test_help_names_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--node-name", "--interval", "--heartbeat-interval", "--once", "--dry-run", "--kubeconfig"):
        assert flag in out


def test_bench_reports_scan_and_baseline() -> None:

    from bench_agent import bench_agent_scan

    result = bench_agent_scan(runs=3, warmup=1)
    assert result["gpus"] == 8 and result["domain_size"] == 8
    assert {"median_ms", "p99_ms"} <= set(result["scan"]) and result["ratio_median"] > 0


@pytest.mark.parametrize("flag", ["--interval", "--heartbeat-interval"])
def test_intervals_must_be_positive(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run([flag, "0", "--dry-run"])
    assert exit_info.value.code == 2
    assert "positive" in capsys.readouterr().err
