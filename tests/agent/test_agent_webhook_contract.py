"""The contract with the reader: what the agent writes on a Node is what the webhook's node view understands."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import nvml_machines as machines
from agent_node_api import merge_patch, node
from fake_nvml import installed

from agent.document import build_document
from agent.nvml_discovery import scan
from agent.publisher import NodeMetadata, plan_patch
from policies.vocabulary.accelerator_types import default_table
from webhook.cluster.model import ClusterStore
from webhook.cluster.node_facts import node_facts

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def published_gb200_node(at: datetime = T0) -> dict[str, Any]:
    with installed(machines.gb200_nvl72_tray()):
        doc = build_document(scan(), node_name="tray-1", now=at)
    patch = plan_patch(NodeMetadata(), doc, at, 120)
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


def test_a_document_goes_stale_in_the_store_while_only_pods_change() -> None:
    """The store keeps a snapshot's node side while only pods change (webhook/cluster/node_side.py), but a
    topology document's freshness moves with the clock: the next snapshot after its staleness passes says so,
    though no node changed."""
    store = ClusterStore(default_table(), staleness_seconds=1.0, min_rebuild_interval=0.0)
    store.replace_all([published_gb200_node(datetime.now(UTC))])
    assert not store.snapshot(force=True).nodes["tray-1"].topology_stale
    time.sleep(1.5)  # past the staleness: only more time can pass on a busy machine, never less
    store.upsert({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                  "spec": {"containers": [{"name": "c", "image": "x"}]}})
    facts = store.snapshot(force=True).nodes["tray-1"]
    assert facts.topology_stale and facts.type_source != "topology"
