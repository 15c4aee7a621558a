"""The nodes' light pass (webhook/inventory/node_use.py `NodeUse`), from which the first build answers
`/api/v1/nodes` before the full inventory is computed: its nodes' view equals the full inventory's over a cluster
that changes under it (tests/fixtures/changing_cluster.py), and the warm cache answers the nodes from it."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from changing_cluster import random_pod, step
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster
from effort import tries
from patience import WAIT_SECONDS

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.cache import InventoryCache
from webhook.inventory.capacity import Inventory
from webhook.inventory.node_use import NodeUse
from webhook.inventory.nodes import nodes_view

NOW = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)


def _without_ages(doc: dict[str, Any]) -> dict[str, Any]:
    """The view less each topology document's age (it counts the seconds between the two renders)."""
    return {**doc, "nodes": [{**row, "topology": {**row["topology"], "ageSeconds": None}} for row in doc["nodes"]]}


def test_the_nodes_light_pass_shows_what_the_full_inventory_shows_over_a_changing_cluster(tmp_path: Path) -> None:
    config = load_config(EXAMPLE_CONFIG)
    store = build_runtime(config, copy_example_cluster(tmp_path / "cluster")).store
    store.min_rebuild_interval = 0
    rng = random.Random(8)
    for n in range(40):
        store.upsert(random_pod(rng, 3000 + n))
    for n in range(tries(60, 250)):
        model = store.snapshot(force=True)
        light = _without_ages(nodes_view(NodeUse(model, config, now=NOW)))
        assert light == _without_ages(nodes_view(Inventory(model, config, now=NOW))), f"step {n}"
        step(rng, store, model, n)


def test_the_warm_cache_answers_the_first_views_from_the_light_pass_until_the_full_build(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, first_views=("nodes",))
    cache.register("nodes", nodes_view)
    cache.start()
    try:
        answer = cache.view("nodes", nodes_view)
        model = runtime.store.snapshot()
        assert _without_ages({**answer, "generatedAt": None}) == _without_ages(
            {**nodes_view(Inventory(model, runtime.config)), "generatedAt": None})
        deadline = time.monotonic() + WAIT_SECONDS
        while cache.ready_state() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.ready_state() is not None and cache._provisional == {}  # the full build replaced it
    finally:
        cache.stop()


def _waiting_cache(tmp_path: Path, nodes: Any, **options: Any) -> InventoryCache:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, first_views=("nodes",), **options)
    cache.register("nodes", nodes)
    return cache


def _until(condition: Any) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_readiness_waits_for_the_light_pass_then_the_nodes_are_answered_at_once(tmp_path: Path) -> None:
    release = threading.Event()

    def nodes(inventory: Inventory) -> dict[str, Any]:
        if isinstance(inventory, NodeUse):
            release.wait(WAIT_SECONDS)  # the light pass, held here as a busy start-up holds it
        return nodes_view(inventory)

    cache = _waiting_cache(tmp_path, nodes)
    assert cache.unready() == []  # not warm: nothing to wait for
    cache.start()
    try:
        assert _until(lambda: cache._loaded_at is not None)
        assert cache.unready() == ["the nodes view not answered yet"]
        assert cache.first_views_pending()  # what `kgwe serve`'s controllers wait for before their first passes
        release.set()
        assert _until(lambda: not cache.unready())
        assert not cache.first_views_pending()
        assert cache.view("nodes", nodes)["nodes"]  # answered from what readiness waited for
    finally:
        release.set()
        cache.stop()


def test_readiness_waits_for_the_light_pass_no_longer_than_its_bound(tmp_path: Path) -> None:
    release = threading.Event()

    def nodes(inventory: Inventory) -> dict[str, Any]:
        if isinstance(inventory, NodeUse):
            release.wait(WAIT_SECONDS)
        return nodes_view(inventory)

    cache = _waiting_cache(tmp_path, nodes, first_views_ready_seconds=0.2)
    cache.start()
    try:
        assert _until(lambda: cache._loaded_at is not None)
        assert _until(lambda: not cache.unready())  # the light pass still runs: ready past the bound
        assert cache._state is None and not cache._provisional and not cache.first_views_pending()
    finally:
        release.set()
        cache.stop()


def test_a_failed_light_pass_leaves_readiness_and_the_first_views_to_the_full_build(tmp_path: Path) -> None:
    def nodes(inventory: Inventory) -> dict[str, Any]:
        if isinstance(inventory, NodeUse):
            raise RuntimeError("the light pass breaks")
        return nodes_view(inventory)

    cache = _waiting_cache(tmp_path, nodes)
    cache.start()
    try:
        assert _until(lambda: cache._state is not None)
        assert cache.unready() == [] and cache._light_failed and not cache.first_views_pending()
        assert cache.view("nodes", nodes)["nodes"]
    finally:
        cache.stop()
