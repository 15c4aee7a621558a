"""One `Inventory` and its rendered views per snapshot generation and configuration, rebuilt on demand
by the `inventory-rebuild` task (policies/kernel/background.py) so that no request waits for a rebuild."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from policies.kernel.background import Task
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.inventory.capacity import Inventory

log = logging.getLogger("kgwe.inventory")

View = Callable[[Inventory], dict[str, Any]]


class InventoryCache:
    """One `Inventory` and its rendered views per (snapshot generation, configuration).

    A changed snapshot is picked up `refresh_seconds` after the last build, or `build_share` times the
    last build's duration when that is longer (so rebuilds of a large, busy cluster take at most about
    1 / (1 + build_share) of a CPU), never later than `max_age_seconds`: a busy watch stream does not
    make every request pay the O(nodes + pods) precompute. An unchanged snapshot is rebuilt
    after `max_age_seconds` so `generatedAt` and topology ages stay fresh. With `background` (the
    server's setting) the rebuild runs on a thread and callers keep getting the previous answer until
    the new one, with every view asked for so far rendered, replaces it: no request waits for a
    rebuild except the very first and the first after the cache sat unused for `max_age_seconds`,
    which is built at once from `fresh_model_source` (a snapshot rebuilt now when the cluster changed):
    a person opening the page after a pause sees the cluster as it is, not as it was minutes ago.
    """

    def __init__(
        self,
        model_source: Callable[[], ClusterModel],
        config_source: Callable[[], Config],
        *,
        refresh_seconds: float = 1.0,
        max_age_seconds: float = 30.0,
        build_share: float = 4.0,
        background: bool = True,
        fresh_model_source: Callable[[], ClusterModel] | None = None,
    ) -> None:
        self._model_source = model_source
        self._fresh_model_source = fresh_model_source or model_source
        self._config_source = config_source
        self.refresh_seconds = refresh_seconds
        self.max_age_seconds = max_age_seconds
        self.build_share = build_share
        self.background = background
        self.last_build_seconds = 0.0
        self._lock = threading.Lock()
        self._state: tuple[Inventory, dict[str, Any]] | None = None
        self._key: tuple[int, int] | None = None
        self._built = 0.0
        self._views: dict[str, tuple[View, Callable[[dict[str, Any]], Any]]] = {}
        # On demand (with `background`): a read that finds the answer stale wakes it and keeps the previous
        # answer; a failed rebuild waits for the next read's wake.
        self._rebuilder = Task("inventory-rebuild", self._rebuild_wanted, interval=None,
                               on_error=lambda _exc: log.exception("rebuilding the inventory failed"))

    def _wanted_key(self) -> tuple[tuple[int, int], ClusterModel, Config] | None:
        """The snapshot and configuration to build from, or None while the current build is good."""
        age = time.monotonic() - self._built
        interval = min(self.max_age_seconds, max(self.refresh_seconds, self.build_share * self.last_build_seconds))
        if self._state is not None and age < interval:
            return None
        model = self._model_source()
        config = self._config_source()
        key = (model.generation, id(config))
        if self._state is not None and key == self._key and age < self.max_age_seconds:
            return None
        return key, model, config

    def _build(self, model: ClusterModel, config: Config) -> tuple[Inventory, dict[str, Any]]:
        started = time.perf_counter()
        inventory = Inventory(model, config)
        rendered = {name: render(build(inventory)) for name, (build, render) in list(self._views.items())}
        self.last_build_seconds = time.perf_counter() - started
        return inventory, rendered

    def _install(self, key: tuple[int, int], state: tuple[Inventory, dict[str, Any]]) -> None:
        self._state = state
        self._key = key
        self._built = time.monotonic()

    def _rebuild_wanted(self) -> None:
        """The `inventory-rebuild` task's body: build from the snapshot and configuration wanted now, if any
        (a wake that came while the previous build ran finds nothing left to do)."""
        wanted = self._wanted_key()
        if wanted is None:
            return
        key, model, config = wanted
        state = self._build(model, config)
        with self._lock:
            self._install(key, state)

    def _current(self) -> tuple[Inventory, dict[str, Any]]:
        wanted = self._wanted_key()
        state = self._state
        if wanted is None and state is not None:
            return state
        idle = time.monotonic() - self._built >= self.max_age_seconds
        if state is not None and self.background and wanted is not None and not idle:
            self._rebuilder.wake()
            return state
        with self._lock:
            wanted = self._wanted_key()
            if wanted is not None:
                key, model, config = wanted
                if idle:
                    model = self._fresh_model_source()
                    key = (model.generation, key[1])
                self._install(key, self._build(model, config))
            assert self._state is not None
            return self._state

    def inventory(self) -> Inventory:
        return self._current()[0]

    def view(self, name: str, build: View, render: Callable[[dict[str, Any]], Any] = lambda doc: doc) -> Any:
        """`render(build(inventory))`, computed once per inventory and shared by every caller."""
        self._views.setdefault(name, (build, render))
        inventory, rendered = self._current()
        cached = rendered.get(name)
        if cached is None:
            with self._lock:
                cached = rendered.get(name)
                if cached is None:
                    cached = rendered[name] = render(build(inventory))
        return cached
