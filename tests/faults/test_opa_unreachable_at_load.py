"""OPA-server mode with the OPA server unreachable when the webhook starts: the CEL policies are served and deny
as usual, the Rego policies answer per `policies.failureMode`, `/readyz` and `kgwe_policy_engine_up` say so, and
when OPA comes up the Rego policies work again without any policy change (the webhook reconnects by itself)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fault_support import CLUSTER, CONFIG, Served, Webhook, free_port, gpu_pod
from opa_rest_stub import OpaRestStub
from waiting import eventually

from webhook.assembly import build_runtime
from webhook.config import Config

AT_MOST_TWO = "object.spec.containers.all(c, int(c.resources.limits[?'nvidia.com/gpu'].orValue('0')) <= 2)"
CEL_MESSAGE = "at most 2 GPUs per container"
REGO_MESSAGE = "pods labelled forbidden=yes are not admitted"
NO_FORBIDDEN = (
    "package kgwe.policy.no_forbidden\nimport rego.v1\n"
    f'deny contains "{REGO_MESSAGE}" if {{ input.request.object.metadata.labels.forbidden == "yes" }}\n'
)
POLICIES: list[dict[str, Any]] = [
    {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "max-two-gpus"},
     "spec": {"enforcementAction": "Deny", "validations": [{"expression": AT_MOST_TWO, "message": CEL_MESSAGE}]}},
    {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "no-forbidden"},
     "spec": {"enforcementAction": "Deny", "rego": {"module": NO_FORBIDDEN}}},
]


def labelled(pod: dict[str, Any], **labels: str) -> dict[str, Any]:
    pod["metadata"]["labels"] = labels
    return pod


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    copy = tmp_path / "cluster"
    shutil.copytree(CLUSTER, copy)
    (copy / "gpu-policies.yaml").write_text(yaml.safe_dump_all(POLICIES))
    return copy


def config_file(tmp_path: Path, failure_mode: str) -> Path:
    config = yaml.safe_load(CONFIG.read_text()) or {}
    config.setdefault("policies", {})["failureMode"] = failure_mode
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def opa_port() -> int:
    return free_port()


@pytest.fixture
def served_closed(directory: Path, tmp_path: Path, opa_port: int) -> Iterator[Served]:
    server = Served(directory, tmp_path / "state", "--config", str(config_file(tmp_path, "closed")),
                    "--opa-url", f"http://127.0.0.1:{opa_port}")
    try:
        eventually(server.up, 120, "kgwe serve listening")
        yield server
    finally:
        log = server.stop()
        print(log[-4000:])


def test_closed_mode_cel_denies_rego_refuses_then_opa_comes_back(served_closed: Served, opa_port: int) -> None:
    server = served_closed
    status, body = server.readyz()
    assert status == 200, body
    assert any("policy engine opa unavailable" in p for p in body.get("problems", [])), body
    assert server.metric("kgwe_policy_engine_up", '{engine="opa"}') == 0

    # The CEL policy was not dropped with the Rego engine: it denies, and its message leads.
    big = server.validate(gpu_pod("big", "nvidia-h100-80gb", gpus=4))
    assert not big["allowed"]
    message = big["status"]["message"]
    assert CEL_MESSAGE in message and "policy engine opa unavailable" in message
    assert message.index(CEL_MESSAGE) < message.index("policy engine opa unavailable")
    # failureMode closed: what the Rego policies would have judged is refused, saying why.
    small = server.validate(gpu_pod("small", "nvidia-h100-80gb", gpus=1))
    assert not small["allowed"] and "policy engine opa unavailable" in small["status"]["message"]

    # OPA starts where the webhook looks for it; nothing about the policies changes.
    with OpaRestStub(opa_port) as opa:
        eventually(lambda: server.metric("kgwe_policy_engine_up", '{engine="opa"}') == 1, 90, "reconnected to OPA")
        assert server.readyz() == (200, {"status": "ready"})
        assert "kgwe/GPUPolicy:no-forbidden.rego" in opa.state.modules
        assert server.validate(gpu_pod("small-again", "nvidia-h100-80gb", gpus=1))["allowed"]
        forbidden = server.validate(labelled(gpu_pod("forbidden", "nvidia-h100-80gb"), forbidden="yes"))
        assert not forbidden["allowed"] and REGO_MESSAGE in forbidden["status"]["message"]
        still_big = server.validate(gpu_pod("big-again", "nvidia-h100-80gb", gpus=4))
        assert not still_big["allowed"] and CEL_MESSAGE in still_big["status"]["message"]
        assert "policy engine opa unavailable" not in still_big["status"]["message"]
        assert opa.state.queries > 0


def test_open_mode_warns_for_rego_and_cel_still_denies(directory: Path, opa_port: int) -> None:
    config = Config.model_validate({"policies": {"regoEngine": "opa", "opaUrl": f"http://127.0.0.1:{opa_port}",
                                                 "failureMode": "open"}})
    runtime = build_runtime(config, directory)
    assert runtime.policies is not None
    try:
        assert set(runtime.policies.policy_names()) >= {"max-two-gpus", "no-forbidden"}, "nothing was dropped"
        webhook = Webhook(runtime)
        big = webhook.ask("validate", webhook.mutated(gpu_pod("big", "nvidia-h100-80gb", gpus=4))[1])
        assert not big["allowed"] and CEL_MESSAGE in big["status"]["message"]
        forbidden_pod = labelled(gpu_pod("forbidden", "nvidia-h100-80gb"), forbidden="yes")
        admitted = webhook.ask("validate", webhook.mutated(forbidden_pod)[1])
        assert admitted["allowed"], "failureMode open: the unevaluated Rego policy does not refuse"
        assert any("no-forbidden could not be evaluated" in w for w in admitted.get("warnings", [])), admitted
        with OpaRestStub(opa_port):
            eventually(lambda: runtime.policies is not None and runtime.policies.engine_health.up, 90,
                       "reconnected to OPA")
            refused = webhook.ask("validate", webhook.mutated(labelled(gpu_pod("f2", "nvidia-h100-80gb"),
                                                                       forbidden="yes"))[1])
            assert not refused["allowed"] and REGO_MESSAGE in refused["status"]["message"]
    finally:
        runtime.policies.close()


def test_an_opa_restarted_empty_is_noticed_and_refilled(directory: Path, opa_port: int) -> None:
    # OPA restarts between two requests and comes back without KGWE's modules: its answers ("undefined") must
    # not read as "no violations". The webhook notices, answers per failureMode, and pushes the set again.
    config = Config.model_validate({"policies": {"regoEngine": "opa", "opaUrl": f"http://127.0.0.1:{opa_port}",
                                                 "failureMode": "closed"}})
    with OpaRestStub(opa_port):
        runtime = build_runtime(config, directory)
    assert runtime.policies is not None
    webhook = Webhook(runtime)
    try:
        with OpaRestStub(opa_port) as fresh:
            assert fresh.state.modules == {}
            forbidden = labelled(gpu_pod("forbidden", "nvidia-h100-80gb"), forbidden="yes")
            first = webhook.ask("validate", webhook.mutated(forbidden)[1])
            assert not first["allowed"], "an OPA without the policies must not admit what they refuse"
            eventually(lambda: runtime.policies is not None and runtime.policies.engine_health.up, 90,
                       "the set pushed to the restarted OPA")
            assert "kgwe/GPUPolicy:no-forbidden.rego" in fresh.state.modules
            again = webhook.ask("validate", webhook.mutated(labelled(gpu_pod("f2", "nvidia-h100-80gb"),
                                                                     forbidden="yes"))[1])
            assert not again["allowed"] and REGO_MESSAGE in again["status"]["message"]
            assert "unavailable" not in again["status"]["message"]
            assert webhook.ask("validate", webhook.mutated(gpu_pod("ok", "nvidia-h100-80gb"))[1])["allowed"]
    finally:
        runtime.policies.close()
