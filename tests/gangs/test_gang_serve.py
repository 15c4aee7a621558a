"""`kgwe serve --cluster DIR` with gangs, over real HTTPS with AdmissionReviews as kube-apiserver sends them:
the refusal of a gang no clique can hold; admission writes no gang record anywhere (a directory keeps no
shared state); `/api/v1/gangs` and `kgwe gangs` show the gangs planned from the directory's pods."""

from __future__ import annotations

import base64
import copy
import io
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml
from gang_support import clique_of, cliques, member, review
from patience import WAIT_SECONDS
from ui_harness import KgweServer, kgwe_serve

from webhook.cli import main

NODES = cliques(2, 18)  # an 8-GPU and a 72-GPU clique (an NVL72 rack)


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "cluster"
    directory.mkdir()
    (directory / "nodes.yaml").write_text(yaml.safe_dump_all(NODES))
    (directory / "namespaces.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": "ml"}}))
    return directory


@pytest.fixture
def served(tmp_path: Path, cluster_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KgweServer]:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    with kgwe_serve(tmp_path, cluster_dir) as server:
        yield server


def ask(server: KgweServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with server.api() as client:
        answer = client.post(f"{path}?timeout=10s", content=orjson.dumps(body),
                             headers={"Content-Type": "application/json"})
    assert answer.status_code == 200
    response: dict[str, Any] = answer.json()["response"]
    assert response["uid"] == body["request"]["uid"]
    return response


def create(server: KgweServer, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two webhook calls of a pod CREATE: (the pod after /mutate, the /validate response)."""
    mutated = ask(server, "/mutate", review(pod))
    patch = orjson.loads(base64.b64decode(mutated["patch"])) if "patch" in mutated else []
    obj = jsonpatch.apply_patch(copy.deepcopy(pod), patch)
    return obj, ask(server, "/validate", review(obj))


def test_a_gang_no_clique_can_hold_is_refused_over_https(served: KgweServer) -> None:
    _pod, verdict = create(served, member("w-0", "huge", 19))  # 76 GPUs; the largest clique has 72
    assert verdict["allowed"] is False
    assert verdict["status"]["code"] == 403
    message = verdict["status"]["message"]
    assert "19 pods x 4 GPUs = 76 GPUs" in message
    assert f"the largest NVLink clique, {clique_of(NODES, 'rack1-tray0')}, has 72 GPUs" in message


def test_admission_writes_nothing_and_the_views_plan_gangs_from_the_directorys_pods(
    served: KgweServer, tmp_path: Path, cluster_dir: Path
) -> None:
    pod, verdict = create(served, member("w-0", "llm", 2))
    assert verdict["allowed"] is True
    assert pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
    dry = ask(served, "/mutate", review(member("w-0", "dry", 2), dry_run=True))
    assert dry["allowed"] is True
    assert not list((tmp_path / "state").rglob("gangs*"))  # no record file: nothing outlives the requests
    assert served.get_json("/api/v1/gangs")["gangs"] == []  # requests without pods show nothing

    # The member lands in the cluster directory: the views plan its gang from it, as the controller would.
    (cluster_dir / "pods.yaml").write_text(yaml.safe_dump(pod))
    deadline = time.monotonic() + WAIT_SECONDS
    while not (gangs := served.get_json("/api/v1/gangs")["gangs"]):
        assert time.monotonic() < deadline, "the directory's pod never showed"
        time.sleep(0.1)
    clique = clique_of(NODES, "rack0-tray0")
    assert [(g["gang"], g["size"], g["room"], g["state"], g["reason"]) for g in gangs] == [
        ("llm", 2, clique, "Waiting", "1 of 2 members exist")
    ]
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(["gangs", "--cluster", str(cluster_dir), "-o", "json"])
    assert status == 0
    (row,) = orjson.loads(out.getvalue())["gangs"]
    assert (row["gang"], row["present"], row["gated"], row["bound"], row["room"]) == ("llm", 1, 1, 0, clique)
    assert row["reason"] == "1 of 2 members exist" and row["waitingSeconds"] is None  # planned now: nothing waited
    table = io.StringIO()
    with redirect_stdout(table):
        assert main(["gangs", "--cluster", str(cluster_dir)]) == 0
    assert "llm" in table.getvalue() and "Waiting" in table.getvalue()
    assert not list((tmp_path / "state").rglob("gangs*"))
