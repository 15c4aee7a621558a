"""rightsizing.mode at admission (SPEC section 11, docs/usage.md "At admission"), through real HTTPS webhooks on
the example cluster, from a usage table set in memory (the request path never reads Prometheus: the service
behind the table here raises if anything asks it)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from workload_support import REPLICASET_CONTROLLER, Server, pod_from_template, review, serve

from webhook.config import Config, Rightsizing, RightsizingRule
from webhook.usage.refresher import UsageRefresher
from webhook.usage.table import AskedDoc, TableRecommendation, UsageTable, WorkloadUsage

MIG_INTENT = {"kgwe.io/accelerator": "nvidia-a100-80gb", "kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "40Gi"}


class _NoPrometheus:
    def read_all(self) -> Any:
        raise AssertionError("the request path read Prometheus")


def usage_row(key: str, *, confidence: float = 0.9, gpus: int = 1, asks_gpus: int = 1,
              intent: dict[str, str] | None = None, idle: bool = False) -> WorkloadUsage:
    return WorkloadUsage(
        workload=key, enough_history=True, peak_memory_mib=14210, engine_activity_p95=0.03, idle=idle,
        idle_pods=1 if idle else 0, idle_gpu_equivalents=1.0 if idle else 0.0,
        recommendation=TableRecommendation(
            change=True, shape="nvidia-a100-80gb MIG 3g.40gb" if gpus == 1 else f"{gpus}x nvidia-h100-80gb",
            accelerator_type="nvidia-a100-80gb", sharing="mig", gpus=gpus, intent=intent or dict(MIG_INTENT),
            asks=AskedDoc(shape=f"{asks_gpus}x nvidia-h100-80gb", accelerator_type="nvidia-h100-80gb", gpus=asks_gpus),
            gpu_equivalents_saved_per_pod=0.571, hourly_saved_per_pod="3.30", currency="USD",
            confidence=confidence, confidence_level="high" if confidence >= 0.67 else "low",
        ),
        at=time.time(),
    )


def with_table(server: Server, rows: list[WorkloadUsage], **settings: Any) -> None:
    runtime = server.runtime
    refresher = UsageRefresher(_NoPrometheus(), lambda: runtime.config, runtime.store.snapshot)  # type: ignore[arg-type]
    refresher.set_table(UsageTable(time.time(), time.time(), {r.workload: r for r in rows}))
    runtime.usage = refresher
    config: Config = runtime.config.model_copy(update={"rightsizing": Rightsizing(**settings)})
    runtime.set_config(config)


def deployment(annotations: dict[str, str] | None = None, gpus: int = 1, name: str = "llm") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team-a", "annotations": annotations or {}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}, "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb"}},
            "spec": {"containers": [{"name": "main", "image": "vllm", "resources": {
                "limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}}}]},
        }},
    }


def bare_pod(annotations: dict[str, str] | None = None, name: str = "notebook", gpus: int = 1) -> dict[str, Any]:
    notes = {"kgwe.io/accelerator": "nvidia-h100-80gb", **(annotations or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a", "annotations": notes},
            "spec": {"containers": [{"name": "main", "image": "jupyter", "resources": {
                "limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}}}]}}


def admit_as_alice(server: Server, obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    validated, mutated, _patch = server.admit(review(obj, user="alice", groups=("team-a",)))
    return validated, mutated


def notes_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("annotations") or {})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    import os

    os.environ.setdefault("KGWE_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    yield from serve(Path(tmp_path_factory.mktemp("tls")))


def test_off_by_default_nothing_changes_even_with_a_table(server: Server) -> None:
    with_table(server, [usage_row("Deployment/team-a/llm")])
    validated, mutated = admit_as_alice(server, deployment())
    assert validated["allowed"]
    assert notes_of(mutated["spec"]["template"])["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert not any("rightsizing" in w for w in validated["warnings"])


def test_recommend_warns_with_the_intent_and_the_saving_and_changes_nothing(server: Server) -> None:
    with_table(server, [usage_row("Deployment/team-a/llm")], mode="recommend")
    validated, mutated = admit_as_alice(server, deployment())
    template = mutated["spec"]["template"]
    assert notes_of(template)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert "kgwe.io/rightsized-from" not in notes_of(template)
    assert ("spec.template: KGWE rightsizing: set kgwe.io/accelerator=nvidia-a100-80gb kgwe.io/sharing=mig "
            "kgwe.io/gpu-memory=40Gi") in validated["warnings"]
    assert any(w.startswith("spec.template: KGWE rightsizing: saves 0.571 GPU-eq + 3.30 USD/h per pod with "
                            "nvidia-a100-80gb MIG 3g.40gb") for w in validated["warnings"]), validated["warnings"]


def test_auto_writes_the_recommendation_into_the_template_and_its_pods_pass_unchanged(server: Server) -> None:
    with_table(server, [usage_row("Deployment/team-a/llm")], mode="auto")
    validated, mutated = admit_as_alice(server, deployment())
    assert validated["allowed"], validated.get("status")
    template = mutated["spec"]["template"]
    notes = notes_of(template)
    assert {k: notes[k] for k in MIG_INTENT} == MIG_INTENT
    assert orjson.loads(notes["kgwe.io/rightsized-from"]) == {
        "asked": {"kgwe.io/accelerator": "nvidia-h100-80gb"}, "shape": "1x nvidia-h100-80gb"}
    # Placed as the recommended intent says: a MIG slice of an A100 instead of a whole H100.
    assert template["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/mig-3g.40gb") in (1, "1")
    assert "nvidia.com/gpu" not in template["spec"]["containers"][0]["resources"]["limits"]
    assert any("nvidia-a100-80gb MIG 3g.40gb instead of 1x nvidia-h100-80gb" in w for w in validated["warnings"])
    # SPEC section 7: a pod of the mutated template (made by the ReplicaSet controller) passes unchanged.
    pod = pod_from_template(template, "team-a", "llm-5d8f7c9b4-x2x9z")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-5d8f7c9b4",
                                           "uid": "u1", "controller": True}]
    body = review(pod, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",))
    assert "patch" not in server.ask("/mutate", body)
    assert server.ask("/validate", body)["allowed"]
    # And a second pass over the rightsized workload (an UPDATE, a reinvocation) changes nothing.
    again = server.ask("/mutate", review(mutated, operation="UPDATE", old=mutated, user="alice", groups=("team-a",)))
    assert "patch" not in again


def test_a_pod_of_a_template_kgwe_admitted_is_left_to_its_template(server: Server) -> None:
    # The template was admitted before the recommendation (not rightsized): its pods are not rewritten one by
    # one (they would differ from their template); the next apply of the Deployment rightsizes it.
    with_table(server, [usage_row("Deployment/team-a/llm")], mode="auto")
    template = deployment()["spec"]["template"]
    pod = pod_from_template(template, "team-a", "llm-5d8f7c9b4-abcde")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-5d8f7c9b4",
                                           "uid": "u1", "controller": True}]
    _validated, mutated, _ = server.admit(review(pod, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",)))
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert "kgwe.io/rightsized-from" not in notes_of(mutated)


def test_auto_rewrites_a_bare_pod_of_a_workload_with_history(server: Server) -> None:
    with_table(server, [usage_row("Pod/team-a/notebook")], mode="auto")
    validated, mutated = admit_as_alice(server, bare_pod())
    assert validated["allowed"], validated.get("status")
    notes = notes_of(mutated)
    assert notes["kgwe.io/accelerator"] == "nvidia-a100-80gb" and notes["kgwe.io/sharing"] == "mig"
    assert "kgwe.io/rightsized-from" in notes


@pytest.mark.parametrize("where", ["workload", "template"])
def test_the_opt_out_on_a_workload_or_its_template_keeps_what_was_asked(server: Server, where: str) -> None:
    with_table(server, [usage_row("Deployment/team-a/llm")], mode="auto")
    workload = deployment({"kgwe.io/rightsizing": "off"} if where == "workload" else None)
    if where == "template":
        workload["spec"]["template"]["metadata"]["annotations"]["kgwe.io/rightsizing"] = "off"
    validated, mutated = admit_as_alice(server, workload)
    assert notes_of(mutated["spec"]["template"])["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert not any("rightsizing" in w for w in validated["warnings"])


def test_the_opt_out_on_a_pod_and_a_forged_record_keep_what_was_asked(server: Server) -> None:
    with_table(server, [usage_row("Pod/team-a/notebook")], mode="auto")
    for notes in ({"kgwe.io/rightsizing": "OFF "}, {"kgwe.io/rightsized-from": "{}"}):
        validated, mutated = admit_as_alice(server, bare_pod(notes))
        assert validated["allowed"]
        assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"


def test_attacker_sized_annotations_are_bounded(server: Server) -> None:
    with_table(server, [usage_row("Pod/team-a/notebook")], mode="auto")
    # An opt-out value past its bound is not an opt-out (and is never scanned): rightsized as usual.
    validated, mutated = admit_as_alice(server, bare_pod({"kgwe.io/rightsizing": "off" + " " * 100_000}))
    assert validated["allowed"]
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-a100-80gb"
    # A profile name past any object name's length matches no rule and breaks nothing.
    with_table(server, [usage_row("Pod/team-a/notebook")], mode="off",
               rules=[RightsizingRule(profile="x" * 300, mode="auto")])
    _validated, mutated = admit_as_alice(server, bare_pod({"kgwe.io/profile": "x" * 300}))
    assert "kgwe.io/rightsized-from" not in notes_of(mutated)


def test_rules_pick_the_mode_per_namespace_selector_or_profile(server: Server) -> None:
    rules = [RightsizingRule(namespaceSelector={"matchLabels": {"kgwe.io/tenant": "team-a"}}, mode="recommend")]
    with_table(server, [usage_row("Pod/team-a/notebook")], mode="auto", rules=rules)
    validated, mutated = admit_as_alice(server, bare_pod())
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert any("KGWE rightsizing" in w for w in validated["warnings"])


def test_auto_only_warns_when_unsure_or_when_the_gpu_count_would_change(server: Server) -> None:
    with_table(server, [usage_row("Pod/team-a/notebook", confidence=0.4)], mode="auto")
    validated, mutated = admit_as_alice(server, bare_pod())
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert any("not applied: confidence 0.4 < rightsizing.autoMinConfidence 0.67" in w
               for w in validated["warnings"]), validated["warnings"]
    fewer = usage_row("Pod/team-a/trainer", gpus=2, asks_gpus=4,
                      intent={"kgwe.io/accelerator": "nvidia-h100-80gb", "kgwe.io/sharing": "exclusive"})
    with_table(server, [fewer], mode="auto")
    validated, mutated = admit_as_alice(server, bare_pod(name="trainer", gpus=4))
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert "KGWE rightsizing: 2 GPU(s) instead of 4 would do" in validated["warnings"]


def test_a_recommendation_that_would_be_refused_is_not_applied(server: Server) -> None:
    nowhere = {"kgwe.io/accelerator": "nvidia-v100-16gb", "kgwe.io/sharing": "exclusive"}
    with_table(server, [usage_row("Pod/team-a/notebook", intent=nowhere)], mode="auto")
    validated, mutated = admit_as_alice(server, bare_pod())
    assert validated["allowed"]
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    assert any(w.startswith("KGWE rightsizing not applied: it cannot be placed")
               for w in validated["warnings"]), validated["warnings"]


def test_without_a_table_or_with_a_stale_one_nothing_changes(server: Server) -> None:
    with_table(server, [usage_row("Pod/team-a/notebook")], mode="auto")
    server.runtime.usage.set_table(None)  # type: ignore[union-attr]
    _validated, mutated = admit_as_alice(server, bare_pod())
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
    old = time.time() - 7200
    stale = UsageTable(old, old, {"Pod/team-a/notebook": usage_row("Pod/team-a/notebook")})
    server.runtime.usage.set_table(stale)  # type: ignore[union-attr]
    _validated, mutated = admit_as_alice(server, copy.deepcopy(bare_pod()))
    assert notes_of(mutated)["kgwe.io/accelerator"] == "nvidia-h100-80gb"
