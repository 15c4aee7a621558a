"""`/validate`'s policy answer and plan remembered for the replicas of a pod (webhook/admission/policy_glue.py
`evaluate_for_pod`, webhook/admission/gather.py): every replica gets the answer of a runtime that never saw the
others, through the real runtime with the built-in policies loaded; a policy that reads the name, a reload, the
namespace and the usage each get their own answer; the policies' metrics count every request as before.
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


def _runtime() -> Runtime:
    return build_runtime(CONFIG, EXAMPLES / "cluster")


def _replica(pod: dict[str, Any], index: int) -> dict[str, Any]:
    replica = copy.deepcopy(pod)
    metadata = replica.setdefault("metadata", {})
    metadata.update(name=f"worker-{index}", generateName="worker-", uid=f"00000000-0000-4000-8000-00000000000{index}",
                    creationTimestamp=f"2026-11-24T20:00:0{index}Z", resourceVersion=str(index))
    return replica


def _answer(outcome: Outcome) -> bytes:
    return orjson.dumps([outcome.allowed, outcome.message, outcome.code, outcome.warnings, outcome.audit_annotations,
                         outcome.patch], option=orjson.OPT_SORT_KEYS)


def _mutated(runtime: Runtime, pod: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    body = review(pod, dry_run=True, **kwargs)
    body["request"]["object"] = runtime.admission.mutate(decode_review(body)).object
    return body


def _remembered(runtime: Runtime) -> dict[Any, ReplicaAnswer]:
    answers: dict[Any, ReplicaAnswer] = runtime.store.snapshot().derived.get(ANSWERS, {})
    return answers


@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_every_replica_gets_the_answer_of_a_runtime_that_never_saw_the_others(index: int) -> None:
    """Mutated first (as the API server chains them), then validated as four replicas (seen once, remembered,
    answered from the memo twice): each answer is a fresh runtime's."""
    warm = _runtime()
    for replica in range(4):
        body = _mutated(warm, _replica(EXAMPLE_PODS[index], replica))
        cold = _runtime()
        assert _answer(warm.admission.validate(decode_review(body))) == _answer(
            cold.admission.validate(decode_review(body))
        )


def test_the_example_gpu_pods_are_answered_from_the_memo() -> None:
    """The test above walks the remembered path, not only the fresh one."""
    warm = _runtime()
    for replica in range(3):
        for pod in EXAMPLE_PODS:
            warm.admission.validate(decode_review(_mutated(warm, _replica(pod, replica))))
    remembered = _remembered(warm)
    assert len(remembered) >= 5
    assert any(entry.plan is not None for entry in remembered.values())
    assert any(entry.violations for entry in remembered.values())  # refusals are remembered too


def _gpu_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "team-a", "labels": {"app": "train"}},
            "spec": {"containers": [{"name": "main", "image": "cuda:12",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def test_a_policy_that_reads_the_name_sees_every_replica(tmp_path: Path) -> None:
    """The built-ins' answers are remembered first; an admin policy loaded later reads the name, so from then on
    nothing is shared: the one replica it refuses is refused, the others are not."""
    runtime = _runtime()
    for replica in range(3):
        assert runtime.admission.validate(decode_review(_mutated(runtime, _replica(_gpu_pod(), replica)))).allowed
    assert _remembered(runtime)
    (tmp_path / "name.rego").write_text(
        "package admin.named\nimport rego.v1\n"
        'deny contains "worker-2 may not" if input.request.object.metadata.name == "worker-2"\n'
    )
    assert runtime.policies is not None
    assert runtime.policies.reload(builtin=True, directories=[str(tmp_path)]).ok
    allowed = [runtime.admission.validate(decode_review(_mutated(runtime, _replica(_gpu_pod(), replica)))).allowed
               for replica in range(4)]
    assert allowed == [True, True, False, True]


def test_a_reload_is_seen_by_the_next_replica(tmp_path: Path) -> None:
    runtime = _runtime()
    for replica in range(3):
        assert runtime.admission.validate(decode_review(_mutated(runtime, _replica(_gpu_pod(), replica)))).allowed
    (tmp_path / "train.rego").write_text(
        "package admin.train\nimport rego.v1\n"
        'deny contains "no training today" if input.request.object.metadata.labels.app == "train"\n'
    )
    assert runtime.policies is not None
    assert runtime.policies.reload(builtin=True, directories=[str(tmp_path)]).ok
    outcome = runtime.admission.validate(decode_review(_mutated(runtime, _replica(_gpu_pod(), 3))))
    assert not outcome.allowed and "no training today" in outcome.message
    assert runtime.policies.reload(builtin=True).ok  # back to the built-ins alone: a new set, answered afresh
    assert runtime.admission.validate(decode_review(_mutated(runtime, _replica(_gpu_pod(), 4)))).allowed


def test_the_same_pod_in_another_namespace_gets_its_own_answer() -> None:
    """A pod without a namespace of its own, sent for two namespaces: the same bytes, but `inference` asks for
    MIG by default (a built-in reads the namespace's labels), `team-a` does not."""
    pod = _gpu_pod()
    del pod["metadata"]["namespace"]
    pod["metadata"]["labels"]["kgwe.io/workload"] = "inference"
    warm = _runtime()
    for replica in range(6):
        namespace = "inference" if replica % 2 else "team-a"
        body = review(_replica(pod, replica), dry_run=True)
        body["request"]["namespace"] = namespace
        warm_answer = _answer(warm.admission.validate(decode_review(body)))
        assert warm_answer == _answer(_runtime().admission.validate(decode_review(body)))
    keys = {key[1] for key in _remembered(warm)}
    assert keys == {"inference", "team-a"}


def _count(name: str, **labels: str) -> float:
    return sum(
        sample.value for metric in REGISTRY.collect() for sample in metric.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


@pytest.mark.parametrize("index", range(len(EXAMPLE_PODS)))
def test_the_policies_metrics_count_every_replica(index: int) -> None:
    """Each `/validate` counts one evaluation and its violations, answered from the memo or not."""
    warm = _runtime()
    bodies = [_mutated(warm, _replica(EXAMPLE_PODS[index], replica)) for replica in range(4)]
    cold = _runtime()
    before = (_count("kgwe_policy_violations_total"), _count("kgwe_policy_evaluation_seconds_count"))
    cold.admission.validate(decode_review(bodies[0]))
    once = (_count("kgwe_policy_violations_total") - before[0],
            _count("kgwe_policy_evaluation_seconds_count") - before[1])
    before = (_count("kgwe_policy_violations_total"), _count("kgwe_policy_evaluation_seconds_count"))
    for body in bodies:
        warm.admission.validate(decode_review(body))
    assert (_count("kgwe_policy_violations_total") - before[0],
            _count("kgwe_policy_evaluation_seconds_count") - before[1]) == (4 * once[0], 4 * once[1])


def test_the_same_pod_sent_by_another_tenant_is_judged_for_that_tenant() -> None:
    """The output check is remembered per plan entry under the tenant, the requester and `via`: a pod KGWE wrote
    for one tenant, sent again (the same bytes but its identity) by a requester of another tenant, is refused
    for a tenant it does not carry; the first tenant's replicas still pass. Each answer is a fresh runtime's."""
    pod = _gpu_pod()
    pod["metadata"]["namespace"] = "default"
    warm = _runtime()
    written = _mutated(warm, _replica(pod, 0), groups=("ml-researchers", "system:authenticated"))
    answers = []
    for replica, groups in enumerate([("ml-researchers",), ("ml-researchers",), ("ml-researchers",), ("other",),
                                      ("other",), ("ml-researchers",)]):
        body = copy.deepcopy(written)
        body["request"]["object"]["metadata"].update(_replica(pod, replica)["metadata"])
        body["request"]["object"]["metadata"]["annotations"] = written["request"]["object"]["metadata"]["annotations"]
        body["request"]["userInfo"]["groups"] = [*groups, "system:authenticated"]
        outcome = warm.admission.validate(decode_review(body))
        assert _answer(outcome) == _answer(_runtime().admission.validate(decode_review(body)))
        answers.append(outcome.allowed)
    assert answers == [True, True, True, False, False, True]
