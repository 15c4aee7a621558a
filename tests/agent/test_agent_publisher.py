"""Publishing: the real `kubernetes` client against a Node API on 127.0.0.1 that records every request."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import nvml_machines as machines
import pytest
from agent_node_api import NodeApi
from fake_nvml import FakeSystem, installed

from agent.document import build_document
from agent.loop import run_loop
from agent.nvml_discovery import scan
from agent.publisher import FIELD_MANAGER, NodeMetadata, NodePublisher, heartbeat_due, plan_patch
from policies.vocabulary.backoff import Backoff
from policies.vocabulary.topology_schema import (
    ANNOTATION,
    HEARTBEAT_ANNOTATION,
    LABEL_ACCELERATOR_TYPE,
    LABEL_NVLINK_CLIQUE,
    LABEL_NVLINK_DOMAIN_SIZE,
    TopologyDocument,
)

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def cycle(publisher: NodePublisher, system: FakeSystem, now: datetime) -> dict[str, Any] | None:
    with installed(system):
        result = scan()
    current = publisher.read()
    doc = build_document(result, node_name=publisher.node_name, now=now, node_labels=current.labels)
    return publisher.publish(doc, current, now)


def test_first_publish_sends_one_merge_patch_with_field_manager(core_v1: Any, node_api: NodeApi) -> None:
    publisher = NodePublisher(core_v1, "gpu-node-1", heartbeat_interval=120)
    sent = cycle(publisher, machines.gb200_nvl72_tray(), T0)

    assert len(node_api.patches) == 1
    request = node_api.patches[0]
    assert request.path == "/api/v1/nodes/gpu-node-1"
    assert request.query == {"fieldManager": FIELD_MANAGER}
    assert request.content_type == "application/merge-patch+json"
    assert request.body == sent
    clique = f"{machines.GB200_CLUSTER}.{machines.GB200_CLIQUE}"
    assert request.body["metadata"]["labels"] == {
        LABEL_ACCELERATOR_TYPE: "nvidia-gb200-186gb",
        LABEL_NVLINK_DOMAIN_SIZE: "4",
        LABEL_NVLINK_CLIQUE: clique,
    }
    annotations = request.body["metadata"]["annotations"]
    assert set(annotations) == {ANNOTATION, HEARTBEAT_ANNOTATION}
    assert annotations[HEARTBEAT_ANNOTATION] == "2026-11-21T12:00:00Z"
    doc = TopologyDocument.model_validate_json(annotations[ANNOTATION])
    assert doc.node == "gpu-node-1" and doc.timestamp == T0 and doc.fabric is not None
    raw = json.loads(annotations[ANNOTATION])
    assert raw["version"] == 1 and raw["nvlink"]["domainSize"] == 4 and raw["fabric"]["cliqueId"] == 17044
    # Only the agent's own keys: nothing else on the node is touched.
    assert set(request.body) == {"metadata"} and set(request.body["metadata"]) == {"labels", "annotations"}


def test_no_write_when_nothing_changed(core_v1: Any, node_api: NodeApi) -> None:
    publisher = NodePublisher(core_v1, "gpu-node-1", heartbeat_interval=120)
    assert cycle(publisher, machines.dgx_h100(), T0) is not None
    for seconds in (30, 60, 119):
        assert cycle(publisher, machines.dgx_h100(), T0 + timedelta(seconds=seconds)) is None
    assert len(node_api.patches) == 1
    assert [r.method for r in node_api.requests].count("GET") == 4


def test_a_restarted_agent_writes_nothing_either(core_v1: Any, node_api: NodeApi) -> None:
    cycle(NodePublisher(core_v1, "gpu-node-1"), machines.dgx_h100(), T0)
    assert cycle(NodePublisher(core_v1, "gpu-node-1"), machines.dgx_h100(), T0 + timedelta(seconds=5)) is None
    assert len(node_api.patches) == 1


def test_heartbeat_alone_after_its_interval(core_v1: Any, node_api: NodeApi) -> None:
    publisher = NodePublisher(core_v1, "gpu-node-1", heartbeat_interval=120)
    cycle(publisher, machines.dgx_h100(), T0)
    document_before = node_api.node["metadata"]["annotations"][ANNOTATION]

    sent = cycle(publisher, machines.dgx_h100(), T0 + timedelta(seconds=120))

    assert sent == {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: "2026-11-21T12:02:00Z"}}}
    assert node_api.patches[-1].body == sent
    # The document keeps the time its content last changed.
    assert node_api.node["metadata"]["annotations"][ANNOTATION] == document_before


def test_a_change_rewrites_labels_document_and_heartbeat(core_v1: Any, node_api: NodeApi) -> None:
    publisher = NodePublisher(core_v1, "gpu-node-1", heartbeat_interval=120)
    cycle(publisher, machines.dgx_h100(), T0)
    later = T0 + timedelta(seconds=30)

    sent = cycle(publisher, machines.dgx_h100_failing_gpu(index=6), later)

    assert sent is not None
    assert sent["metadata"]["labels"] == {LABEL_NVLINK_DOMAIN_SIZE: "7"}
    annotations = sent["metadata"]["annotations"]
    assert annotations[HEARTBEAT_ANNOTATION] == "2026-11-21T12:00:30Z"
    doc = TopologyDocument.model_validate_json(annotations[ANNOTATION])
    assert doc.timestamp == later and not doc.gpus[6].healthy


def test_a_lost_clique_removes_the_label(core_v1: Any, node_api: NodeApi) -> None:
    publisher = NodePublisher(core_v1, "gpu-node-1")
    cycle(publisher, machines.gb200_nvl72_tray(), T0)
    sent = cycle(publisher, machines.gb200_nvl72_tray(odd_gpu_clique=1), T0 + timedelta(seconds=60))

    assert sent is not None and sent["metadata"]["labels"] == {LABEL_NVLINK_CLIQUE: None}
    assert LABEL_NVLINK_CLIQUE not in node_api.node["metadata"]["labels"]


def test_other_labels_and_annotations_are_left_alone(core_v1: Any, node_api: NodeApi) -> None:
    node_api.node["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-L4", "team": "infer"}
    node_api.node["metadata"]["annotations"] = {"example.com/owner": "ops"}
    cycle(NodePublisher(core_v1, "gpu-node-1"), machines.l4_mps(), T0)

    meta = node_api.node["metadata"]
    assert meta["labels"]["team"] == "infer" and meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert meta["annotations"]["example.com/owner"] == "ops"
    assert meta["labels"][LABEL_ACCELERATOR_TYPE] == "nvidia-l4-24gb"


def _doc(system: FakeSystem, now: datetime) -> TopologyDocument:
    with installed(system):
        return build_document(scan(), node_name="n", now=now)


def test_plan_patch_ignores_the_timestamp_but_not_the_content() -> None:
    first = _doc(machines.h100_nvl_pairs(), T0)
    current = NodeMetadata(
        labels={LABEL_ACCELERATOR_TYPE: "nvidia-h100-94gb", LABEL_NVLINK_DOMAIN_SIZE: "2"},
        annotations={ANNOTATION: first.to_annotation(), HEARTBEAT_ANNOTATION: "2026-11-21T12:00:00Z"},
    )
    later = T0 + timedelta(seconds=10)
    assert plan_patch(current, _doc(machines.h100_nvl_pairs(), later), later, 120) is None
    changed = _doc(machines.dgx_h100_failing_gpu(index=0), later)
    assert plan_patch(current, changed, later, 120) is not None


def test_an_unknown_type_is_not_labelled_so_gfd_labels_still_count() -> None:
    system = machines.l4_mps()
    for gpu in system.gpus:
        gpu.lost = True
    doc = _doc(system, T0)
    current = NodeMetadata(labels={LABEL_ACCELERATOR_TYPE: "nvidia-l4-24gb"})
    patch = plan_patch(current, doc, T0, 120)
    assert patch is not None
    assert patch["metadata"]["labels"] == {LABEL_ACCELERATOR_TYPE: None, LABEL_NVLINK_DOMAIN_SIZE: "0"}


@pytest.mark.parametrize(
    ("raw", "due"),
    [
        (None, True),
        ("not a time", True),
        ("2026-11-21T11:58:01Z", False),
        ("2026-11-21T11:58:00Z", True),
        ("2026-11-21T12:01:00Z", False),  # a little ahead: clocks differ
        ("2026-11-21T13:00:00Z", True),  # far ahead: it would never age, rewrite it
    ],
)
def test_heartbeat_due(raw: str | None, due: bool) -> None:
    assert heartbeat_due(raw, T0, 120) is due


def test_api_errors_back_off_exponentially_then_recover(core_v1: Any, node_api: NodeApi) -> None:
    node_api.failures = [500, 503, 429]
    publisher = NodePublisher(core_v1, "gpu-node-1")
    delays: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            delays.append(float(timeout or 0))
            if len(delays) == 5:
                self.set()
            return self.is_set()

    system = machines.dgx_h100()
    clock = Clock(T0)
    with installed(system):
        status = run_loop(publisher, scan, interval=60, stop=Stop(), backoff=Backoff(base=1, jitter=0), clock=clock)

    assert status == 0
    assert delays == [1, 2, 4, 60, 60]
    assert len(node_api.patches) == 1  # the first cycle that got through wrote; the next had nothing to write


def test_once_reports_an_api_failure_in_its_exit_status(core_v1: Any, node_api: NodeApi) -> None:
    node_api.failures = [403]
    with installed(machines.dgx_h100()):
        status = run_loop(NodePublisher(core_v1, "gpu-node-1"), scan, interval=60, stop=threading.Event(), once=True)
    assert status == 1
    assert node_api.patches == []


def test_backoff_is_capped_and_jittered_down_only() -> None:
    backoff = Backoff(base=1, cap=30, jitter=0.5)
    delays = [backoff.next_delay() for _ in range(200)]
    assert all(0 < d <= 30 for d in delays)
    assert max(delays[10:]) > 15
    backoff.reset()
    assert backoff.next_delay() <= 1


def test_an_unreachable_api_server_is_retried_not_fatal() -> None:
    import socket

    from kubernetes import client

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = 0
    publisher = NodePublisher(client.CoreV1Api(client.ApiClient(configuration)), "gpu-node-1")
    with installed(machines.l4_mps()):
        assert run_loop(publisher, scan, interval=60, stop=threading.Event(), once=True) == 1
