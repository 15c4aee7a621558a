"""examples/gangs/ as the code has it: the indexed Job's pods, admitted and released over the fake API server with
the Workload API on (the example cluster's GB200 cliques), carry the PodGroup and get exactly the Workload and
PodGroup that examples/gangs/workload-api-objects.yaml shows."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gang_support import GangApiServer, replica
from kubernetes import client as k8s_client

from webhook.cluster.yaml_source import iter_manifests
from webhook.review import review_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def served() -> Iterator[tuple[GangApiServer, k8s_client.ApiClient]]:
    server = GangApiServer(workload_api=True, topology_aware=True).start()
    for _path, obj in iter_manifests(EXAMPLES / "cluster"):
        if obj["kind"] in ("Node", "Namespace"):
            server.put(obj["kind"], obj)
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    with k8s_client.ApiClient(configuration) as client:
        yield server, client
    from gang_support import _sources

    while _sources:
        _sources.pop().stop()
    server.close()


def _subset(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "ownerReferences")}, "spec": obj["spec"]}


def test_the_indexed_job_example_gets_the_workload_and_pod_group_the_reference_shows(served: Any) -> None:
    server, api = served
    cluster = replica(server, api)
    job = yaml.safe_load((EXAMPLES / "gangs" / "indexed-job.yaml").read_text())
    reviewed = review_document(cluster.runtime.admission, job, "alice@example.com", ["system:authenticated"], 10.0)
    assert reviewed.allowed, reviewed.message
    template = reviewed.object["spec"]["template"]
    documents = list(yaml.safe_load_all((EXAMPLES / "gangs" / "workload-api-objects.yaml").read_text()))
    pods = [d for d in documents if d["kind"] == "Pod"]
    for shown in pods:  # as the Job controller creates them from the template
        meta = {**copy.deepcopy(template["metadata"]), "name": shown["metadata"]["name"], "namespace": "ml-research",
                "ownerReferences": shown["metadata"]["ownerReferences"]}
        stored = cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                 "spec": copy.deepcopy(template["spec"])})
        assert stored["spec"]["schedulingGroup"] == shown["spec"]["schedulingGroup"]
        assert {"name": "kgwe.io/gang"} in stored["spec"]["schedulingGates"]
        assert stored["metadata"]["labels"]["kgwe.io/gang"] == "finetune"
    assert [a.kind for a in cluster.controller().reconcile_once()] == ["release"]
    assert cluster.gated() == set()
    for shown in (d for d in documents if d["kind"] != "Pod"):
        (made,) = server.objects(shown["kind"]).values()
        assert _subset(made) == shown
