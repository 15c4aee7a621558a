"""The quota gate takes a request's tenancy from the facts gather found it for, where `/validate` asked it three
times more (webhook/quotas/gate.py `_tenancy`): each answer must still be the one the gate gives that request under
the configuration of the moment. Real admission path over the example cluster, real AdmissionReview JSON."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import yaml
from quota_fixtures import ROOT

from webhook.admission.request import AdmissionRequest, decode_review
from webhook.admission.seams import PendingVerdict
from webhook.assembly import build_runtime
from webhook.config import Config, load_config, parse_config
from webhook.quotas.gate import QuotaGate
from webhook.review import create_review, review_pod
from webhook.runtime import Runtime

H100 = {"kgwe.io/accelerator": "nvidia-h100-80gb"}


def gpu_pod(namespace: str, name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(H100)},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def runtime_of(config: Config) -> Runtime:
    return build_runtime(config, ROOT / "examples" / "cluster")


def team_a_to_kueue() -> Config:
    raw = yaml.safe_load((ROOT / "examples" / "config.yaml").read_text())
    raw["quotas"] = {"deferTo": "kueue",
                     "deferNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}}
    return parse_config(yaml.safe_dump(raw))


def decoded(pod: dict[str, Any], user: str, groups: list[str], uid: str) -> AdmissionRequest:
    review = create_review(pod, user, groups)
    review["request"]["uid"] = uid
    return decode_review(orjson.dumps(review))


def ungated(runtime: Runtime) -> dict[str, Any]:
    """team-a's GPU pod as `/mutate` made it, less the quota gate: refused unless the namespace is Kueue's."""
    pod = copy.deepcopy(review_pod(runtime.admission, gpu_pod("team-a", "u", 1), "alice").object)
    pod["spec"]["schedulingGates"] = []
    return pod


def prepared(runtime: Runtime, request: AdmissionRequest) -> PendingVerdict:
    pending = runtime.admission.prepare_verdict(request, None)
    assert isinstance(pending, PendingVerdict)
    return pending


def gate_problems(pending: PendingVerdict) -> list[tuple[str, str]]:
    return [problem for gate in pending.gates if gate.name == "quota" for problem in gate.run(None)]


def test_the_check_follows_a_configuration_replaced_after_the_advice() -> None:
    runtime = runtime_of(load_config(ROOT / "examples" / "config.yaml"))
    pod = ungated(runtime)
    for n in range(3):  # replicas, so the plan memo's entry answers too
        request = decoded(pod, "alice", [], f"uid-{n}")
        pending = prepared(runtime, request)  # the advice, under a configuration where the gate holds team-a
        assert not pending.problems
        runtime.set_config(team_a_to_kueue())
        assert gate_problems(pending) == []  # Kueue's namespace now: nothing of KGWE's gate to carry
        runtime.set_config(load_config(ROOT / "examples" / "config.yaml"))
        refused = gate_problems(pending)
        assert [reason for reason, _message in refused] == ["quota"]
        assert "does not carry it" in refused[0][1]


def test_the_gate_asked_of_another_request_answers_for_that_request() -> None:
    runtime = runtime_of(load_config(ROOT / "examples" / "config.yaml"))
    pod = ungated(runtime)
    pod["metadata"]["namespace"] = "default"
    # Alice in `default` has no quota; Carol's group makes her ml-research's, which has one.
    alice = decoded(pod, "alice", [], "uid-a")
    carol = decoded(pod, "carol", ["ml-researchers"], "uid-c")
    gate = next(g for g in runtime.admission.seams.gates if isinstance(g, QuotaGate))
    facts = runtime.admission.gather(alice, alice.object or {}, None, with_checks=True)
    assert gate.check_quota(alice, facts) == []
    fresh_gate = next(g for g in runtime_of(load_config(ROOT / "examples" / "config.yaml")).admission.seams.gates
                      if isinstance(g, QuotaGate))
    fresh_facts = runtime.admission.gather(carol, carol.object or {}, None, with_checks=True)
    expected = fresh_gate.check_quota(carol, fresh_facts)
    assert [reason for reason, _message in expected] == ["quota"]
    assert gate.check_quota(carol, facts) == expected
    assert gate.check_quota(alice, facts) == []


def test_replicas_in_namespaces_of_one_tenant_each_get_their_own_answer() -> None:
    """The refusals kept in the plan memo's entry by tenant (with the limits they were worked out for): every
    replica is refused as a fresh runtime refuses it."""
    runtime = runtime_of(load_config(ROOT / "examples" / "config.yaml"))
    pod = ungated(runtime)
    for n in range(4):
        request = decoded(pod, "alice", [], f"uid-{n}")
        served = gate_problems(prepared(runtime, request))
        fresh = runtime_of(load_config(ROOT / "examples" / "config.yaml"))
        assert served == gate_problems(prepared(fresh, decoded(pod, "alice", [], f"uid-{n}")))
        assert [reason for reason, _message in served] == ["quota"]
