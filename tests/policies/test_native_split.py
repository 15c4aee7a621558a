"""When a GPUPolicy's Rego must run, the built-ins are still answered in Python and the engine answers the
rest, skipping them (`input.kgwe.native`). The two answers, merged, must be exactly the engine's answer
for the whole set, on the interpreter and on the compiled VM alike."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_fixtures import comparing_runtime
from review_strategies import EXAMPLES, pods
from test_native_builtins import EXAMPLE_CLUSTER, _example_pods, _normalise, clusters, intents, namespaces

from policies.api import PolicyContext
from policies.engines.aggregate import CHECK_QUERY, DECISION_QUERY, EVERYTHING_QUERY
from policies.engines.native_builtins import merge_answers
from policies.engines.native_rules import Declined
from policies.engines.rego_rvm import rego_evaluator
from policies.runtime.cel_phase import CelScope
from policies.runtime.outcomes import EvaluationFailed
from policies.runtime.policy_runtime import PolicyRuntime

# Reads the built-ins' own documents: they must still be computed when the aggregate skips them.
ECHO_PRIVILEGED = """package team.echo
import rego.v1
import data.kgwe.admission.privileged
import data.kgwe.lib.pod

deny contains msg if {
\tsome m in privileged.deny
\tmsg := sprintf("echo: %s", [m])
}

warn contains msg if {
\tcount(pod.gpu_containers) > input.params.most
\tmsg := "many GPU containers"
}
"""
# Decides, so the merged `decision` document holds a built-in's partial and a GPUPolicy's.
NO_TOPOLOGY = """package team.flat
import rego.v1

decision := {"topology": "none"} if input.params.flat
"""


def _policy(name: str, module: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": name},
            "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE"]},
                     "rego": {"module": module}, "params": params}}


POLICIES = [_policy("echo", ECHO_PRIVILEGED, {"most": 1}), _policy("flat", NO_TOPOLOGY, {"flat": True})]


def _runtime(rego_vm: str, native: bool) -> PolicyRuntime:
    runtime = comparing_runtime(rego_vm=rego_vm)
    runtime.native_builtins = native
    report = runtime.reload(builtin=True, gpu_policies=copy.deepcopy(POLICIES))
    assert report.ok, report.errors
    return runtime


@pytest.fixture(scope="module", params=["auto", "off"], ids=["rvm", "interpreter"])
def pair(request: pytest.FixtureRequest) -> tuple[PolicyRuntime, PolicyRuntime]:
    split, whole = _runtime(request.param, True), _runtime(request.param, False)
    expected = "rvm" if request.param == "auto" else "interpreter"
    assert rego_evaluator(split._set.prepared) == rego_evaluator(whole._set.prepared) == expected
    return split, whole


def _context(pod: dict[str, Any], intent: dict[str, Any], namespace: Any, cluster: dict[str, Any]) -> PolicyContext:
    return PolicyContext(
        request={"uid": "u", "operation": "CREATE", "namespace": "team-a", "object": pod,
                 "userInfo": {"username": "alice", "groups": []}},
        namespace_object=namespace, cluster=cluster, intent=intent, tenant=None,
    )


def _document(runtime: PolicyRuntime, query: str, ctx: PolicyContext, active: list[Any]) -> Any:
    """The aggregate document, or that the engine failed the query (an input the interpreter refuses)."""
    try:
        return _normalise(runtime._query(runtime._set, query, copy.deepcopy(ctx), active))
    except EvaluationFailed:
        return "failed"


def _same(pair: tuple[PolicyRuntime, PolicyRuntime], ctx: PolicyContext) -> None:
    split, whole = pair
    active = split._active(split._set, ctx, "evaluate", [], CelScope(split._set))
    assert [p.name for p in active] == ["echo", "flat"]
    for query in (EVERYTHING_QUERY, CHECK_QUERY, DECISION_QUERY):
        assert _document(split, query, ctx, active) == _document(whole, query, ctx, active), query
    decision, violations = split.evaluate(copy.deepcopy(ctx))
    expected_decision, expected_violations = whole.evaluate(copy.deepcopy(ctx))
    assert decision.fields == expected_decision.fields
    assert decision.decided_by == expected_decision.decided_by
    assert violations == expected_violations  # the same order: the refusal message joins them in it


@pytest.mark.parametrize("pod", _example_pods(), ids=lambda p: p["metadata"].get("name", "pod"))
def test_every_example_pod_is_answered_alike_split_and_whole(pair: tuple[PolicyRuntime, PolicyRuntime],
                                                             pod: dict[str, Any]) -> None:
    _same(pair, _context(pod, {"gpus": 2, "topology": "nvlink"}, None, EXAMPLE_CLUSTER))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.function_scoped_fixture])
@given(pod=pods(), intent=intents, namespace=namespaces, cluster=clusters)
def test_generated_pods_are_answered_alike_split_and_whole(
    pair: tuple[PolicyRuntime, PolicyRuntime], pod: dict[str, Any], intent: dict[str, Any], namespace: Any,
    cluster: dict[str, Any],
) -> None:
    _same(pair, _context(pod, intent, namespace, cluster))


def test_a_privileged_pod_is_refused_by_the_builtin_and_the_policy_that_reads_it(
    pair: tuple[PolicyRuntime, PolicyRuntime],
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
           "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                    "securityContext": {"privileged": True}}]}}
    split, _whole = pair
    decision, violations = split.evaluate(_context(pod, {"gpus": 1}, None, EXAMPLE_CLUSTER))
    policies = [v.policy for v in violations if v.action == "Deny"]
    assert "kgwe.admission.privileged" in policies and "echo" in policies
    assert decision.fields.get("topology") == "none" and decision.decided_by["topology"] == "flat"


@given(names=st.lists(st.sampled_from(("a", "b", "c", "deny")), unique=True, max_size=4))
def test_merged_documents_name_each_policy_once_in_sorted_order(names: list[str]) -> None:
    native = {"deny": {n: [] for n in names[:2]}, "check": {"deny": {n: [] for n in names[:2]}}}
    engine = {"deny": {n: ["x"] for n in names[2:]}, "check": {"deny": {n: ["x"] for n in names[2:]}},
              "decision": {}}
    merged = merge_answers(native, engine)
    assert list(merged) == sorted(merged)
    assert list(merged["deny"]) == sorted(names)
    assert merged["check"]["deny"] == merged["deny"]
    with pytest.raises(Declined):
        merge_answers({"deny": {"a": []}}, {"deny": {"a": ["twice"]}})


ADMIN_BAN = """package example.ban
import rego.v1
import data.kgwe.lib.pod

deny contains msg if {
\tsome c in pod.gpu_containers
\tstartswith(c.image, "banned/")
\tmsg := sprintf("container %s: banned image", [c.name])
}
"""


@pytest.mark.parametrize("rego_vm", ["auto", "off"])
def test_an_admin_policy_runs_on_the_engine_and_the_builtins_natively(tmp_path: Path, rego_vm: str) -> None:
    (tmp_path / "ban.rego").write_text(ADMIN_BAN)
    runtimes = []
    for native in (True, False):
        runtime = comparing_runtime(rego_vm=rego_vm)
        runtime.native_builtins = native
        assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
        runtimes.append(runtime)
    split, whole = runtimes
    builtins = split._native_for(split._set)
    assert builtins is not None and not builtins.answers([])
    # The admin policy only denies: decisions (what /mutate asks) are the built-ins' alone, no engine query.
    assert builtins.answers([], DECISION_QUERY) and not builtins.answers([], CHECK_QUERY)
    for pod in _example_pods():
        ctx = _context(pod, {"gpus": 1}, None, EXAMPLE_CLUSTER)
        assert split.evaluate(copy.deepcopy(ctx)) == whole.evaluate(copy.deepcopy(ctx))
        assert split.decide_placement(copy.deepcopy(ctx)) == whole.decide_placement(copy.deepcopy(ctx))
        assert split.check(copy.deepcopy(ctx)) == whole.check(copy.deepcopy(ctx))
    banned = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
              "spec": {"containers": [{"name": "main", "image": "banned/x", "securityContext": {"privileged": True},
                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    _decision, violations = split.evaluate(_context(banned, {"gpus": 1}, None, EXAMPLE_CLUSTER))
    assert {v.policy for v in violations if v.action == "Deny"} >= {"example.ban", "kgwe.admission.privileged"}


ADMIN_DECIDES = """package example.decides
import rego.v1
decision := {"topology": "none"} if input.request.object.metadata.labels["flat"] == "yes"
"""


def test_an_admin_policy_that_decides_keeps_the_engine_for_decisions(tmp_path: Path) -> None:
    (tmp_path / "decides.rego").write_text(ADMIN_DECIDES)
    runtimes = []
    for native in (True, False):
        runtime = comparing_runtime()
        runtime.native_builtins = native
        assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
        runtimes.append(runtime)
    split, whole = runtimes
    builtins = split._native_for(split._set)
    assert builtins is not None and not builtins.answers([], DECISION_QUERY) and builtins.answers([], CHECK_QUERY)
    for pod in _example_pods():
        pod = copy.deepcopy(pod)
        pod["metadata"].setdefault("labels", {})["flat"] = "yes"
        ctx = _context(pod, {"gpus": 1}, None, EXAMPLE_CLUSTER)
        decision = split.decide_placement(copy.deepcopy(ctx))
        assert decision == whole.decide_placement(copy.deepcopy(ctx))
        assert split.evaluate(copy.deepcopy(ctx)) == whole.evaluate(copy.deepcopy(ctx))
        assert decision.decided_by.get("topology") == "example.decides"
