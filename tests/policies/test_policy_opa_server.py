"""The OPA-server engine through opa-python-client: policies pushed with the policy API, data with the
data API, one query per request; a refused upload leaves the last good set serving."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from opa_rest_stub import OpaRestStub
from policy_fixtures import ROOT, gpu_pod, gpu_policy

from policies.api import PolicyContext
from policies.runtime.policy_runtime import PolicyRuntime, build_runtime


@pytest.fixture
def stub() -> Iterator[OpaRestStub]:
    with OpaRestStub() as server:
        yield server


@pytest.fixture
def opa_runtime(stub: OpaRestStub) -> PolicyRuntime:
    return build_runtime(rego_engine="opa", opa_url=stub.url)


def test_same_answers_as_embedded(opa_runtime: PolicyRuntime, runtime: PolicyRuntime, stub: OpaRestStub,
                                  make_context: Callable[..., PolicyContext]) -> None:
    examples = [str(ROOT / "examples" / "policies")]
    assert opa_runtime.reload(directories=examples).ok
    assert runtime.reload(directories=examples).ok
    assert any(name.startswith("kgwe/") for name in stub.state.modules)
    assert "params" in stub.state.data["kgwe"]
    pods = [gpu_pod(privileged=True, memory=None), gpu_pod(gpus="12"), gpu_pod(namespace="inference")]
    for pod in pods:
        ctx = make_context(pod, intent={"gpuMemory": 8 * 1024**3})
        before = stub.state.queries
        assert opa_runtime.check(ctx) == runtime.check(ctx)
        assert stub.state.queries == before + 1  # one query for every policy
        assert opa_runtime.decide_placement(ctx) == runtime.decide_placement(ctx)
    # The cluster summary went through the data API.
    assert stub.state.data["kgwe"]["cluster"]["typeIds"]


def test_refused_upload_keeps_last_good_set(opa_runtime: PolicyRuntime, stub: OpaRestStub,
                                            make_context: Callable[..., PolicyContext]) -> None:
    module = 'package kgwe.policy.cap\nimport rego.v1\ndeny contains "no" if { true }\n'
    good = gpu_policy("cap", rego={"module": module})
    assert opa_runtime.reload(builtin=False, gpu_policies=[good]).ok
    broken = gpu_policy("cap", rego={"module": "package kgwe.policy.cap\nimport rego.v1\ndeny contains x if {\n"})
    report = opa_runtime.reload(builtin=False, gpu_policies=[broken])
    assert report.kept_previous == ["cap"]
    assert [v.message for v in opa_runtime.check(make_context(gpu_pod()))] == ["no"]
    assert "deny contains \"no\"" in stub.state.modules["kgwe/GPUPolicy:cap.rego"]


@pytest.mark.parametrize(("failure_mode", "action"), [("closed", "Deny"), ("open", "Warn")])
def test_unreachable_server_serves_the_set_per_failure_mode(
    make_context: Callable[..., PolicyContext], failure_mode: str, action: str
) -> None:
    # Unreachable is not "refused": every policy is loaded, and its Rego part answers per failureMode.
    runtime = build_runtime(rego_engine="opa", opa_url="http://127.0.0.1:9", failure_mode=failure_mode)  # type: ignore[arg-type]
    try:
        report = runtime.reload(builtin=True)
        assert report.ok and "kgwe.admission.privileged" in report.loaded
        assert not runtime.engine_health.up
        assert "policy engine opa unavailable" in runtime.engine_problems()[0]
        violations = runtime.check(make_context(gpu_pod()))
        assert [(v.policy, v.action) for v in violations] == [("kgwe.policy-engine", action)]
        assert "kgwe.admission.privileged" in violations[0].message
    finally:
        runtime.close()
