"""The agent stopped publishing (its topology document is older than topologyStalenessSeconds): placement falls
back to GPU Feature Discovery labels, still places the pod, and says so in the `kgwe.io/decision` annotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import nvml_machines as machines
import orjson
from agent_node_api import merge_patch, node
from fake_nvml import installed
from fault_support import Webhook, gpu_pod

from agent.document import build_document
from agent.nvml_discovery import scan
from agent.publisher import NodeMetadata, plan_patch
from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterStore
from webhook.config import Config

GFD = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
       "nvidia.com/gpu.count": "8"}


def published_dgx(name: str, published_at: datetime) -> dict[str, Any]:
    """A DGX H100 node as the agent left it at `published_at`, next to the labels GFD keeps fresh."""
    with installed(machines.dgx_h100()):
        document = build_document(scan(), node_name=name, now=published_at)
    published = merge_patch(node(name, dict(GFD)), plan_patch(NodeMetadata(), document, published_at, 120))
    published["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    published["status"] = {"allocatable": {"cpu": "220", "memory": "1990Gi", "pods": "110", "nvidia.com/gpu": "8"}}
    return published


def decision_of(published_at: datetime) -> tuple[dict[str, Any], dict[str, Any], Webhook]:
    config = Config()
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    store.upsert(published_dgx("dgx-1", published_at))
    store.upsert({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    webhook = Webhook(build_runtime(config, None, store=store, load_policies=False))
    pod = gpu_pod("train", "nvidia-h100-80gb", gpus=8, annotations={"kgwe.io/topology": "nvlink"})
    _response, placed = webhook.mutated(pod)
    return orjson.loads(placed["metadata"]["annotations"]["kgwe.io/decision"]), placed, webhook


def test_stale_topology_falls_back_to_gfd_and_says_so() -> None:
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    decision, placed, webhook = decision_of(an_hour_ago)
    assert decision["topology"] == "stale on 1 node(s): GFD labels used"
    assert decision["types"] == ["nvidia-h100-80gb"] and decision.get("nvlink") is True
    labels = published_dgx("dgx-1", an_hour_ago)["metadata"]["labels"]
    assert placed["spec"]["nodeSelector"]
    assert all(labels.get(key) == value for key, value in placed["spec"]["nodeSelector"].items())
    assert webhook.ask("validate", placed)["allowed"]


def test_fresh_topology_is_not_reported_as_a_fallback() -> None:
    decision, placed, webhook = decision_of(datetime.now(UTC) - timedelta(seconds=30))
    assert "topology" not in decision
    assert decision["types"] == ["nvidia-h100-80gb"]
    assert webhook.ask("validate", placed)["allowed"]
