"""`/validate`'s quota-queue warning for the replicas of a workload (pods alike but for their identity): it is
computed once per remembered plan (webhook/quotas/gate.py), and every replica must still get the words a
fresh server gives that pod alone. Real admission path, real AdmissionReview JSON, a cluster directory."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import yaml
from quota_fixtures import ROOT

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import answer, create_review, review_pod
from webhook.runtime import Runtime

H100 = {"kgwe.io/accelerator": "nvidia-h100-80gb"}


def gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "annotations": dict(H100)},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def runtime_of(cluster: Path) -> Runtime:
    return build_runtime(load_config(ROOT / "examples" / "config.yaml"), cluster)


def full_cluster(tmp_path: Path) -> Path:
    """team-a's 8 H100s all held (4 by `train-llm-0`, 4 by `r`), and `w` (4) gated ahead in line."""
    cluster = tmp_path / "cluster"
    shutil.copytree(ROOT / "examples" / "cluster", cluster)
    waiting = review_pod(runtime_of(cluster).admission, gpu_pod("w", 4), "alice").object
    waiting["metadata"]["creationTimestamp"] = "2026-11-29T00:00:00Z"
    running = copy.deepcopy(waiting)
    running["metadata"]["name"] = "r"
    running["spec"]["schedulingGates"] = []
    (cluster / "more-pods.yaml").write_text(yaml.safe_dump_all([waiting, running]))
    return cluster


def validated(runtime: Runtime, pod: dict[str, Any], name: str, uid: str) -> dict[str, Any]:
    replica = copy.deepcopy(pod)
    replica["metadata"]["name"] = name
    review = create_review(replica, "alice", [])
    review["request"]["uid"] = uid
    return answer(runtime.admission, review, False, 5.0)


def test_every_replica_gets_the_warning_a_fresh_server_gives_it(tmp_path: Path) -> None:
    cluster = full_cluster(tmp_path)
    runtime = runtime_of(cluster)
    mutated = review_pod(runtime.admission, gpu_pod("x", 1), "alice").object
    names = [f"x-{n}" for n in range(6)] + ["w", "x-6"]  # `w`: a gated pod of the snapshot has that name
    served = [validated(runtime, mutated, name, f"uid-{n}") for n, name in enumerate(names)]
    alone = [validated(runtime_of(cluster), mutated, name, f"uid-{n}") for n, name in enumerate(names)]
    assert [r["allowed"] for r in served] == [True] * len(names)
    assert [r.get("warnings") for r in served] == [r.get("warnings") for r in alone]
    assert any("8 of 8 GPUs in use; this pod asks 1; 2nd in line" in w for w in served[3]["warnings"])


def test_replicas_of_another_size_are_not_given_the_first_ones_words(tmp_path: Path) -> None:
    runtime = runtime_of(full_cluster(tmp_path))
    for gpus in (1, 2):
        mutated = review_pod(runtime.admission, gpu_pod("y", gpus), "alice").object
        for n in range(3):
            warnings = validated(runtime, mutated, f"y{gpus}-{n}", f"uid-{gpus}-{n}").get("warnings") or []
            assert any(f"this pod asks {gpus}; 2nd in line" in w for w in warnings), warnings


def served_alike(cluster: Path, pods: list[tuple[dict[str, Any], str, list[str]]]) -> list[dict[str, Any]]:
    """Each (pod, user, groups) validated as replicas by one server, checked against a fresh server's answer."""
    runtime = runtime_of(cluster)
    served = []
    for n, (pod, user, groups) in enumerate(pods):
        replica = copy.deepcopy(pod)
        replica["metadata"]["name"] = f"rep-{n}"
        review = create_review(replica, user, groups)
        review["request"]["uid"] = f"uid-{n}"
        got = answer(runtime.admission, review, False, 5.0)
        alone = answer(runtime_of(cluster).admission, review, False, 5.0)
        assert (got["allowed"], got.get("status"), got.get("warnings")) == (
            alone["allowed"], alone.get("status"), alone.get("warnings"))
        served.append(got)
    return served


def test_quota_refusals_hold_for_every_replica(tmp_path: Path) -> None:
    cluster = full_cluster(tmp_path)
    runtime = runtime_of(cluster)
    too_big = review_pod(runtime.admission, gpu_pod("big", 16), "alice").object
    ungated = copy.deepcopy(review_pod(runtime.admission, gpu_pod("u", 1), "alice").object)
    ungated["spec"]["schedulingGates"] = []
    answers = served_alike(cluster, [(too_big, "alice", [])] * 4 + [(ungated, "alice", [])] * 4)
    assert [a["allowed"] for a in answers] == [False] * 8
    assert len({a["status"]["message"] for a in answers[:4]}) == 1
    assert all("does not carry it" in a["status"]["message"] for a in answers[4:])


def test_replicas_sent_by_other_tenants_get_their_own_answer(tmp_path: Path) -> None:
    cluster = full_cluster(tmp_path)
    pod = gpu_pod("g", 8)
    pod["metadata"]["namespace"] = "default"
    mutated = review_pod(runtime_of(cluster).admission, pod, "carol", ["ml-researchers"]).object
    senders = [("carol", ["ml-researchers"])] * 3 + [("bob", [])] * 3 + [("carol", ["ml-researchers"])]
    served_alike(cluster, [(mutated, user, groups) for user, groups in senders])
