"""`/mutate`'s answers remembered for replicas (webhook/admission/mutate.py `answer_slot`) are a fresh runtime's
answers: for every example pod and generated pods, sent again and again as a controller's replicas are (the same
body but for the uid, named or not), in both example clusters and in audit mode; and each kind of state the answer
reads, changed after the memo holds the answer, gives the answer a fresh runtime gives over the changed state.
"""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from effort import tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifests import example_pods
from placement_support import EXAMPLES, review
from prometheus_client import REGISTRY
from review_strategies import pods

from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest, decode_review
from webhook.admission.response import render_review
from webhook.admission.seams import AdmissionGate, Gate
from webhook.assembly import build_runtime
from webhook.config import Config, Rightsizing, load_config
from webhook.runtime import Runtime
from webhook.usage.refresher import UsageRefresher
from webhook.usage.table import AskedDoc, TableRecommendation, UsageTable, WorkloadUsage

CONFIG = load_config(EXAMPLES / "config.yaml")
EXAMPLE_PODS = example_pods(EXAMPLES / "pods")
SENDS = 5  # seen once, marked, remembered, then answered from the memo twice


def _runtime(cluster: str = "cluster", config: Config = CONFIG, policies: bool = False) -> Runtime:
    return build_runtime(config, EXAMPLES / cluster, load_policies=policies)


def _answer(outcome: Outcome) -> bytes:
    # Rendered first: a remembered answer renders its kept patch encoding only while nothing has read its patch.
    rendered = render_review("uid", "admission.k8s.io/v1", outcome, True)
    return orjson.dumps([rendered, outcome.allowed, outcome.message, outcome.code, outcome.warnings,
                         outcome.audit_annotations, outcome.patch, outcome.object, outcome.creates],
                        option=orjson.OPT_SORT_KEYS)


def _as_replica(pod: dict[str, Any], named: bool) -> dict[str, Any]:
    """The pod as a controller's replicas reach `/mutate`: a name of its own, or none (generateName)."""
    replica = copy.deepcopy(pod)
    metadata = replica.setdefault("metadata", {})
    if not named:
        metadata.pop("name", None)
        metadata["generateName"] = "worker-"
    return replica


def _remembered(runtime: Runtime) -> int:
    """How many answers the runtime's snapshot holds for replicas."""
    entries = runtime.store.snapshot().derived.get("placement.memo", {}).values()
    return sum(1 for entry in entries if entry is not None
               for kept in entry.derived.get("mutate.answers", {}).values() if kept is not None)


def _assert_answers_as_fresh(warm: Runtime, fresh: Callable[[], Runtime], pod: dict[str, Any], sends: int = SENDS,
                             dry_run: bool = True) -> None:
    # A fresh runtime answers the first and the last sending (each with a uid of its own): the last is answered from
    # the memo, so an answer that read the uid would differ there; a fresh runtime is deterministic, so the sendings
    # between are held to the first's fresh answer.
    expected = b""
    for send in range(sends):
        body = review(pod, dry_run=dry_run)  # a new uid each time
        got = _answer(warm.admission.mutate(decode_review(body)))
        if send in (0, sends - 1):
            expected = _answer(fresh().admission.mutate(decode_review(body)))
        assert got == expected


# The DRA cluster as a controller's replicas reach it only (no name): a named pod's key differs from a generated one's
# by the name alone, which the plain cluster covers both ways.
@pytest.mark.parametrize(("cluster", "named"), [("cluster", True), ("cluster", False), ("cluster-dra", False)],
                         ids=["cluster-named", "cluster-generated-name", "cluster-dra-generated-name"])
def test_every_example_pod_is_answered_as_a_fresh_runtime_answers_it(cluster: str, named: bool) -> None:
    warm = _runtime(cluster)
    for pod in EXAMPLE_PODS:
        _assert_answers_as_fresh(warm, lambda: _runtime(cluster), _as_replica(pod, named))
    assert _remembered(warm) >= len(EXAMPLE_PODS) // 2  # the memo answered: most example pods are placed


def test_with_policies_and_in_audit_mode_too() -> None:
    audit = CONFIG.model_copy(update={"mode": "audit"})
    for config, policies in ((CONFIG, True), (audit, False)):
        warm = _runtime(config=config, policies=policies)
        for pod in EXAMPLE_PODS[:8]:
            _assert_answers_as_fresh(warm, lambda c=config, p=policies: _runtime(config=c, policies=p),  # type: ignore[misc]
                                     _as_replica(pod, False), sends=4)
        assert _remembered(warm) > 0


def test_audit_mode_counts_every_answer_it_would_have_made() -> None:
    warm = _runtime(config=CONFIG.model_copy(update={"mode": "audit"}))
    pod = _as_replica(EXAMPLE_PODS[0], False)
    answers = [warm.admission.mutate(decode_review(review(pod, dry_run=True))) for _ in range(SENDS)]
    step = answers[0].audit_annotations["would-mutate"].split(",")[0]
    before = REGISTRY.get_sample_value("kgwe_would_mutate_total", {"step": step}) or 0.0
    for _ in range(3):
        warm.admission.mutate(decode_review(review(pod, dry_run=True)))
    assert _remembered(warm) == 1
    assert REGISTRY.get_sample_value("kgwe_would_mutate_total", {"step": step}) == before + 3


@settings(max_examples=tries(12, 150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), cluster=st.sampled_from(["cluster", "cluster-dra"]))
def test_generated_pods_are_answered_as_a_fresh_runtime_answers_them(pod: dict[str, Any], cluster: str) -> None:
    warm = _runtime(cluster)
    _assert_answers_as_fresh(warm, lambda: _runtime(cluster), pod, sends=4)


def test_an_answer_handed_out_shares_nothing_with_the_memo() -> None:
    warm = _runtime()
    pod = _as_replica(EXAMPLE_PODS[0], False)
    answers = [warm.admission.mutate(decode_review(review(pod, dry_run=True))) for _ in range(SENDS)]
    expected = _answer(answers[-1])
    answers[-1].patch.clear()
    (answers[-1].object or {}).clear()
    answers[-1].warnings.append("changed by a caller")
    assert _answer(warm.admission.mutate(decode_review(review(pod, dry_run=True)))) == expected


def _patch_rendered(outcome: Outcome) -> Any:
    response = render_review("uid", "admission.k8s.io/v1", outcome, True)["response"]
    return orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else None


def test_a_remembered_answer_renders_what_it_holds_after_a_change() -> None:
    warm = _runtime()
    pod = _as_replica(EXAMPLE_PODS[0], False)
    fresh = _runtime().admission.mutate(decode_review(review(pod, dry_run=True)))
    answers = [warm.admission.mutate(decode_review(review(pod, dry_run=True))) for _ in range(SENDS)]
    assert _remembered(warm) == 1 and fresh.patch
    added = {"op": "add", "path": "/metadata/labels/changed", "value": "by-a-hook"}
    changed, emptied, replaced, untouched = answers[1:]
    changed.patch.append(added)  # changed in place, after a read
    emptied.patch = []
    replaced.patch = [added]
    assert _patch_rendered(changed) == [*fresh.patch, added]
    assert _patch_rendered(emptied) is None
    assert _patch_rendered(replaced) == [added]
    assert _patch_rendered(untouched) == fresh.patch
    # Equal to a fresh runtime's outcome both ways (`Outcome`'s own __eq__ compares one class only), and not once
    # one of them differs.
    fresh.plan = untouched.plan
    assert untouched == fresh and fresh == untouched
    assert untouched.object is not None and untouched.object == fresh.object
    untouched.object["changed"] = True
    assert untouched != fresh and fresh != untouched
    assert emptied.object == fresh.object  # its own pod, decoded from the memo's bytes


# -- each kind of state the answer reads, changed once the memo holds the answer ------------------------------


def _notebook(name: str = "notebook") -> dict[str, Any]:
    notes = {"kgwe.io/accelerator": "nvidia-h100-80gb"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a", "annotations": notes},
            "spec": {"containers": [{"name": "main", "image": "jupyter",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def _profiled() -> dict[str, Any]:
    return next(p for p in EXAMPLE_PODS if (p["metadata"].get("annotations") or {}).get("kgwe.io/profile")
                == "workbench-h100")


def _upsert(runtime: Runtime, obj: dict[str, Any]) -> None:
    runtime.store.upsert(copy.deepcopy(obj))
    runtime.store.snapshot(force=True)


def _store_object(runtime: Runtime, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in runtime.store.objects(kind) if o["metadata"]["name"] == name]
    return copy.deepcopy(found[0])


def _changed_quota(runtime: Runtime) -> None:
    quota = _store_object(runtime, "TenantQuota", "team-a")
    runtime.store.delete(quota)
    runtime.store.snapshot(force=True)


def _changed_profile(runtime: Runtime) -> None:
    profile = _store_object(runtime, "HardwareProfile", "workbench-h100")
    profile["spec"]["resources"]["cpu"]["default"] = "8"
    _upsert(runtime, profile)


def _changed_node(runtime: Runtime) -> None:
    for node in runtime.store.objects("Node"):
        if (node["metadata"].get("labels") or {}).get("nvidia.com/gpu.product", "").startswith("NVIDIA-H100"):
            runtime.store.delete(node)
    runtime.store.snapshot(force=True)


def _changed_config(runtime: Runtime) -> None:
    runtime.set_config(runtime.config.model_copy(update={"mode": "audit"}))


def _usage_row(key: str) -> WorkloadUsage:
    intent = {"kgwe.io/accelerator": "nvidia-a100-80gb", "kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "40Gi"}
    return WorkloadUsage(
        workload=key, enough_history=True, peak_memory_mib=14210, engine_activity_p95=0.03, idle=False, idle_pods=0,
        idle_gpu_equivalents=0.0, recommendation=TableRecommendation(
            change=True, shape="nvidia-a100-80gb MIG 3g.40gb", accelerator_type="nvidia-a100-80gb", sharing="mig",
            gpus=1, intent=intent, asks=AskedDoc(shape="1x nvidia-h100-80gb", accelerator_type="nvidia-h100-80gb",
                                                 gpus=1),
            gpu_equivalents_saved_per_pod=0.571, hourly_saved_per_pod="3.30", currency="USD", confidence=0.9,
            confidence_level="high"),
        at=time.time())


class _NoPrometheus:
    def read_all(self) -> Any:
        raise AssertionError("the request path read Prometheus")


def _usage(runtime: Runtime, recommend: bool) -> None:
    if recommend and not isinstance(runtime.usage, UsageRefresher):
        runtime.set_config(runtime.config.model_copy(update={"rightsizing": Rightsizing(mode="recommend")}))
        runtime.usage = UsageRefresher(_NoPrometheus(), lambda: runtime.config,  # type: ignore[arg-type]
                                       runtime.store.snapshot)
    if isinstance(runtime.usage, UsageRefresher):
        rows = {"Pod/team-a/notebook": _usage_row("Pod/team-a/notebook")} if recommend else {}
        runtime.usage.set_table(UsageTable(time.time(), time.time(), rows))


def _changed_usage(runtime: Runtime) -> None:
    _usage(runtime, True)


class _HoldGate(AdmissionGate):
    def scheduling_gates(self, request: AdmissionRequest, facts: Any) -> list[str]:
        return ["example.com/hold"]


def _changed_gates(runtime: Runtime) -> None:
    runtime.admission.seams.gates.append(_HoldGate())


CHANGES: dict[str, tuple[Callable[[Runtime], None], Callable[[], dict[str, Any]]]] = {
    "quota state": (_changed_quota, _notebook),
    "hardware profile": (_changed_profile, _profiled),
    "snapshot (nodes)": (_changed_node, _notebook),
    "configuration": (_changed_config, _notebook),
    "usage row": (_changed_usage, _notebook),
    "gates": (_changed_gates, _notebook),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_change_of_state_is_answered_as_a_fresh_runtime_answers_it(what: str) -> None:
    change, pod_of = CHANGES[what]
    pod = pod_of()
    warm = _runtime()
    if what == "usage row":  # a table without the pod's row first; then its row, in a table of its own
        _usage(warm, True)
        warm.usage.set_table(UsageTable(time.time(), time.time(), {}))  # type: ignore[union-attr]
    before = [_answer(warm.admission.mutate(decode_review(review(pod, dry_run=True)))) for _ in range(SENDS)]
    assert _remembered(warm) == 1
    change(warm)

    def fresh() -> Runtime:
        runtime = _runtime()
        change(runtime)
        return runtime

    _assert_answers_as_fresh(warm, fresh, pod, sends=3)
    after = _answer(warm.admission.mutate(decode_review(review(pod, dry_run=True))))
    assert after != before[-1], f"the {what} change should change this pod's answer"


class _Refusing(AdmissionGate):
    """A gate whose answer changes outside the snapshot (as RBAC's SubjectAccessReviews do)."""

    refuses = True

    def check(self, request: AdmissionRequest, facts: Any) -> Gate | None:
        problems = [("rbac", "not allowed by this test")] if self.refuses else []
        return Gate("refusing", lambda _deadline: problems, False)


def _auto(runtime: Runtime, refusing: bool) -> _Refusing:
    _usage(runtime, True)
    runtime.set_config(runtime.config.model_copy(update={"rightsizing": Rightsizing(mode="auto")}))
    gate = _Refusing()
    gate.refuses = refusing
    runtime.admission.seams.gates.insert(0, gate)  # asked first: its refusal is the one rightsizing names
    return gate


def test_a_rightsizing_rewrite_judged_by_the_gates_is_judged_again_for_every_replica() -> None:
    """`auto` tries the rewrite on the gates, which may ask the API: its answer is never remembered."""
    warm = _runtime()
    gate = _auto(warm, True)
    pod = _notebook()
    refused = [warm.admission.mutate(decode_review(review(pod, dry_run=True))) for _ in range(SENDS)]
    assert any("not allowed by this test" in w for w in refused[-1].warnings), refused[-1].warnings
    gate.refuses = False
    fresh = _runtime()
    _auto(fresh, False)
    body = review(pod, dry_run=True)
    answer = _answer(warm.admission.mutate(decode_review(body)))
    assert answer == _answer(fresh.admission.mutate(decode_review(body)))
    assert answer != _answer(refused[-1])


def test_every_replica_of_a_rightsized_pod_gets_the_first_ones_answer() -> None:
    """The rewritten pod is judged by the gates as the pipeline made it, never through the plan memo entry of the
    pod before the pipeline (the quota gate's remembered refusals judged that pod, without its quota gate, from
    the second replica on)."""
    warm = _runtime()
    _auto(warm, False)
    answers = {_answer(warm.admission.mutate(decode_review(review(_notebook(), dry_run=True)))) for _ in range(SENDS)}
    assert len(answers) == 1
    assert b"instead of 1x nvidia-h100-80gb" in answers.pop()


def test_past_its_bytes_a_snapshot_keeps_no_more_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.admission import mutate

    monkeypatch.setattr(mutate, "MAX_ANSWER_BYTES", 1)
    warm = _runtime()
    pod = _as_replica(EXAMPLE_PODS[0], False)
    _assert_answers_as_fresh(warm, _runtime, pod)
    assert _remembered(warm) == 0
