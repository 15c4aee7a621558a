"""Issue 37: no request that is not followed by a real pod may change anything. KGWE assembled for a cluster as
`kgwe serve` assembles it (webhook/assembly.py, `from_api(serving=True)`), over the fake API server: `/mutate` of
gang members, forged or real, writes no GangLedger (nor reads one); the leader's gang controller, on the store
`kgwe serve` gives it, records a gang only once its members exist in the API, and releases it when whole."""

from __future__ import annotations

import base64
import copy
from typing import Any

import jsonpatch
import orjson
from fastapi.testclient import TestClient
from gang_support import (
    LEDGER_PATH,
    GangApiServer,
    api,  # noqa: F401  (fixture)
    clique_of,
    cliques,
    gang_apiserver,  # noqa: F401  (fixture)
    member,
    review,
    with_nodes,
)
from kubernetes import client as k8s_client

from webhook import assembly
from webhook.config import Config
from webhook.gangs.controller import GangController, kube_pod_writer
from webhook.server.app import create_app
from webhook.server.serving import gang_ledger
from webhook.wing_config import Gangs


def mutated(client: TestClient, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as kube-apiserver would store it after KGWE's `/mutate` answer."""
    answer = client.post("/mutate?timeout=10s", content=orjson.dumps(review(pod)),
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"] is True, response
    patch = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(copy.deepcopy(pod), patch)


def ledger_calls(server: GangApiServer) -> list[str]:
    with server.cond:
        return [f"{r.method} {r.path}" for r in server.requests if r.path.startswith(LEDGER_PATH)]


def test_mutate_writes_no_gang_record_and_the_controller_records_the_gang_from_its_pods(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    nodes = cliques(2, 4)  # an 8-GPU and a 16-GPU clique
    with_nodes(gang_apiserver, nodes)
    config = Config(gangs=Gangs(waitWarningSeconds=120, timeoutSeconds=600))
    built = assembly.from_api(config, api, serving=True)
    try:
        with TestClient(create_app(built.runtime, ui=False)) as client:
            members = [mutated(client, member(f"w-{index}", "llm", 2)) for index in range(2)]
            # Forged reviews (or members the API server then refused): no pod ever follows them.
            for index in range(3):
                mutated(client, member(f"ghost-{index}", f"ghost-{index}", 2))
        assert all(m["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}] for m in members)
        assert ledger_calls(gang_apiserver) == []  # admission neither wrote nor read a gang record
        assert gang_apiserver.ledger is None

        store = built.runtime.store
        controller = GangController(store, gang_ledger(api), config, kube_pod_writer(api))
        controller.reconcile_once()
        assert gang_apiserver.ledger is None  # no member exists: nothing to record (no empty ledger either)

        def exists(*keys: str) -> None:
            gang_apiserver.wait_for(lambda: all(k in store.snapshot(force=True).pods for k in keys))

        gang_apiserver.put("Pod", members[0])
        exists("ml/w-0")
        controller.reconcile_once()
        (record,) = gang_apiserver.ledger_records()
        assert (record["gang"], record["reason"]) == ("llm", "1 of 2 members exist")
        assert record["room"]["value"] == clique_of(nodes, "rack0-tray0")  # promised once a member exists

        gang_apiserver.put("Pod", members[1])
        exists("ml/w-0", "ml/w-1")
        assert [a.kind for a in controller.reconcile_once()] == ["release"]
        for key in ("ml/w-0", "ml/w-1"):
            assert "schedulingGates" not in gang_apiserver.pod(key)["spec"]
        assert [r["gang"] for r in gang_apiserver.ledger_records()] == ["llm"]  # never a ghost
    finally:
        built.stop_source()
