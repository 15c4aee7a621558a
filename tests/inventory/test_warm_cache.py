"""The inventory kept warm (webhook/inventory/cache.py `start()`, as the API router's own cache is while the
application runs): built before any request once the cluster model is loaded, rebuilt on change without a
read, never built on the event loop; a request before the first build waits for it and gets the answer, or
a 503 with Retry-After past the bound, never an empty view."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod
from fastapi import FastAPI
from fastapi.testclient import TestClient
from patience import WAIT_SECONDS

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.cache import InventoryCache, InventoryNotReady
from webhook.inventory.capacity import Inventory
from webhook.inventory.profiles import hardware_profiles_view
from webhook.runtime import Runtime
from webhook.server.api_routes import api_router


def _runtime(tmp_path: Path) -> Runtime:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    runtime.store.min_rebuild_interval = 0
    return runtime


def _premium(doc: dict[str, Any]) -> Any:
    return next(p for p in doc["profiles"] if p["name"] == "premium-h100")["available"]


def _until(check: Any) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        assert time.monotonic() < deadline, "not within the test's patience"
        time.sleep(0.01)


def test_a_warm_cache_builds_before_any_read_and_follows_changes_without_one(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, refresh_seconds=0.05)
    cache.register("profiles", hardware_profiles_view)
    cache.start()
    try:
        _until(lambda: cache.builds >= 1)
        state = cache.ready_state()
        assert state is not None and _premium(state[1]["profiles"]) == 8  # rendered with the build, unasked
        runtime.store.upsert(gpu_pod("late", "team-a", gpus=3, node="dgx-h100-02"))
        _until(lambda: (s := cache.ready_state()) is not None and _premium(s[1]["profiles"]) == 5)
        assert cache.memo.computed < len(runtime.store.snapshot().pods)  # not every pod read again
    finally:
        cache.stop()


def test_a_read_before_the_model_is_loaded_waits_for_the_first_build(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    loaded = threading.Event()
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, loaded=loaded.is_set)
    cache.start()
    answers: list[Any] = []
    try:
        reader = threading.Thread(target=lambda: answers.append(cache.view("profiles", hardware_profiles_view)))
        reader.start()
        time.sleep(0.2)
        assert not answers and cache.builds == 0  # nothing built from a model still loading
        loaded.set()
        reader.join(WAIT_SECONDS)
        assert _premium(answers[0]) == 8
    finally:
        cache.stop()


def test_a_read_at_start_waits_for_the_inventory_not_for_every_view(tmp_path: Path) -> None:
    """The first build is installed once its inventory is computed: a read then renders its own view and is
    answered while the build still renders the others (at 150,000 pods the tenants' view's quota picture charged
    every pod first, and a read at ready waited past the bound for it; issue 36)."""
    runtime = _runtime(tmp_path)
    slow_started, release = threading.Event(), threading.Event()

    def slow(inventory: Inventory) -> dict[str, Any]:
        slow_started.set()
        release.wait(WAIT_SECONDS)
        return {}

    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config)
    cache.register("slow", slow)  # rendered before the profiles by the build
    cache.register("profiles", hardware_profiles_view)
    cache.start()
    answers: list[Any] = []
    try:
        assert slow_started.wait(WAIT_SECONDS)
        reader = threading.Thread(target=lambda: answers.append(cache.view("profiles", hardware_profiles_view)))
        reader.start()
        reader.join(WAIT_SECONDS)
        assert answers and _premium(answers[0]) == 8 and not release.is_set()
        release.set()
        _until(lambda: cache.builds >= 1)
        state = cache.ready_state()
        assert state is not None and state[1]["profiles"] is answers[0]  # the build kept the answer it gave
    finally:
        release.set()
        cache.stop()


def test_past_the_bound_the_api_answers_503_with_retry_after(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    cache = InventoryCache(runtime.store.snapshot, lambda: runtime.config, loaded=lambda: False,
                           first_wait_seconds=0.1)
    cache.start()
    try:
        with pytest.raises(InventoryNotReady):
            cache.view("profiles", hardware_profiles_view)
        app = FastAPI()
        app.include_router(api_router(runtime, cache))
        with TestClient(app) as client:
            for path in ("/api/v1/hardware-profiles", "/api/v1/nodes", "/api/v1/tenants", "/api/v1/costs"):
                response = client.get(path)
                assert response.status_code == 503, path
                assert response.headers["retry-after"] == "5"
                assert "try again" in response.json()["error"]
    finally:
        cache.stop()


def test_the_routers_own_cache_is_warm_and_never_builds_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _runtime(tmp_path)
    built_on_loop: list[bool] = []
    original = InventoryCache._build

    def build(self: InventoryCache, *args: Any) -> tuple[Inventory, dict[str, Any]]:
        try:
            asyncio.get_running_loop()
            built_on_loop.append(True)
        except RuntimeError:
            built_on_loop.append(False)
        return original(self, *args)

    monkeypatch.setattr(InventoryCache, "_build", build)
    app = FastAPI()
    app.include_router(api_router(runtime))
    with TestClient(app) as client:
        _until(lambda: bool(built_on_loop))  # built at start, before any request
        for path in ("/api/v1/hardware-profiles", "/api/v1/nodes", "/api/v1/tenants", "/api/v1/costs"):
            assert client.get(path).status_code == 200
        assert len(built_on_loop) == 1  # every answer came from the one build at start
        runtime.store.upsert(gpu_pod("late", "team-a", gpus=3, node="dgx-h100-02"))
        _until(lambda: _premium(client.get("/api/v1/hardware-profiles").json()) == 5)
    assert built_on_loop and not any(built_on_loop)
