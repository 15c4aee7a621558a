"""A broken version of a GPUPolicy is uploaded while the webhook serves: the policy's last good version keeps
deciding, the others are untouched, and the GPUPolicy's Ready condition says why the new one was refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fault_support import CLUSTER, Webhook, gpu_pod

from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterStore
from webhook.cluster.yaml_source import YamlDirectorySource
from webhook.config import Config
from webhook.policy_sync import PolicySync

AT_MOST_TWO = "object.spec.containers.all(c, int(c.resources.limits[?'nvidia.com/gpu'].orValue('0')) <= 2)"


def gpu_policy(name: str, generation: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy",
            "metadata": {"name": name, "generation": generation},
            "spec": {"enforcementAction": "Deny", **spec}}


def test_the_last_good_set_keeps_serving(caplog: pytest.LogCaptureFixture) -> None:
    config = Config()
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys,
                         min_rebuild_interval=0.0)
    YamlDirectorySource(CLUSTER, store).load()
    conditions: dict[str, dict[str, Any]] = {}
    runtime = build_runtime(config, None, store=store)
    sync = PolicySync(runtime, write_status=lambda name, condition: conditions.__setitem__(name, condition))
    webhook = Webhook(runtime)
    four_gpus = gpu_pod("big", "nvidia-h100-80gb", gpus=4)
    one_gpu = gpu_pod("small", "nvidia-h100-80gb", gpus=1)

    store.upsert(gpu_policy("max-two-gpus", 1, validations=[{"expression": AT_MOST_TWO,
                                                             "message": "at most 2 GPUs per container"}]))
    assert sync.sync_once()
    assert conditions["max-two-gpus"]["status"] == "True"
    refused = webhook.ask("validate", webhook.mutated(four_gpus)[1])
    assert not refused["allowed"] and "[max-two-gpus] at most 2 GPUs per container" in refused["status"]["message"]

    caplog.set_level(logging.ERROR)
    # Generation 2 does not compile; a brand-new policy whose Rego does not parse comes with it.
    store.upsert(gpu_policy("max-two-gpus", 2, validations=[{"expression": "object.spec.containers.all(c, ",
                                                             "message": "broken"}]))
    store.upsert(gpu_policy("new-and-broken", 1, rego={"module": "package kgwe.policy.broken\ndeny contains"}))
    assert sync.sync_once()

    assert conditions["max-two-gpus"]["status"] == "False"
    assert conditions["max-two-gpus"]["reason"] == "CompileErrorLastGoodServing"
    assert conditions["new-and-broken"]["reason"] == "CompileError"
    assert "max-two-gpus" in caplog.text and "keeps serving" in caplog.text
    still_refused = webhook.ask("validate", webhook.mutated(four_gpus)[1])
    assert not still_refused["allowed"]
    assert "[max-two-gpus] at most 2 GPUs per container" in still_refused["status"]["message"]
    assert webhook.ask("validate", webhook.mutated(one_gpu)[1])["allowed"]
    assert runtime.policies is not None and "new-and-broken" not in runtime.policies.policy_names()
