"""The inventory rebuilt from what each pod object added the last time (webhook/inventory/cache.py InventoryMemo)
against a fresh `Inventory` over a cluster that changes under it (tests/fixtures/changing_cluster.py, plus pods
charged to their namespace's tenant and namespaces relabelled into another tenant), every view compared."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

from changing_cluster import NAMESPACES, changed, random_pod, step
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster
from effort import tries

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.cache import InventoryMemo
from webhook.inventory.capacity import Inventory
from webhook.inventory.chargeback import costs_view
from webhook.inventory.nodes import nodes_view
from webhook.inventory.profiles import hardware_profiles_view
from webhook.inventory.tenants import tenants_view
from webhook.quotas.view import remembered_waiting_rows

VIEWS = (nodes_view, tenants_view, costs_view, hardware_profiles_view)


def _views(inventory: Inventory) -> list[Any]:
    found = []
    for view in VIEWS:
        doc = view(inventory)
        for row in doc.get("nodes", []):
            row["topology"].pop("ageSeconds")  # the time of the rendering, not of the inventory
        found.append(doc)
    return found


def _unnamed_pod(rng: random.Random, n: int) -> dict[str, Any]:
    """A pod charged to its namespace's tenant (no kgwe.io/tenant annotation)."""
    made = random_pod(rng, n)
    made["metadata"]["annotations"].pop("kgwe.io/tenant", None)
    return made


def test_remembered_pods_give_the_views_of_a_fresh_inventory_over_a_changing_cluster(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    store = runtime.store
    store.min_rebuild_interval = 0
    config = runtime.config
    memo = InventoryMemo(remembered_waiting_rows())
    rng = random.Random(3636)
    for n in range(40):
        store.upsert((random_pod if n % 2 else _unnamed_pod)(rng, 1000 + n))
    looked_up = 0
    for n in range(tries(70, 250)):
        model = store.snapshot(force=True)
        memo.advance(model, config)
        remembered = Inventory(model, config, now=model_time(), memo=memo)
        fresh = Inventory(model, config, now=model_time())
        assert _views(remembered) == _views(fresh), f"step {n}"
        assert remembered.charges == fresh.charges and remembered.pending == fresh.pending
        looked_up += len(model.pods) - memo.computed
        choice = rng.random()
        if choice < 0.15:
            store.upsert(_unnamed_pod(rng, 2000 + n))
        elif choice < 0.2:  # a namespace relabelled into another tenant: its unnamed pods follow
            namespace = rng.choice(list(model.namespaces.values()))
            tenant = rng.choice(("blue", "green", "ml-research"))
            store.upsert(changed(namespace, lambda o, t=tenant: o["metadata"].setdefault("labels", {}).__setitem__(
                "kgwe.io/tenant", t)))
        elif choice < 0.3 and model.tenant_quotas:  # a TenantQuota takes or gives up namespaces
            quota = rng.choice(list(model.tenant_quotas.values()))
            names = sorted(rng.sample(NAMESPACES, rng.randint(0, 2)))
            store.upsert(changed(quota, lambda o, names=names: o["spec"].__setitem__("namespaces", names)))
        else:
            step(rng, store, model, n)
    assert looked_up > 0


def test_a_new_configuration_prices_every_pod_again(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    model = runtime.store.snapshot(force=True)
    memo = InventoryMemo()
    memo.advance(model, runtime.config)
    before = costs_view(Inventory(model, runtime.config, memo=memo))
    config = copy.deepcopy(runtime.config)
    for type_id, price in list(config.pricing.per_gpu_hour.items()):
        config.pricing.per_gpu_hour[type_id] = price * 2
    memo.advance(model, config)
    after = costs_view(Inventory(model, config, memo=memo))
    assert after["pods"] == costs_view(Inventory(model, config))["pods"]
    assert memo.computed == len(model.pods)
    assert after["hourlyCost"] != before["hourlyCost"] or not before["pods"]


def model_time() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 11, 29, tzinfo=UTC)
