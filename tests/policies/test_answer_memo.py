"""Answers remembered for pods alike but for their identity (policies/runtime/answer_memo.py).

A remembered answer must be the answer: every replica gets what a runtime that never saw the first one
gives it, a pod that differs in anything but identity gets its own, a GPUPolicy set is never answered
from the memo, and admin Rego policies are remembered only under the part of the input they can read
(policies/engines/rego_reads.py): one that reads the identity sees every replica, one that reads the
clock is never remembered.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_generator import CUT_ATTACKS, ODD_POD, PODS
from policy_fixtures import ROOT, comparing_runtime, gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.runtime.policy_runtime import PolicyRuntime


def _example_pods() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((ROOT / "examples" / "pods").glob("*.yaml")):
        found.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == "Pod")
    return found


def _replica(pod: dict[str, Any], number: int) -> dict[str, Any]:
    replica = copy.deepcopy(pod)
    metadata = replica.setdefault("metadata", {})
    metadata.update(name=f"worker-{number}", uid=f"uid-{number}", creationTimestamp=f"2026-11-24T00:00:0{number}Z",
                    generateName="worker-", resourceVersion=str(number))
    return replica


def _builtins() -> PolicyRuntime:
    runtime = comparing_runtime()
    assert runtime.reload(builtin=True).ok
    return runtime


def _answer(runtime: PolicyRuntime, context: PolicyContext) -> tuple[Any, list[tuple[str, str, str]]]:
    decision, violations = runtime.evaluate(context)
    return (decision.fields, decision.decided_by), sorted((v.policy, v.action, v.message) for v in violations)


@pytest.mark.parametrize("intent", [{"gpus": 1}, {"gpus": 4}, {"gpus": 1, "inference": True}])
def test_every_replica_gets_the_answer_of_a_runtime_that_never_saw_the_others(
    make_context: Callable[..., PolicyContext], intent: dict[str, Any]
) -> None:
    remembering = _builtins()
    # The same set answered by the engine: the memo serves only the built-ins' Python answer.
    reference = comparing_runtime()
    reference.native_builtins = False
    assert reference.reload(builtin=True).ok
    pods = _example_pods()
    for pod in pods:
        for number in range(3):
            replica = _replica(pod, number)
            expected = _answer(reference, make_context(replica, intent=intent))
            assert _answer(remembering, make_context(replica, intent=intent)) == expected
    state = remembering._answers._state
    assert state is not None and len(state[2]) <= len(pods)  # the replicas shared their pod's entry


def test_a_pod_that_differs_beyond_its_identity_gets_its_own_answer(
    make_context: Callable[..., PolicyContext]
) -> None:
    runtime = _builtins()
    plain = _replica(gpu_pod(), 1)
    privileged = _replica(gpu_pod(privileged=True), 2)
    assert _answer(runtime, make_context(plain))[1] == []
    refused = _answer(runtime, make_context(privileged))[1]
    assert [policy for policy, _, _ in refused] == ["kgwe.admission.privileged"]
    # The first answer is not handed out again for the second pod, nor the second for the first.
    assert _answer(runtime, make_context(_replica(gpu_pod(), 3)))[1] == []
    other_namespace = _replica(gpu_pod(namespace="team-b"), 4)
    assert _answer(runtime, make_context(other_namespace)) == _answer(_builtins(), make_context(other_namespace))


def test_answers_are_copies(make_context: Callable[..., PolicyContext]) -> None:
    runtime = _builtins()
    context = make_context(_replica(gpu_pod(privileged=True), 1))
    first, violations = runtime.evaluate(context)
    first.fields["sharing"] = "tampered"
    violations.clear()
    again, violations_again = runtime.evaluate(make_context(_replica(gpu_pod(privileged=True), 2)))
    assert "sharing" not in again.fields or again.fields["sharing"] != "tampered"
    assert violations_again


def test_a_gpupolicy_that_reads_the_name_sees_every_replica(make_context: Callable[..., PolicyContext]) -> None:
    runtime = comparing_runtime()
    named = gpu_policy("named", "Deny", validations=[{"expression": "object.metadata.name.startsWith('ok-')",
                                                      "message": "names start with ok-"}])
    assert runtime.reload(builtin=True, gpu_policies=[named]).ok
    ok, bad = copy.deepcopy(gpu_pod()), copy.deepcopy(gpu_pod())
    ok["metadata"]["name"], bad["metadata"]["name"] = "ok-1", "bad-2"
    assert _answer(runtime, make_context(ok))[1] == []
    assert _answer(runtime, make_context(bad))[1] == [("named", "Deny", "names start with ok-")]


@pytest.mark.parametrize(("module", "refusal"), [
    ('package admin.uid\nimport rego.v1\n'
     'deny contains "odd uid" if endswith(input.request.object.metadata.uid, "1")\n',
     ("admin.uid", "Deny", "odd uid")),
    # Through an import of the input.
    ("package admin.named\nimport rego.v1\nimport input.request.object as pod\n"
     'deny contains "odd name" if endswith(pod.metadata.name, "1")\n',
     ("admin.named", "Deny", "odd name")),
    # The whole input: answered every time.
    ("package admin.whole\nimport rego.v1\n"
     'deny contains "uid 1" if contains(json.marshal(input), "uid-1")\n',
     ("admin.whole", "Deny", "uid 1")),
])
def test_an_admin_policy_that_reads_the_identity_sees_every_replica(
    make_context: Callable[..., PolicyContext], tmp_path: Path, module: str, refusal: tuple[str, str, str]
) -> None:
    (tmp_path / "policy.rego").write_text(module)
    runtime = comparing_runtime()
    assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
    assert _answer(runtime, make_context(_replica(gpu_pod(), 2)))[1] == []
    assert _answer(runtime, make_context(_replica(gpu_pod(), 1)))[1] == [refusal]


THREE_POLICIES = ROOT / "bench" / "data" / "three_policies"


def _with_directory(directory: Path, *, native: bool = True) -> PolicyRuntime:
    runtime = comparing_runtime()
    runtime.native_builtins = runtime.project_input = native
    assert runtime.reload(builtin=True, directories=[str(directory)]).ok
    return runtime


def test_admin_rego_replicas_get_the_answer_of_the_engine_on_the_whole_input(
    make_context: Callable[..., PolicyContext]
) -> None:
    remembering = _with_directory(THREE_POLICIES)
    # Everything through the engine, on the whole input, with nothing remembered.
    reference = _with_directory(THREE_POLICIES, native=False)
    pods = _example_pods()
    refusals = 0
    for pod in pods:
        for number in range(3):
            replica = _replica(pod, number)
            if number == 2:
                replica["metadata"].setdefault("labels", {})["owner"] = "team-a"
            expected = _answer(reference, make_context(replica))
            assert _answer(remembering, make_context(replica)) == expected
            refusals += any(policy.startswith("admin.") for policy, _, _ in expected[1])
    assert refusals  # the example pods exercise the three policies' refusals, not only admissions
    state = remembering._answers._state
    # Replicas 0 and 1 shared an entry; the owner label, which a policy reads, made a second one.
    assert state is not None and len(state[2]) <= 2 * len(pods)


def test_an_admin_policy_reading_the_requester_sees_every_request(
    make_context: Callable[..., PolicyContext], tmp_path: Path
) -> None:
    (tmp_path / "user.rego").write_text(
        "package admin.user\nimport rego.v1\n"
        'deny contains "robots may not" if startswith(input.request.userInfo.username, "robot-")\n'
    )
    runtime = _with_directory(tmp_path)
    human = make_context(_replica(gpu_pod(), 1))
    robot = make_context(_replica(gpu_pod(), 1))
    robot.request["userInfo"]["username"] = "robot-7"
    assert _answer(runtime, human)[1] == []
    assert _answer(runtime, robot)[1] == [("admin.user", "Deny", "robots may not")]
    assert _answer(runtime, human)[1] == []


def test_an_admin_policy_reading_the_clock_is_never_remembered(
    make_context: Callable[..., PolicyContext], tmp_path: Path
) -> None:
    (tmp_path / "clock.rego").write_text(
        "package admin.clock\nimport rego.v1\n"
        'warn contains msg if msg := sprintf("at %v", [time.now_ns()])\n'
    )
    runtime = _with_directory(tmp_path)
    seen = {message for _ in range(3) for _, _, message in _answer(runtime, make_context(_replica(gpu_pod(), 1)))[1]}
    assert len(seen) == 3


def _twenty() -> list[dict[str, Any]]:
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_policies import twenty_policies

    return twenty_policies()


def test_gpupolicy_replicas_get_the_answer_of_the_engine_on_the_whole_input(
    make_context: Callable[..., PolicyContext]
) -> None:
    policies = _twenty()
    remembering, reference = comparing_runtime(), comparing_runtime()
    reference.native_builtins = reference.project_input = False
    for runtime in (remembering, reference):
        assert runtime.reload(builtin=True, gpu_policies=policies).ok
    pods = _example_pods()
    for pod in pods:
        for number in range(3):
            replica = _replica(pod, number)
            for intent in ({"gpus": 1}, {"gpus": 4}):
                expected = _answer(reference, make_context(replica, intent=intent))
                assert _answer(remembering, make_context(replica, intent=intent)) == expected
    state = remembering._answers._state
    assert state is not None and len(state[2]) <= 2 * len(pods)


@pytest.mark.parametrize(("validation", "tell_apart"), [
    ("request.userInfo.username != 'robot'", lambda c: c.request["userInfo"].update(username="robot")),
    ("object.metadata['name'] != 'worker-9'", lambda c: c.request["object"]["metadata"].update(name="worker-9")),
    ("!has(object.metadata.uid) || object.metadata.uid != 'u9'",
     lambda c: c.request["object"]["metadata"].update(uid="u9")),
    ("request.operation == 'CREATE'", lambda c: c.request.update(operation="UPDATE")),
    ("[object].all(o, o.metadata.generateName != 'w9-')",
     lambda c: c.request["object"]["metadata"].update(generateName="w9-")),
    ("cel.bind(r, request, r.uid != 'u9')", lambda c: c.request.update(uid="u9")),
    (".object.metadata.name != 'worker-9'", lambda c: c.request["object"]["metadata"].update(name="worker-9")),
    # A member's field (read through a macro's variable) and the identity read inside a macro.
    ("object.spec.containers.all(c, c.image != 'evil/image')",
     lambda c: c.request["object"]["spec"]["containers"][0].update(image="evil/image")),
    ("[object.metadata].exists(m, m.name == 'worker-9') == false",
     lambda c: c.request["object"]["metadata"].update(name="worker-9")),
])
def test_a_gpupolicy_reading_what_tells_requests_apart_sees_every_request(
    make_context: Callable[..., PolicyContext], validation: str, tell_apart: Callable[[PolicyContext], None]
) -> None:
    runtime = comparing_runtime()
    policy = gpu_policy("apart", "Deny", match={"operations": ["CREATE", "UPDATE"]},
                        validations=[{"expression": validation, "message": "told apart"}])
    assert runtime.reload(builtin=True, gpu_policies=[policy]).ok
    assert _answer(runtime, make_context(_replica(gpu_pod(), 1)))[1] == []
    odd = make_context(_replica(gpu_pod(), 1))
    tell_apart(odd)
    assert _answer(runtime, odd)[1] == [("apart", "Deny", "told apart")]


def test_a_gpupolicy_rego_module_reading_the_name_sees_every_replica(
    make_context: Callable[..., PolicyContext]
) -> None:
    module = ("package kgwe.test.named\nimport rego.v1\nimport input.request.object as pod\n"
              'deny contains "odd name" if endswith(pod.metadata.name, "1")\n')
    runtime = comparing_runtime()
    assert runtime.reload(builtin=True, gpu_policies=[gpu_policy("named", "Deny", rego={"module": module})]).ok
    assert _answer(runtime, make_context(_replica(gpu_pod(), 2)))[1] == []
    assert _answer(runtime, make_context(_replica(gpu_pod(), 1)))[1] == [("named", "Deny", "odd name")]


def test_a_cel_failure_is_not_remembered(make_context: Callable[..., PolicyContext]) -> None:
    runtime = comparing_runtime()  # failing open: a failed policy only warns
    policy = gpu_policy("sizes", "Deny", validations=[{"expression": "object.spec.containers.size() > 5",
                                                       "message": "too few containers"}])
    assert runtime.reload(builtin=True, gpu_policies=[policy]).ok
    limit = runtime.cel_time_limit
    runtime.cel_time_limit = 0.0  # every evaluation is over the limit: the policy fails, and only warns
    [(policy, action, message)] = _answer(runtime, make_context(_replica(gpu_pod(), 1)))[1]
    assert (policy, action) == ("sizes", "Warn") and "time limit" in message
    runtime.cel_time_limit = limit
    # The next replica is evaluated, not handed the failure's silence.
    assert _answer(runtime, make_context(_replica(gpu_pod(), 2)))[1] == [("sizes", "Deny", "too few containers")]


@pytest.mark.parametrize(("match", "tell_apart"), [
    ({"operations": ["CREATE"]}, lambda c: c.request.update(operation="UPDATE")),
    ({"operations": ["CREATE", "UPDATE"], "namespaces": ["team-a"]}, lambda c: c.request.update(namespace="other")),
])
def test_requests_told_apart_only_by_the_match_rules_get_their_own_answer(
    make_context: Callable[..., PolicyContext], match: dict[str, Any], tell_apart: Callable[[PolicyContext], None]
) -> None:
    runtime = comparing_runtime()
    policy = gpu_policy("matched", "Deny", match=match, validations=[{"expression": "false", "message": "matched"}])
    assert runtime.reload(builtin=True, gpu_policies=[policy]).ok
    assert _answer(runtime, make_context(_replica(gpu_pod(), 1)))[1] == [("matched", "Deny", "matched")]
    unmatched = make_context(_replica(gpu_pod(), 1))
    tell_apart(unmatched)
    assert _answer(runtime, unmatched)[1] == []


PROJECTED_CEL = [
    "has(object.spec.volumes) || object.spec.containers.size() < 2",
    "object.metadata.?annotations.orValue({}).all(k, !k.startsWith('kgwe.io/'))",
    "object.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'NVIDIA_VISIBLE_DEVICES'))",
    "cel.bind(s, object.spec, !has(s.nodeName))",
    "namespaceObject == null || !has(namespaceObject.metadata.labels) || "
    "namespaceObject.metadata.labels.all(k, k != 'frozen')",
    "request.userInfo.username != '' && object.metadata.namespace != 'kube-system'",
    "!has(object.spec.affinity) || object.spec.affinity.size() < 3",
    "object.spec.containers.all(c, !has(c.resources.limits) || c.resources.limits.size() < 2)",
]


def test_cel_sees_what_it_reads_of_every_example_pod(make_context: Callable[..., PolicyContext]) -> None:
    """The CEL variables carry only what some expression reads (PolicySet.cel_projection): every answer is
    the one a runtime converting whole objects gives, message expressions included."""
    policy = gpu_policy("shapes", "Deny", validations=[
        {"expression": expression, "messageExpression": f"'{n}: ' + object.metadata.name"}
        for n, expression in enumerate(PROJECTED_CEL)])
    projected, whole = comparing_runtime(), comparing_runtime()
    whole.project_input = False
    for runtime in (projected, whole):
        assert runtime.reload(builtin=True, gpu_policies=[policy]).ok
    seen = set()
    for pod in _example_pods():
        for namespace in (None, {"metadata": {"name": "x", "labels": {"frozen": "1"}}}):
            context = make_context(_replica(pod, 1), namespace_object=namespace)
            expected = _answer(whole, context)
            assert _answer(projected, make_context(_replica(pod, 1), namespace_object=namespace)) == expected
            seen.update(message for policy, _, message in expected[1] if policy == "shapes")
    assert len(seen) > 1  # the expressions refuse some example pods, not none or all


# Deny policies written so that a wrong read would cut what refuses the pod (the runtime converts only what
# the set's CEL reads): each refuses POD_WITH_EVERYTHING on the whole pod, so it must on the cut one.
CUT_REFUSALS = [
    # `in` then CEL's root-scope dot: the variable, not a field of `in`.
    "object.spec.containers.size() > 0 && !('kgwe.io/unrestricted' in .object.?metadata.?labels.orValue({}))",
    # `//` inside a backtick-quoted field name: no comment hiding the rest of the line.
    "has(object.metadata.annotations.`kgwe.io//exempt`) || "
    "!object.spec.containers.exists(c, c.?securityContext.?privileged.orValue(false))",
]


@pytest.mark.parametrize("expression", CUT_REFUSALS)
def test_a_deny_policy_refuses_the_cut_pod_it_refuses_whole(
    make_context: Callable[..., PolicyContext], expression: str
) -> None:
    pod = gpu_pod(labels={"kgwe.io/unrestricted": "yes"}, privileged=True)
    pod["metadata"]["annotations"] = {"kgwe.io/exempt": "no"}
    policy = gpu_policy("cut", "Deny", validations=[{"expression": expression, "message": "refused"}])
    projected, whole = comparing_runtime(), comparing_runtime()
    whole.project_input = False
    for runtime in (projected, whole):
        assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    expected = _answer(whole, make_context(pod))
    assert ("cut", "Deny", "refused") in expected[1]
    assert _answer(projected, make_context(pod)) == expected


@pytest.mark.parametrize("expression", CUT_ATTACKS)
def test_a_cut_attack_answers_on_the_projected_runtime_as_on_the_whole_one(
    make_context: Callable[..., PolicyContext], expression: str
) -> None:
    """An expression written to break the CEL reads (cel_generator.CUT_ATTACKS), alone in its set (where
    other policies' reads cannot cover its own), failures refusing: the runtime that cuts the pod answers
    every pod as the one converting it whole."""
    policy = gpu_policy("attack", "Deny", validations=[{"expression": expression, "message": "refused"}])
    projected, whole = comparing_runtime(failure_mode="closed"), comparing_runtime(failure_mode="closed")
    whole.project_input = False
    for runtime in (projected, whole):
        assert runtime.reload(builtin=False, gpu_policies=[policy]).ok
    for pod in (*PODS, ODD_POD):
        assert _answer(projected, make_context(pod)) == _answer(whole, make_context(pod))


def test_the_set_is_given_for_replicas_only_where_the_built_ins_alone_answer(
    make_context: Callable[..., PolicyContext], tmp_path: Path
) -> None:
    """`evaluate_for_replicas` names the set (what admission shares replicas' answers under,
    webhook/admission/policy_glue.py) only for an answer the memo holds under the pod without its identity:
    the built-ins alone, answered natively; never with an admin policy, a GPUPolicy, a CEL failure or the
    native path off."""
    runtime = _builtins()
    for number in (1, 2):  # put in the memo, then served from it
        *_answer_of, shared = runtime.evaluate_for_replicas(make_context(_replica(gpu_pod(), number)))
        assert shared is not None and shared is runtime.replica_token()
        assert runtime.check_for_replicas(make_context(_replica(gpu_pod(), number)))[1] is shared
    (tmp_path / "admin.rego").write_text("package admin.any\nimport rego.v1\n"
                                         'deny contains "no" if input.request.object.metadata.name == "x"\n')
    assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
    assert runtime.replica_token() is None
    assert runtime.evaluate_for_replicas(make_context(_replica(gpu_pod(), 3)))[2] is None
    assert runtime.check_for_replicas(make_context(_replica(gpu_pod(), 3)))[1] is None
    sizes = gpu_policy("sizes", "Deny", validations=[{"expression": "object.spec.containers.size() > 5",
                                                      "message": "too few containers"}])
    assert runtime.reload(builtin=True, gpu_policies=[sizes]).ok
    assert runtime.replica_token() is None
    runtime.cel_time_limit = 0.0
    assert runtime.evaluate_for_replicas(make_context(_replica(gpu_pod(), 4)))[2] is None
    assert runtime.check_for_replicas(make_context(_replica(gpu_pod(), 4)))[1] is None
    plain = _builtins()
    plain.native_builtins = False
    assert plain.replica_token() is None
    assert plain.evaluate_for_replicas(make_context(_replica(gpu_pod(), 5)))[2] is None
    assert plain.check_for_replicas(make_context(_replica(gpu_pod(), 5)))[1] is None


def test_a_check_that_failed_is_not_given_for_replicas(make_context: Callable[..., PolicyContext]) -> None:
    """The built-ins alone, on a pod their Python declines and the engine fails on (a container that is not an
    object): the failure is no answer to share, though the set's answers are shared."""
    runtime = _builtins()
    violations, shared = runtime.check_for_replicas(make_context(_replica(ODD_POD, 1)))
    assert runtime.replica_token() is not None
    assert shared is None and any(v.failed for v in violations)


def test_a_decision_is_given_for_replicas_only_where_the_built_ins_alone_answer(
    make_context: Callable[..., PolicyContext], tmp_path: Path
) -> None:
    """`decide_for_replicas` (what `/mutate` shares a replica's decision under) names the set only where the
    built-ins alone answer, natively: never with an admin policy or the native path off."""
    runtime = _builtins()
    for number in (1, 2):
        decision, shared = runtime.decide_for_replicas(make_context(_replica(gpu_pod(), number)))
        assert shared is not None and shared is runtime.replica_token()
        assert decision == runtime.decide_placement(make_context(_replica(gpu_pod(), number)))
    (tmp_path / "admin.rego").write_text(
        'package admin.any\nimport rego.v1\n'
        'decision := {"topology": "none"} if input.request.object.metadata.name == "x"\n'
    )
    assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
    assert runtime.decide_for_replicas(make_context(_replica(gpu_pod(), 3)))[1] is None
    plain = _builtins()
    plain.native_builtins = False
    assert plain.decide_for_replicas(make_context(_replica(gpu_pod(), 4)))[1] is None
