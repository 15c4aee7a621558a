"""Events on pods about KGWE's decisions, from a real `kgwe serve` reading a (fake) API server over HTTPS:
`KGWEPlaced` when /mutate changed a pod, `KGWERefused` when /validate refused one, none for dryRun."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from kube_fake_apiserver import FakeApiServer, serving_cluster, write_kubeconfig
from patience import WAIT_SECONDS
from ports import free_port

from webhook.review import create_review

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster"
CONFIG = ROOT / "examples" / "config.yaml"
PODS = ROOT / "examples" / "pods"

pytestmark = pytest.mark.timeout(120)


def _pod(name: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((PODS / name).read_text()) if d and d.get("kind") == "Pod")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FakeApiServer, httpx.Client]]:
    api = serving_cluster(CLUSTER)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state"),
           "KGWE_TEST_KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": "kgwe"}
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--config", str(CONFIG), "--host", "127.0.0.1",
         "--port", str(port), "--no-ui"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        ca_file = process.stdout.readline().rsplit("CA: ", 1)[1].strip()
        client = httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ssl.create_default_context(cafile=ca_file))
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "kgwe serve never became ready"
            time.sleep(0.1)
        yield api, client
        client.close()
    finally:
        process.terminate()
        process.wait(20)
        api.close()


def _ask(client: httpx.Client, path: str, review: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"{path}?timeout=10s", content=orjson.dumps(review))
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()["response"]
    return answer


def _events_for(api: FakeApiServer, name: str, wanted: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_SECONDS  # written by another thread, after the answer
    while True:
        with api.cond:
            found = [e for e in api.posted_events if e["involvedObject"]["name"] == name]
        if len(found) >= wanted or time.monotonic() > deadline:
            return found


def test_events_say_why_a_pod_was_placed_or_refused_and_never_for_dry_runs(
    served: tuple[FakeApiServer, httpx.Client],
) -> None:
    api, client = served
    # A dry run first: it must leave no Event, even once later Events have had time to arrive.
    dry = create_review(_pod("05-mig-small.yaml"), "alice", [])
    dry["request"]["dryRun"] = True
    dry["request"]["object"]["metadata"]["name"] = "dry-one"
    assert _ask(client, "/mutate", dry)["allowed"]

    placed = _ask(client, "/mutate", create_review(_pod("05-mig-small.yaml"), "alice", []))
    assert placed["allowed"] and placed.get("patch")
    [event] = _events_for(api, "notebook-mig", 1)
    assert event["reason"] == "KGWEPlaced" and event["type"] == "Normal"
    assert event["involvedObject"]["namespace"] == "inference"
    assert "placed on nvidia-a100-80gb (mig 1g.10gb)" in event["message"]
    assert "mig dropped" in event["message"] and "no node offers MIG 1g.10gb" in event["message"]

    refused = _ask(client, "/validate", create_review(_pod("25-refused-nvlink.yaml"), "alice", []))
    assert refused["allowed"] is False
    [warning] = _events_for(api, "nvlink-on-l4", 1)
    assert warning["reason"] == "KGWERefused" and warning["type"] == "Warning"
    assert "largest nvidia-l4-24gb NVLink domain has 1" in warning["message"]
    assert len(warning["message"]) <= 1024

    # One thread writes the Events in the order they were offered: the dry run came before both.
    assert _events_for(api, "dry-one", 0) == []
