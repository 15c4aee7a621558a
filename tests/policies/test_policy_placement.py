"""Placement decisions: built-in defaults fill what the user left open; admin policies override them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.runtime.policy_runtime import PolicyRuntime

GIB = 1024**3


def test_namespace_label_makes_mig_the_default(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
                                              ) -> None:
    runtime.reload()
    # Namespace `inference` in the example cluster carries kgwe.io/default-sharing: mig.
    decision = runtime.decide_placement(make_context(gpu_pod(namespace="inference"), intent={"gpuMemory": 8 * GIB}))
    assert decision.fields == {"acceleratorTypes": ["nvidia-a100-80gb"],
                               "sharing": {"mode": "mig", "migProfile": "1g.10gb"}}
    assert decision.decided_by == {"acceleratorTypes": "kgwe.placement.namespace_mig",
                                   "sharing": "kgwe.placement.namespace_mig"}
    # The user's own choice is respected.
    mine = runtime.decide_placement(make_context(gpu_pod(namespace="inference"), intent={"sharing": "exclusive"}))
    assert "sharing" not in mine.fields


def test_small_inference_pod_gets_smallest_mig_slice(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    runtime.reload()
    pod = gpu_pod(namespace="team-a", labels={"kgwe.io/workload": "inference"})
    decision = runtime.decide_placement(make_context(pod, intent={"gpuMemory": 15 * GIB}))
    assert decision.fields["sharing"] == {"mode": "mig", "migProfile": "2g.20gb"}
    assert decision.decided_by["sharing"] == "kgwe.placement.inference_mig"
    assert runtime.decide_placement(make_context(pod, intent={"gpuMemory": 30 * GIB})).fields == {}


def test_multi_gpu_on_nvswitch_type_gets_nvlink(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
                                               ) -> None:
    runtime.reload()
    ctx = make_context(gpu_pod(gpus="4"), intent={"gpus": 4, "acceleratorTypes": ["nvidia-h100-80gb"]})
    decision = runtime.decide_placement(ctx)
    assert decision.fields == {"topology": "nvlink"}
    assert decision.decided_by == {"topology": "kgwe.placement.nvlink"}
    l4 = make_context(gpu_pod(gpus="2"), intent={"gpus": 2, "acceleratorTypes": ["nvidia-l4-24gb"]})
    assert runtime.decide_placement(l4).fields == {}


def test_gpupolicy_decides_mig_for_a_namespace_and_overrides_builtins(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    module = """package kgwe.policy.team_a_mig
import rego.v1
decision := {"sharing": {"mode": "mig", "migProfile": input.params.profile}, "acceleratorTypes": ["nvidia-a100-80gb"]}
"""
    policy = gpu_policy("team-a-mig", "Audit", match={"namespaces": ["team-a", "inference"]},
                        rego={"module": module}, params={"profile": "3g.40gb"})
    assert runtime.reload(gpu_policies=[policy]).ok
    decision = runtime.decide_placement(make_context(gpu_pod(namespace="team-a")))
    assert decision.fields["sharing"] == {"mode": "mig", "migProfile": "3g.40gb"}
    assert decision.decided_by["sharing"] == "team-a-mig"
    # In `inference` the built-in default would pick 1g.10gb; the admin policy is merged later and wins.
    decision = runtime.decide_placement(make_context(gpu_pod(namespace="inference")))
    assert decision.decided_by == {"sharing": "team-a-mig", "acceleratorTypes": "team-a-mig"}
    # Other namespaces do not match.
    assert runtime.decide_placement(make_context(gpu_pod(namespace="ml-research"))).fields == {}


def test_invalid_decision_fields_are_ignored(runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
                                            ) -> None:
    module = 'package kgwe.policy.odd\nimport rego.v1\ndecision := {"topology": "ring", "gang": "g1", "color": "red"}\n'
    assert runtime.reload(builtin=False, gpu_policies=[gpu_policy("odd", rego={"module": module})]).ok
    assert runtime.decide_placement(make_context(gpu_pod())).fields == {"gang": "g1"}


@pytest.mark.parametrize("failure_mode", ["open", "closed"])
def test_decision_engine_failure(failure_mode: str, make_context: Callable[..., PolicyContext]) -> None:
    from policies.runtime.outcomes import PolicyEngineError
    from policies.runtime.policy_runtime import build_runtime

    runtime = build_runtime(failure_mode=failure_mode)  # type: ignore[arg-type]
    module = ('package kgwe.policy.boom\nimport rego.v1\n'
              'decision := {"gang": "x"} if { to_number(input.request.object.metadata.labels.n) > 1 }\n')
    assert runtime.reload(builtin=False, gpu_policies=[gpu_policy("boom", rego={"module": module})]).ok
    ctx = make_context(gpu_pod(labels={"n": "not-a-number"}))
    if failure_mode == "open":
        assert runtime.decide_placement(ctx).fields == {}
    else:
        with pytest.raises(PolicyEngineError):
            runtime.decide_placement(ctx)


def test_one_query_evaluation_equals_decide_and_check_apart(
    runtime: PolicyRuntime, make_context: Callable[..., PolicyContext]
) -> None:
    runtime.reload()
    privileged = gpu_pod(namespace="team-a")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    ctx = make_context(privileged, intent={"gpus": 2})
    decision, violations = runtime.evaluate(ctx)
    assert any(v.action == "Deny" for v in violations), "the privileged GPU container is found in the same query"
    assert decision == runtime.decide_placement(ctx)
    for namespace, intent in (("inference", {"gpuMemory": 8 * GIB}), ("team-a", {}), ("team-a", {"gpus": 4})):
        ctx = make_context(gpu_pod(namespace=namespace), intent=intent)
        decision, violations = runtime.evaluate(ctx)
        assert decision == runtime.decide_placement(ctx)
        assert sorted(map(repr, violations)) == sorted(map(repr, runtime.check(ctx)))
