"""Inventory arithmetic on a generated cluster of every node pool (bench/generate_cluster.py).

The generator is shared with the benchmarks; these tests keep it honest (every pool typed as its
labels say) and check the inventory's invariants over MIG mixed and single, MPS, time-slicing, GKE,
cordoned and unlabelled nodes at once.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from generate_cluster import POOLS, generate_cluster, generate_nodes

from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.config import Config
from webhook.inventory.capacity import Inventory
from webhook.inventory.nodes import nodes_view
from webhook.inventory.profiles import hardware_profiles_view

NODES = 400  # every pool, the GB200 trays in more than one NVL72 clique


@pytest.fixture(scope="module")
def model() -> ClusterModel:
    config = Config()
    store = ClusterStore(config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys)
    store.replace_all(generate_cluster(NODES))
    return store.snapshot()


@pytest.fixture(scope="module")
def inventory(model: ClusterModel) -> Inventory:
    return Inventory(model, Config())


def _pool(name: str) -> str:
    return name.rsplit("-", 1)[0]


def test_generator_is_deterministic_and_covers_every_pool() -> None:
    nodes = generate_nodes(NODES)
    assert nodes == generate_nodes(NODES)
    names = [n["metadata"]["name"] for n in nodes]
    assert len(names) == len(set(names)) == NODES
    assert set(Counter(_pool(n) for n in names)) == {pool for pool, _w, _b in POOLS}
    assert len(generate_nodes(7)) == 7


def test_every_pool_gets_the_type_its_labels_say(model: ClusterModel) -> None:
    expected = {
        "dgx-h100": ("nvidia-h100-80gb", "agent-label"), "hgx-a100": ("nvidia-a100-80gb", "gfd"),
        "a100-mig": ("nvidia-a100-80gb", "gfd"), "a100-40-mig-single": ("nvidia-a100-40gb", "gfd"),
        "h200": ("nvidia-h200-141gb", "agent-label"), "l40s": ("nvidia-l40s-48gb", "gfd"),
        "l4": ("nvidia-l4-24gb", "gfd"), "l4-mps": ("nvidia-l4-24gb", "gfd"), "l4-ts": ("nvidia-l4-24gb", "gfd"),
        "gb200": ("nvidia-gb200-186gb", "agent-label"), "gke-t4": ("nvidia-t4-16gb", "gke"),
        "unlabelled": ("unknown", "none"), "cpu": ("", "none"),
    }
    for facts in model.nodes.values():
        assert (facts.accelerator_type, facts.type_source) == expected[_pool(facts.name)], facts.name
    single = model.nodes["a100-40-mig-single-00000"]
    assert (single.mig_strategy, single.mig_profiles) == ("single", {"1g.5gb": 56})
    assert model.nodes["l4-ts-00000"].sharing == "time-slicing"
    trays = len(model.types["nvidia-gb200-186gb"].nodes)
    assert len(model.types["nvidia-gb200-186gb"].cliques) == -(-trays // 18)  # 18 trays per NVL72 clique
    assert trays > 18


def _profiles(inventory: Inventory) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in hardware_profiles_view(inventory)["profiles"]}


def test_profile_counts_follow_their_sharing_mode(model: ClusterModel, inventory: Inventory) -> None:
    profiles = _profiles(inventory)
    schedulable = {pool: 0 for pool, _w, _b in POOLS}
    for facts in model.nodes.values():
        if not facts.unschedulable:
            schedulable[_pool(facts.name)] += 1
    assert profiles["tiny-mig-40"]["total"] == 56 * schedulable["a100-40-mig-single"]
    assert profiles["small-mig"]["total"] == 16 * schedulable["a100-mig"]
    assert profiles["medium-mig"]["total"] == 8 * schedulable["a100-mig"]
    # Whole A100 GPUs: only the exclusive pool (MIG nodes have no unpartitioned GPUs here).
    assert profiles["a100-training"]["total"] == 8 * schedulable["hgx-a100"]
    assert profiles["shared-l4"]["total"] == 2 * schedulable["l4-mps"]
    assert profiles["sliced-l4"]["total"] == 2 * schedulable["l4-ts"]
    assert profiles["t4-batch"]["total"] == 4 * schedulable["gke-t4"]
    for profile in profiles.values():
        assert 0 <= profile["available"] <= profile["total"], profile["name"]
        assert profile["total"] == sum(t["total"] for t in profile["acceleratorTypes"])


def test_available_is_allocatable_minus_bound_requests(model: ClusterModel, inventory: Inventory) -> None:
    premium = _profiles(inventory)["premium-h100"]
    allocatable = used = Decimal(0)
    for facts in model.nodes.values():
        if facts.accelerator_type == "nvidia-h100-80gb" and not facts.unschedulable:
            allocatable += facts.allocatable["nvidia.com/gpu"]
            used += inventory.node_used.get(facts.name, {}).get("nvidia.com/gpu", Decimal(0))
    assert premium["available"] == allocatable - used
    queued = [p for p in model.pods.values()
              if not p["spec"].get("nodeName") and p["metadata"]["annotations"].get("kgwe.io/accelerator-type")
              == "nvidia-h100-80gb"]
    assert queued and premium["pending"] == sum(
        int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) for p in queued)


def test_node_view_types_add_up(model: ClusterModel, inventory: Inventory) -> None:
    view = nodes_view(inventory)
    assert len(view["nodes"]) == NODES
    by_id = {t["id"]: t for t in view["types"]}
    assert by_id["unknown"]["nodes"] == sum(1 for name in model.nodes if _pool(name) == "unlabelled")
    assert sum(t["gpus"] for t in view["types"]) == sum(f.gpu_count for f in model.nodes.values() if f.accelerator_type)
