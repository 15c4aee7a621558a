"""Gang members that try to skip the gate: created past a mutating webhook that was skipped (failurePolicy
Ignore), bound directly with `spec.nodeName`, or mutated and then stripped of the gate before /validate. Each is
judged by /validate as kube-apiserver posts the CREATE."""

from __future__ import annotations

import copy

import jsonpatch
from gang_support import admit, cliques, make_runtime, make_store, member, review

from webhook.admission.request import decode_review


def validated(runtime: object, pod: dict[str, object]) -> tuple[bool, str]:
    verdict = runtime.admission.validate(decode_review(review(pod)))  # type: ignore[attr-defined]
    return verdict.allowed, verdict.message or ""


def test_a_member_the_mutating_webhook_never_saw_is_refused() -> None:
    runtime = make_runtime(make_store(*cliques(4)))
    allowed, message = validated(runtime, member("w-0", "llm", 2))
    assert not allowed and "did not place" in message


def test_a_member_mutated_then_stripped_of_its_gate_is_refused() -> None:
    runtime = make_runtime(make_store(*cliques(4)))
    pod = member("w-0", "llm", 2)
    patch = runtime.admission.mutate(decode_review(review(pod))).patch
    placed = jsonpatch.apply_patch(copy.deepcopy(pod), patch)
    del placed["spec"]["schedulingGates"]  # a later mutating webhook, or a replay of the patch without it
    allowed, message = validated(runtime, placed)
    assert not allowed and "schedulingGates" in message


def test_a_member_bound_directly_to_a_node_is_refused() -> None:
    runtime = make_runtime(make_store(*cliques(4)))
    pod = member("w-0", "llm", 2)
    pod["spec"]["nodeName"] = "rack0-tray0"
    admitted = admit(runtime, pod)
    # With the gate, kube-apiserver itself refuses a nodeName (no gated pod may be bound); without it, /validate.
    assert not admitted.allowed or admitted.pod["spec"].get("schedulingGates")
    allowed, message = validated(runtime, pod)
    assert not allowed and "schedulingGates" in message
