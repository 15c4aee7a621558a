"""The fake API server's bulk path (what bench/bench_scale.py serves 150,000 pods with) keeps the protocol a
reflector relies on: `load` is a compacted history, paged lists are a snapshot, a PATCH changes one pod."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kube_fake_apiserver import FakeApiServer


def _get(server: FakeApiServer, path: str) -> Any:
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        if "watch=true" in path:
            return [json.loads(line) for line in response.read().splitlines() if line.strip()]
        return json.loads(response.read())


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "cuda"}]}}


def test_loaded_objects_are_listed_and_older_watches_relist(apiserver: FakeApiServer) -> None:
    before = apiserver.resource_version
    version = apiserver.load("Pod", [_pod(f"p{i}") for i in range(5)])
    listed = _get(apiserver, "/api/v1/pods")
    assert [p["metadata"]["name"] for p in listed["items"]] == [f"p{i}" for i in range(5)]
    assert "kind" not in listed["items"][0]  # built-in kinds' list items carry none
    assert listed["metadata"]["resourceVersion"] == str(version)
    gone = _get(apiserver, f"/api/v1/pods?watch=true&resourceVersion={before}&timeoutSeconds=1")
    assert gone[0]["type"] == "ERROR" and gone[0]["object"]["code"] == 410
    apiserver.put("Pod", _pod("p5"))
    events = _get(apiserver, f"/api/v1/pods?watch=true&resourceVersion={version}&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "p5")]


def test_paged_list_is_the_snapshot_of_its_first_page(apiserver: FakeApiServer) -> None:
    apiserver.load("Pod", [_pod(f"p{i}") for i in range(4)])
    first = _get(apiserver, "/api/v1/pods?limit=2")
    changed = _pod("p3")
    changed["metadata"]["labels"] = {"changed": "yes"}
    apiserver.put("Pod", changed)
    apiserver.delete("Pod", "team-a/p2")
    rest = _get(apiserver, f"/api/v1/pods?limit=2&continue={first['metadata']['continue']}")
    assert [p["metadata"]["name"] for p in first["items"] + rest["items"]] == ["p0", "p1", "p2", "p3"]
    assert "labels" not in rest["items"][1]["metadata"]
    assert "continue" not in rest["metadata"]
    again = _get(apiserver, "/api/v1/pods")
    assert [p["metadata"].get("labels") for p in again["items"]] == [None, None, {"changed": "yes"}]


def test_patching_one_pod_changes_only_it(apiserver: FakeApiServer) -> None:
    apiserver.load("Pod", [_pod("a"), _pod("b")])
    request = urllib.request.Request(
        apiserver.url + "/api/v1/namespaces/team-a/pods/a", method="PATCH",
        data=json.dumps({"metadata": {"labels": {"seen": "1"}}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["metadata"]["labels"] == {"seen": "1"}
    stored = apiserver.objects("Pod")
    assert stored["team-a/a"]["metadata"]["labels"] == {"seen": "1"}
    assert "labels" not in stored["team-a/b"]["metadata"]
    assert apiserver.get("Pod", "team-a/missing") is None
