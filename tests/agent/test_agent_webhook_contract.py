"""The contract with the reader: what the agent writes on a Node is what the webhook's node view understands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import nvml_machines as machines
from agent_node_api import merge_patch, node
from fake_nvml import installed

from agent.document import build_document
from agent.nvml_discovery import scan
from agent.publisher import NodeMetadata, plan_patch
from policies.vocabulary.accelerator_types import default_table
from webhook.cluster.node_facts import node_facts

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def published_gb200_node() -> dict[str, Any]:
    with installed(machines.gb200_nvl72_tray()):
        doc = build_document(scan(), node_name="tray-1", now=T0)
    patch = plan_patch(NodeMetadata(), doc, T0, 120)
    published = merge_patch(node("tray-1", {"nvidia.com/gpu.present": "true"}), patch)
    published["status"] = {"allocatable": {"nvidia.com/gpu": "4"}}
    return published


def test_the_webhook_reads_a_fresh_agent_document() -> None:
    facts = node_facts(published_gb200_node(), default_table(), 300, T0 + timedelta(seconds=30))
    assert facts.accelerator_type == "nvidia-gb200-186gb" and facts.type_source == "topology"
    assert facts.nvlink_domain_size == 4
    assert facts.clique == f"{machines.GB200_CLUSTER}.{machines.GB200_CLIQUE}"
    assert not facts.topology_stale


def test_the_heartbeat_keeps_an_unchanged_document_fresh() -> None:
    published = published_gb200_node()
    later = T0 + timedelta(seconds=400)
    published["metadata"]["annotations"]["kgwe.io/topology-heartbeat"] = "2026-11-21T12:05:00Z"
    assert not node_facts(published, default_table(), 300, later).topology_stale


def test_without_heartbeats_the_document_goes_stale() -> None:
    facts = node_facts(published_gb200_node(), default_table(), 300, T0 + timedelta(seconds=400))
    assert facts.topology_stale and facts.type_source != "topology"
