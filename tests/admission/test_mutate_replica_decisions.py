"""`/mutate`'s placement decision remembered for the replicas of a pod (webhook/admission/policy_glue.py
`evaluate_for_pod` with a decision alone, webhook/admission/gather.py): every replica's answer is a fresh
runtime's, through the real runtime with the built-in policies loaded; a decide-only answer is kept apart from
`/validate`'s; a policy that reads the name, a reload and the namespace each get their own answer; the decision
histogram counts every request as before.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from manifests import example_pods
from placement_support import EXAMPLES, review
from prometheus_client import REGISTRY

from webhook.admission.outcome import Outcome
from webhook.admission.policy_glue import ReplicaAnswer
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime

CONFIG = load_config(EXAMPLES / "config.yaml")
EXAMPLE_PODS = example_pods(EXAMPLES / "pods")
ANSWERS = "admission.policy-answers"

# A placement policy that reads the name: from its load on, no replica's decision may be shared.
NAMED_MIG = """package admin.named
import rego.v1
decision := {"acceleratorTypes": ["nvidia-a100-80gb"], "sharing": {"mode": "mig", "migProfile": "1g.10gb"}} if {
\tinput.request.object.metadata.name == "worker-2"
}
"""


def _runtime(policies: Path | None = None) -> Runtime:
    runtime = build_runtime(CONFIG, EXAMPLES / "cluster")
    if policies is not None:
        assert runtime.policies is not None
        assert runtime.policies.reload(builtin=True, directories=[str(policies)]).ok
    return runtime


def _replica(pod: dict[str, Any], index: int, *, named: bool = False) -> dict[str, Any]:
    """The pod as a ReplicaSet's replica reaches `/mutate` (no name: the API server names it after admission),
    or, `named`, as one with a name of its own."""
    replica = copy.deepcopy(pod)
    metadata = replica.setdefault("metadata", {})
    metadata.pop("name", None)
    metadata.update(generateName="worker-")
    if named:
        metadata["name"] = f"worker-{index}"
    return replica


def _body(pod: dict[str, Any], index: int, namespace: str | None = None) -> dict[str, Any]:
    body = review(pod, dry_run=True)
    body["request"]["uid"] = f"00000000-0000-4000-8000-00000000000{index}"
    if namespace is not None:
        body["request"]["namespace"] = namespace
    return body


def _answer(outcome: Outcome) -> bytes:
    return orjson.dumps([outcome.allowed, outcome.message, outcome.code, outcome.warnings, outcome.audit_annotations,
                         outcome.patch, outcome.object], option=orjson.OPT_SORT_KEYS)


def _decided(runtime: Runtime) -> dict[Any, ReplicaAnswer]:
    answers: dict[Any, ReplicaAnswer] = runtime.store.snapshot().derived.get(ANSWERS, {})
    return {key: entry for key, entry in answers.items() if key[3] == "decide"}


def _gpu_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "team-a", "labels": {"app": "train"}},
            "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


# Named replicas only: each has a name of its own, so the answer memo (keyed with the name) never answers them and
# the shared decision is what is judged; replicas without a name, where both answer, are
# tests/admission/test_mutate_answer_memo.py's.
@pytest.mark.parametrize("named", [True])
@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_every_replica_gets_the_answer_of_a_runtime_that_never_saw_the_others(index: int, named: bool) -> None:
    """Five sendings (the decision seen once, then shared; the answer memo marks, keeps, answers): the first, the
    second (the decision shared) and the last (answered by the memo) each a fresh runtime's answer."""
    warm = _runtime()
    for replica in range(5):
        body = _body(_replica(EXAMPLE_PODS[index], replica, named=named), replica)
        got = _answer(warm.admission.mutate(decode_review(body)))
        if replica in (0, 1, 4):  # the first, the first with a shared decision, one the answer memo gives
            assert got == _answer(_runtime().admission.mutate(decode_review(body)))


def test_the_example_gpu_pods_decisions_are_shared_apart_from_validate() -> None:
    """The test above walks the shared path: decide-only answers are remembered, with their plan, under keys of
    their own (`/validate`'s checks of the same bytes are another answer)."""
    warm = _runtime()
    for replica in range(3):
        for pod in EXAMPLE_PODS:
            body = _body(_replica(pod, replica), replica)
            body["request"]["object"] = warm.admission.mutate(decode_review(body)).object
            assert _answer(warm.admission.validate(decode_review(body))) == _answer(
                _runtime().admission.validate(decode_review(body)))
    decided = _decided(warm)
    assert len(decided) >= 5
    assert any(entry.decision is not None for entry in decided.values())
    assert any(entry.plan is not None for entry in decided.values())
    assert not any(entry.violations for entry in decided.values())
    answers = warm.store.snapshot().derived[ANSWERS]
    assert {key[3] for key in answers} >= {"decide", "evaluate"}


def test_a_placement_policy_that_reads_the_name_sees_every_replica(tmp_path: Path) -> None:
    """The built-ins' decisions are shared first; a policy loaded later decides from the name, so from then on
    nothing is shared: only the replica it names gets its decision, and each answer is a fresh runtime's."""
    runtime = _runtime()
    for replica in range(3):
        runtime.admission.mutate(decode_review(_body(_replica(_gpu_pod(), replica, named=True), replica)))
    assert _decided(runtime)
    (tmp_path / "named.rego").write_text(NAMED_MIG)
    assert runtime.policies is not None
    assert runtime.policies.reload(builtin=True, directories=[str(tmp_path)]).ok
    patches = []
    for replica in range(5):
        body = _body(_replica(_gpu_pod(), replica, named=True), replica)
        outcome = runtime.admission.mutate(decode_review(body))
        assert _answer(outcome) == _answer(_runtime(tmp_path).admission.mutate(decode_review(body)))
        patches.append(orjson.dumps(outcome.patch))
    assert b"1g.10gb" in patches[2]
    assert not any(b"1g.10gb" in patch for number, patch in enumerate(patches) if number != 2)


def test_a_reload_is_seen_by_the_next_replica(tmp_path: Path) -> None:
    """A decision shared under the built-ins alone is not handed out once another set is loaded, nor after the
    built-ins come back (a new set)."""
    (tmp_path / "all.rego").write_text(NAMED_MIG.replace('input.request.object.metadata.name == "worker-2"',
                                                         'input.request.object.metadata.labels.app == "train"'))
    runtime = _runtime()
    before = [runtime.admission.mutate(decode_review(_body(_replica(_gpu_pod(), n), n))) for n in range(3)]
    assert not any(b"1g.10gb" in orjson.dumps(outcome.patch) for outcome in before)
    assert runtime.policies is not None
    assert runtime.policies.reload(builtin=True, directories=[str(tmp_path)]).ok
    outcome = runtime.admission.mutate(decode_review(_body(_replica(_gpu_pod(), 3), 3)))
    assert b"1g.10gb" in orjson.dumps(outcome.patch)
    assert runtime.policies.reload(builtin=True).ok
    for replica in range(4, 7):
        body = _body(_replica(_gpu_pod(), replica), replica)
        outcome = runtime.admission.mutate(decode_review(body))
        assert _answer(outcome) == _answer(_runtime().admission.mutate(decode_review(body)))


def test_the_same_pod_in_another_namespace_gets_its_own_decision() -> None:
    """The same bytes for two namespaces: `inference` asks for MIG by default (a built-in reads the namespace's
    labels), `team-a` does not; each replica's answer is a fresh runtime's."""
    pod = _gpu_pod()
    del pod["metadata"]["namespace"]
    pod["metadata"]["labels"]["kgwe.io/workload"] = "inference"
    warm = _runtime()
    patches: dict[str, set[bytes]] = {}
    for replica in range(8):
        namespace = "inference" if replica % 2 else "team-a"
        body = _body(_replica(pod, replica), replica, namespace)
        outcome = warm.admission.mutate(decode_review(body))
        assert _answer(outcome) == _answer(_runtime().admission.mutate(decode_review(body)))
        patches.setdefault(namespace, set()).add(orjson.dumps(outcome.patch))
    assert patches["inference"] != patches["team-a"]
    assert {key[1] for key in _decided(warm)} == {"inference", "team-a"}


def _count(name: str, **labels: str) -> float:
    return sum(
        sample.value for metric in REGISTRY.collect() for sample in metric.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _counts() -> tuple[float, float]:
    return _count("kgwe_policy_violations_total"), _count("kgwe_policy_evaluation_seconds_count", operation="decide")


@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_the_decision_histogram_counts_every_replica(index: int) -> None:
    """Each `/mutate` counts one decision (and no violation), shared or not, as a fresh runtime counts one."""
    bodies = [_body(_replica(EXAMPLE_PODS[index], replica), replica) for replica in range(5)]
    cold = _runtime()
    before = _counts()
    cold.admission.mutate(decode_review(bodies[0]))
    once = tuple(after - start for after, start in zip(_counts(), before, strict=True))
    warm = _runtime()
    before = _counts()
    for body in bodies:
        warm.admission.mutate(decode_review(body))
    assert tuple(after - start for after, start in zip(_counts(), before, strict=True)) == (5 * once[0], 5 * once[1])


def test_a_decision_shared_by_mutate_is_never_validates_answer() -> None:
    """The very bytes `/mutate` decided on, then validated as they came (no patch taken): a privileged GPU pod is
    refused by the checks every time, as a fresh runtime refuses it, however often its decision was shared."""
    pod = _gpu_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    warm = _runtime()
    for replica in range(6):
        body = _body(_replica(pod, replica), replica)
        warm.admission.mutate(decode_review(body))
        outcome = warm.admission.validate(decode_review(body))
        assert not outcome.allowed
        assert _answer(outcome) == _answer(_runtime().admission.validate(decode_review(body)))
    assert _decided(warm)


def test_a_pod_its_profile_defaults_is_decided_as_defaulted() -> None:
    """A pod that asks nothing itself and gets its GPU from its HardwareProfile's defaults: the decision is
    shared under the bytes of the pod as the defaults leave it (what placement and the policies judge), and
    every replica's answer is a fresh runtime's."""
    pod = next(p for p in EXAMPLE_PODS if p["metadata"].get("annotations", {}).get("kgwe.io/profile")
               and "resources" not in p["spec"]["containers"][0])
    warm = _runtime()
    for replica in range(5):
        body = _body(_replica(pod, replica), replica)
        outcome = warm.admission.mutate(decode_review(body))
        assert _answer(outcome) == _answer(_runtime().admission.mutate(decode_review(body)))
    decided = [key for key in _decided(warm) if b"workbench-h100" in key[0]]
    assert decided and all(b"nvidia.com/gpu" in key[0] for key in decided)
