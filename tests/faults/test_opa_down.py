"""The OPA server goes away while the webhook serves: each request is answered in the configured failure mode
(`policies.failureMode`), with a log line naming the engine and the `kgwe_policy_engine_errors_total` metric."""

from __future__ import annotations

import logging

import pytest
from fault_support import CLUSTER, Webhook, gpu_pod
from opa_rest_stub import OpaRestStub
from prometheus_client import REGISTRY

from webhook.assembly import build_runtime
from webhook.config import Config


def engine_errors() -> float:
    return REGISTRY.get_sample_value("kgwe_policy_engine_errors_total", {"engine": "opa"}) or 0.0


def webhook_with_opa_gone(failure_mode: str, on_error: str = "allow") -> Webhook:
    with OpaRestStub() as opa:
        config = Config.model_validate({"policies": {"regoEngine": "opa", "opaUrl": opa.url,
                                                     "failureMode": failure_mode},
                                        "limits": {"onError": on_error}})
        runtime = build_runtime(config, CLUSTER)
        assert runtime.policies is not None and runtime.policies.policy_names(), "policies loaded through OPA"
        webhook = Webhook(runtime)
        pod = gpu_pod("before", "nvidia-h100-80gb")
        assert webhook.ask("validate", webhook.mutated(pod)[1])["allowed"]
        queries = opa.state.queries
    assert queries > 0, "decisions were asked of the OPA server while it was up"
    return webhook


def test_fail_open_admits_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    webhook = webhook_with_opa_gone("open")
    before = engine_errors()
    caplog.set_level(logging.ERROR, logger="kgwe.policies")
    response, placed = webhook.mutated(gpu_pod("during", "nvidia-h100-80gb"))
    assert response["allowed"]
    assert placed["spec"]["nodeSelector"], "placement still happens without the placement policies"
    assert webhook.ask("validate", placed)["allowed"]
    assert engine_errors() >= before + 2
    assert any("policy engine opa failed" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize("on_error", ["deny", "allow"])
def test_fail_closed_refuses(on_error: str, caplog: pytest.LogCaptureFixture) -> None:
    webhook = webhook_with_opa_gone("closed", on_error)
    before = engine_errors()
    caplog.set_level(logging.ERROR, logger="kgwe.policies")
    validated = webhook.ask("validate", gpu_pod("during", "nvidia-h100-80gb"))
    assert not validated["allowed"]
    assert validated["status"]["message"]
    assert engine_errors() > before
    assert any("policy engine opa failed" in r.getMessage() for r in caplog.records), caplog.text
