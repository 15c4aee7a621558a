"""An oracle over random intents on a generated heterogeneous cluster (GFD-only, agent-labelled, GKE-only,
MIG mixed and single, MPS, time-slicing, NVL72 cliques, unlabelled and CPU nodes): whenever KGWE admits a
pod, it can land somewhere, and every node it can land on honours its intent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import jsonpatch
import pytest
from effort import tries
from generate_cluster import generate_nodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_support import review

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.intent import parse_intent
from webhook.runtime import Runtime
from webhook.scheduling.predicates import feasible_nodes

TYPES = [
    "nvidia-h100-80gb",
    "nvidia-a100-80gb",
    "nvidia-a100-40gb",
    "nvidia-h200-141gb",
    "nvidia-l40s-48gb",
    "nvidia-l4-24gb",
    "nvidia-gb200-186gb",
    "nvidia-t4-16gb",
    "nvidia-v100-16gb",
]
GIB = Decimal(1024**3)


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    config = Config.model_validate({"pricing": {"perGPUHour": {"nvidia-h100-80gb": 4.5, "nvidia-l4-24gb": 0.8}}})
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    store.replace_all([*generate_nodes(60, cordoned_every=0), namespace])
    store.mark_loaded()
    return build_runtime(config, None, store=store)


@st.composite
def intents(draw: st.DrawFn) -> tuple[dict[str, str], int]:
    notes: dict[str, str] = {}
    if draw(st.booleans()):
        notes["kgwe.io/accelerator"] = ",".join(
            draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True))
        )
    if draw(st.booleans()):
        notes["kgwe.io/gpu-memory"] = draw(st.sampled_from(["5Gi", "10Gi", "20Gi", "40Gi", "80Gi", "100Gi", "150Gi"]))
    if draw(st.booleans()):
        notes["kgwe.io/sharing"] = draw(st.sampled_from(["mig", "mps", "time-slicing", "exclusive"]))
    if draw(st.booleans()):
        notes["kgwe.io/gpu-fraction"] = draw(st.sampled_from(["0.25", "0.5"]))
    if draw(st.booleans()):
        notes["kgwe.io/topology"] = "nvlink"
    if draw(st.integers(0, 4)) == 0:
        notes["kgwe.io/gang"] = "job"
    return notes, draw(st.sampled_from([1, 1, 2, 4, 8, 16]))


def _honours(runtime: Runtime, pod: dict[str, Any], final: dict[str, Any], gpus: int, warnings: list[str]) -> None:
    model = runtime.store.snapshot()
    intent = parse_intent(pod)
    landing = feasible_nodes(final, model.nodes.values())
    if intent.empty and not landing:
        # No intent: passed as it came (SPEC section 1), with a warning saying why it cannot land now.
        assert any(w.startswith("KGWE: ") for w in warnings), warnings
        return
    assert landing, "an admitted pod with intent can land somewhere"
    decision = final["metadata"]["annotations"].get("kgwe.io/decision", "")
    for name in landing:
        node = model.nodes[name]
        if node.sharing == "none" and not node.mig_profiles:
            assert node.gpu_count >= gpus, f"{name}: {gpus} whole GPUs on a node with {node.gpu_count}"
        if intent.empty:
            continue  # no intent: the scheduler's own choice among GPU nodes, unknown ones included
        assert node.is_typed, f"{name}: an intent pod never lands on an untyped node"
        if intent.accelerator_types:
            assert node.accelerator_type in intent.accelerator_types, (name, node.accelerator_type)
        if intent.gpu_memory_bytes is not None and intent.sharing != "mig" and '"sharing":"mig"' not in decision:
            assert Decimal(model.table.memory_gb(node.accelerator_type) or 0) * GIB >= intent.gpu_memory_bytes
        if intent.sharing == "mps":
            assert node.sharing == "mps", name
        if intent.sharing == "time-slicing":
            assert node.sharing == "time-slicing", name
        if intent.sharing == "exclusive":
            assert node.sharing == "none", name
        if intent.sharing == "mig":
            assert node.mig_profiles and node.mig_ready, name
        if intent.topology == "nvlink" and intent.sharing != "mig" and gpus > 1:
            assert node.nvlink_domain_size >= gpus, (name, node.nvlink_domain_size)
        if intent.gang:
            assert node.clique, name


@settings(max_examples=tries(20, 120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=intents())
def test_admitted_pods_land_only_where_their_intent_says(runtime: Runtime, case: tuple[dict[str, str], int]) -> None:
    notes, gpus = case
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": notes},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    mutated = runtime.admission.mutate(decode_review(review(pod)))
    final = jsonpatch.apply_patch(pod, mutated.patch)
    verdict = runtime.admission.validate(decode_review(review(final)))
    if verdict.allowed:
        _honours(runtime, pod, final, gpus, verdict.warnings)
    else:
        assert verdict.message.strip()
        if verdict.message.startswith("no node can ever run this pod"):
            assert " nodes " in verdict.message or " node " in verdict.message, "the refusal says which nodes fail how"
