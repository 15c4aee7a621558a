"""A careless GPUPolicy author: a policy of the wrong shape is refused alone, never read otherwise.

The CRD schema keeps malformed GPUPolicies out of the API server, but manifests in a policy directory
are checked by nobody else. A string where a list belongs used to be iterated letter by letter
(`namespaces: team-a` matched the namespaces `t`, `e`, ...: a Deny policy that loaded fine and never
applied), an unquoted YAML `true` in matchLabels became the label value `True`, and a string or list
where an object belongs raised out of `reload`, so that no policy change at all was taken while it was
there (a new Deny policy beside it never served). Each such policy is now refused with a message, the
others load, and a last good version of it keeps serving.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_fixtures import gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.runtime.policy_runtime import build_runtime

REFUSE_ALL = {"expression": "false", "message": "no GPU pods here"}
TEAM_A = {"matchLabels": {"team": "a"}}

MALFORMED: dict[str, dict[str, Any]] = {
    "spec is a string": {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "bad"},
                         "spec": "deny everything"},
    "rego is a string": gpu_policy("bad", rego="package kgwe.gpupolicy.bad"),
    "rego is a list": gpu_policy("bad", rego=["package kgwe.gpupolicy.bad"]),
    "validations is a string": gpu_policy("bad", validations="false"),
    "a validation is a string": gpu_policy("bad", validations=["false"]),
    "match is a string": gpu_policy("bad", match="team-a", validations=[REFUSE_ALL]),
    "matchConditions is a string": gpu_policy("bad", matchConditions="true", validations=[REFUSE_ALL]),
    "a match condition is a string": gpu_policy("bad", matchConditions=["true"], validations=[REFUSE_ALL]),
    "params with a key that is not a string": gpu_policy("bad", params={1: 2}, validations=[REFUSE_ALL]),
    # JSON writes both as null: the policy would share its params and CEL values with {max: null}.
    "params with an infinity": gpu_policy("bad", params={"max": float("inf")}, validations=[REFUSE_ALL]),
    "params with a NaN": gpu_policy("bad", params={"max": float("nan")}, validations=[REFUSE_ALL]),
    "matchLabels is a list": gpu_policy("bad", match={"objectSelector": {"matchLabels": ["team=a"]}},
                                        validations=[REFUSE_ALL]),
    # Read otherwise, these loaded and never matched what their author meant.
    "namespaces is a string": gpu_policy("bad", match={"namespaces": "team-a"}, validations=[REFUSE_ALL]),
    "a matchLabels value is a bool": gpu_policy("bad", match={"objectSelector": {"matchLabels": {"gpu": True}}},
                                                validations=[REFUSE_ALL]),
    "selector values is a string": gpu_policy("bad", match={"objectSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": "a"}]}}, validations=[REFUSE_ALL]),
}


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_gpupolicy_is_refused_alone_and_the_others_still_deny(
    make_context: Callable[..., PolicyContext], shape: str
) -> None:
    runtime = build_runtime()
    report = runtime.reload(builtin=True, gpu_policies=[gpu_policy("guard", validations=[REFUSE_ALL]),
                                                         MALFORMED[shape]])
    assert "bad" in report.errors, report.errors
    assert "guard" in runtime.policy_names()
    _, violations = runtime.evaluate(make_context(gpu_pod("p", "team-a", labels={"team": "a"})))
    assert [(v.policy, v.action) for v in violations if v.policy in ("guard", "bad")] == [("guard", "Deny")]


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_update_of_a_deny_policy_keeps_its_last_good_version(
    make_context: Callable[..., PolicyContext], shape: str
) -> None:
    runtime = build_runtime()
    assert runtime.reload(builtin=True, gpu_policies=[gpu_policy("bad", validations=[REFUSE_ALL])]).ok
    report = runtime.reload(builtin=True, gpu_policies=[MALFORMED[shape]])
    assert report.kept_previous == ["bad"], report
    _, violations = runtime.evaluate(make_context(gpu_pod("p", "team-a", labels={"team": "a"})))
    assert [(v.policy, v.action) for v in violations if v.policy == "bad"] == [("bad", "Deny")]


def test_a_directory_manifest_with_unquoted_yaml_values_is_refused_not_silently_unmatched(
    tmp_path: Path, make_context: Callable[..., PolicyContext]
) -> None:
    (tmp_path / "gpu-label.yaml").write_text(yaml.safe_dump(gpu_policy(
        "labelled-only", match={"objectSelector": {"matchLabels": {"gpu": True}}}, validations=[REFUSE_ALL])))
    (tmp_path / "broken.yaml").write_text("apiVersion: kgwe.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: broken}\n"
                                          "spec: {rego: 'package kgwe.gpupolicy.broken'}\n")
    (tmp_path / "guard.yaml").write_text(yaml.safe_dump(gpu_policy("guard", validations=[REFUSE_ALL])))
    runtime = build_runtime()
    report = runtime.reload(builtin=True, directories=[str(tmp_path)])
    assert set(report.errors) == {"labelled-only", "broken"}
    assert "matchLabels must map strings to strings" in report.errors["labelled-only"]
    assert "spec.rego must be an object" in report.errors["broken"]
    _, violations = runtime.evaluate(make_context(gpu_pod("p", "team-a")))
    assert any(v.policy == "guard" and v.action == "Deny" for v in violations)


def test_params_json_cannot_write_are_refused_not_shared_with_another_policy(
    make_context: Callable[..., PolicyContext]
) -> None:
    # JSON writes .inf and -.inf alike (null): loaded, both policies read one params entry, whichever loaded
    # last, and the cap of -.inf admitted 8 GPUs. Now both are refused, saying why; `unset` keeps its own.
    gpus = "int(object.spec.containers[0].resources.limits['nvidia.com/gpu'])"
    unlimited = gpu_policy("unlimited", params={"max": float("inf")},
                           validations=[{"expression": f"{gpus} <= params.max", "message": "too many"}])
    capped = gpu_policy("capped", params={"max": float("-inf")},
                        validations=[{"expression": f"{gpus} <= params.max", "message": "capped"}])
    unset = gpu_policy("unset", params={"max": None},
                       validations=[{"expression": f"params.max != null && {gpus} <= params.max", "message": "unset"}])
    runtime = build_runtime()
    report = runtime.reload(builtin=True, gpu_policies=[capped, unset, unlimited])
    assert set(report.errors) == {"unlimited", "capped"}
    assert all("spec.params is not JSON" in error for error in report.errors.values())
    _, violations = runtime.evaluate(make_context(gpu_pod("p", "team-a", gpus="8")))
    assert [(v.policy, v.message) for v in violations if v.policy in ("unlimited", "capped", "unset")] == [
        ("unset", "unset")]
