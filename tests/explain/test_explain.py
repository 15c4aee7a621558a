"""`kgwe explain` and `kgwe review --explain`: the decision trace, each policy, each check, and what blocks a
Pending pod now, through the admission core's own code against the example cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, copy_example_cluster, gpu_pod, plant

from webhook.assembly import build_runtime
from webhook.cli import main
from webhook.config import load_config
from webhook.explain import event_message, explain, render_text
from webhook.review import review_pod

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "examples" / "pods"


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))


def _pod(name: str) -> dict:
    return yaml.safe_load((PODS / name).read_text())


def test_mig_pod_trace_names_each_dropped_type_and_why() -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)
    found = explain(runtime.admission, _pod("05-mig-small.yaml"))
    assert found.allowed is True and found.changes > 0
    mig = next(step for step in found.trace if step.step == "mig")
    assert mig.kept == ("nvidia-a100-80gb",)
    assert dict(mig.dropped)["nvidia-h100-80gb"].startswith("no node offers MIG 1g.10gb")
    assert {c.check: c.result for c in found.checks} == {"policy": "ok", "placement": "ok", "RBAC": "ok", "quota": "ok"}
    assert any(p.policy == "kgwe.admission.memory_limit" and p.result.startswith("Warn:") for p in found.policies)


def test_refused_nvlink_pod_says_the_domain_size() -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)
    found = explain(runtime.admission, _pod("25-refused-nvlink.yaml"))
    assert found.allowed is False
    nvlink = found.trace[-1]
    assert nvlink.step == "nvlink" and nvlink.kept == ()
    assert nvlink.dropped == (("nvidia-l4-24gb", "largest NVLink domain has 1 GPUs, the pod asks for 2"),)
    assert ("placement", found.refusals[0]) in [(c.check, c.result) for c in found.checks]
    assert "nvlink" in event_message(found) and len(event_message(found)) <= 1024


def test_explaining_reserves_no_quota() -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)
    pod = _pod("01-single-type.yaml")
    for _ in range(5):
        assert explain(runtime.admission, pod).allowed is True
    assert review_pod(runtime.admission, pod).allowed  # the quota it would have used is all still there


def test_existing_pending_pod_shows_what_blocks_it_now(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    # Named apart from the example's own ml-research/waiting (examples/cluster/pods-waiting.yaml).
    wanted = gpu_pod("wants-8", "ml-research", gpus=8, phase="Pending",
                     annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    admitted = review_pod(runtime.admission, wanted)
    assert admitted.allowed
    pending = admitted.object
    # Every H100 node is full of bound pods.
    h100 = runtime.store.snapshot().types["nvidia-h100-80gb"].nodes
    fillers = [gpu_pod(f"busy-{n}", "ml-research", gpus=8, node=n) for n in h100]
    plant(cluster, "zz-pending.yaml", pending, *fillers)
    out = tmp_path / "out.json"
    code = _run_cli(["explain", "ml-research/wants-8", "--cluster", str(cluster), "--config", str(EXAMPLE_CONFIG),
                     "-o", "json"], out)
    assert code == 0
    body = json.loads(out.read_text())
    assert body["state"] == "pending"
    assert any("too little nvidia.com/gpu" in b and "free after the bound pods" in b for b in body["blocking"])


def test_cli_explain_file_and_review_explain_print_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert _run_cli(["explain", str(PODS / "08-nvlink.yaml"), "--cluster", str(EXAMPLE_CLUSTER)], out) == 0
    text = out.read_text()
    assert "placement, step by step" in text and "gpus per node: kept nvidia-h100-80gb" in text
    assert "at most 2 GPUs on one node, the pod asks for 8" in text
    assert _run_cli(["review", str(PODS / "08-nvlink.yaml"), "--cluster", str(EXAMPLE_CLUSTER), "--explain"], out) == 0
    assert "placement, step by step" in out.read_text()


def test_cli_explain_unknown_target_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "nope/nothing", "--cluster", str(EXAMPLE_CLUSTER)]) == 2
    assert capsys.readouterr().err.strip() == f"kgwe explain: nope/nothing: no such pod in {EXAMPLE_CLUSTER}"


def test_render_text_of_a_cpu_pod_says_kgwe_leaves_it() -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), EXAMPLE_CLUSTER)
    assert "KGWE leaves it as it is" in render_text(explain(runtime.admission, _pod("11-cpu-only.yaml")))


def _run_cli(args: list[str], out: Path) -> int:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(args)
    out.write_text(buffer.getvalue())
    return code


def test_api_explains_an_existing_pod_and_refuses_bad_references(tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from webhook.server.explain_routes import explain_router

    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(cluster, "zz-waiting.yaml", gpu_pod("stuck", "ml-research", gpus=16, phase="Pending",
                                              annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    app = FastAPI()
    app.include_router(explain_router(runtime))
    with TestClient(app) as client:
        body = client.get("/api/v1/explain", params={"pod": "ml-research/stuck"}).json()
        assert body["state"] == "pending" and body["refusals"]
        assert body["trace"][-1]["dropped"][0]["why"] == "at most 8 GPUs on one node, the pod asks for 16"
        assert client.get("/api/v1/explain", params={"pod": "ml-research/absent"}).status_code == 404
        for bad in ("", "no-slash", "a/b/c", "UPPER/x", "x/" + "y" * 300):
            assert client.get("/api/v1/explain", params={"pod": bad}).status_code == 400


def test_a_pod_waiting_for_its_tenants_quota_says_why(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    # team-a may use 8 H100s; train-llm-0 holds 4, a released pod 4 more: the gated one waits, first in line.
    admitted = review_pod(runtime.admission, gpu_pod("waiting", "team-a", gpus=4, phase="Pending",
                                                     annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))
    assert admitted.allowed, admitted.message
    pending = admitted.object
    assert {"name": "kgwe.io/quota"} in pending["spec"]["schedulingGates"]
    running = json.loads(json.dumps(pending))
    running["metadata"]["name"] = "running"
    running["spec"]["schedulingGates"] = []
    plant(cluster, "zz-quota.yaml", pending, running)
    out = tmp_path / "out.json"
    assert _run_cli(["explain", "team-a/waiting", "--cluster", str(cluster), "--config", str(EXAMPLE_CONFIG),
                     "-o", "json"], out) == 0
    body = json.loads(out.read_text())
    assert ("waits for its tenant's quota (gate kgwe.io/quota): team-a: nvidia-h100-80gb 8 of 8 GPUs in use; "
            "this pod asks 4; 1st in line") in body["blocking"]
