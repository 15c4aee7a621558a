"""One `Inventory` and its rendered views per snapshot generation and configuration, kept warm by the
`inventory-warm` task (built once the cluster model is loaded, rebuilt on change) so that no request waits
for a build, and rebuilt from what each pod object added the last time (`InventoryMemo`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from starlette.concurrency import run_in_threadpool

from policies.kernel.background import Task
from policies.quota.model import PodCharge
from webhook.cluster.claim_charging import CLAIM_CHARGING
from webhook.cluster.device_classes import charged_through_claims, mapped_resources
from webhook.cluster.model import ClusterModel
from webhook.cluster.read_epochs import ChargeEpochs
from webhook.config import Config
from webhook.inventory.capacity import Inventory
from webhook.inventory.node_use import NodeUse

log = logging.getLogger("kgwe.inventory")

View = Callable[[Inventory], dict[str, Any]]
Render = Callable[[dict[str, Any]], Any]
WaitingRows = Callable[[ClusterModel, Config], dict[str, dict[str, Any]]]

# How long a request that comes before the first build waits for it (the build of 150,000 pods takes tens
# of seconds on a busy machine); past it, the request is answered 503 with a Retry-After, never an empty view.
# Under 60 s, the timeout of common proxies and clients (the scale bench's among them): they get the 503.
FIRST_BUILD_WAIT_SECONDS = 50.0
# How long readiness waits for the light pass's first answer once the cluster model is loaded: a read at ready is then
# answered at once (it took 13-16 s at 10,000 nodes, the light pass sharing the GIL with the first passes), while
# start-up (17.6 s there) stays well inside its 60 s goal. Past it, or when the light pass failed, ready without it.
FIRST_VIEWS_READY_SECONDS = 30.0


class InventoryNotReady(Exception):
    """The first inventory is not built yet (the cluster model is still loading, or the build runs)."""


class InventoryMemo:
    """What each pod object added to the last `Inventory` (capacity.py `_PodFacts`), by identity: the next
    build computes only the pods that changed. The store never changes an object in place, so an entry stays
    right while its pod, the node facts of its node (for a pod on no known node, every node's facts: the
    types it may land on) and the context are the same objects; the context is the accelerator table, the
    HardwareProfiles, the Namespaces and the DeviceClasses (`ChargeEpochs`, as the quota pass's and the audit's
    memos read them) and the configuration (prices). Tenants are resolved again each build."""

    def __init__(self, waiting: WaitingRows | None = None) -> None:
        self._waiting = waiting
        self.entries: dict[int, Any] = {}
        self.nodes_epoch = 0
        self.computed = 0  # pods computed by the last build (the rest were looked up)
        self._epochs = ChargeEpochs()
        self._context: tuple[int, int] | None = None
        self._mapped: dict[str, str] = {}

    def advance(self, model: ClusterModel, config: Config) -> None:
        """Move on to `model` and `config`: forget every entry when the context changed."""
        self.nodes_epoch, context_epoch = self._epochs.advance(model)
        context = (context_epoch, id(config))
        if context != self._context:
            self.entries = {}
            self._context = context
            self._mapped = mapped_resources(model.device_classes)

    def own_devices(self, pod: dict[str, Any]) -> bool:
        """Whether an unfinished pod asks DRA devices of its own (ResourceClaims, or devices as extended
        resources): as webhook/dra/charges.py `claimed_charges` picks the pods it charges."""
        return charged_through_claims(pod, self._mapped)

    def waiting_rows(self, model: ClusterModel, config: Config) -> dict[str, dict[str, Any]] | None:
        """Per tenant, the pods that wait for quota (the tenants view's `waiting`), from `waiting` given at
        construction (the API router's reads the quota wing's picture keeping what it read of each pod object
        between builds); None: the view asks the quota wing's seam for the snapshot's own."""
        return self._waiting(model, config) if self._waiting is not None else None

    def claimed(
        self, model: ClusterModel, pods: list[dict[str, Any]]
    ) -> Iterator[tuple[dict[str, Any], list[PodCharge]]]:
        """The DRA wing's `claimed_charges` of `model` for `pods` (those `own_devices` picked): what their
        claims hold is read again each build, for those pods only."""
        if pods:
            usage = CLAIM_CHARGING.value.claim_charges(model, self._mapped)  # the DRA wing's part
            for pod in pods:
                yield pod, usage.charges(pod)


class InventoryCache:
    """One `Inventory` and its rendered views per (snapshot generation, configuration).

    Warm (`start()`, the server's setting: api_routes.py starts it with the application): the
    `inventory-warm` task builds the first inventory as soon as `loaded()` says the cluster model is loaded,
    with every view registered so far rendered, and then looks four times a second for a changed snapshot;
    requests get the last built answer and never wait for a build (one that comes before the first build
    waits for it, off the event loop, at most `first_wait_seconds`). A changed snapshot is picked up
    `refresh_seconds` after the last build, or `build_share` times the last build's CPU time when that is
    longer (so builds of a large, busy cluster take at most about 1 / (1 + build_share) of a CPU, and a build
    that waited for the GIL beside admission does not delay the next one by its wait; the task's duty cycle
    bounds it too), never later than `max_age_seconds`; an unchanged one is rebuilt after
    `max_age_seconds` from `fresh_model_source` (a snapshot rebuilt now) so `generatedAt` and topology ages
    stay fresh. Each build reuses what unchanged pods added to the previous one (`InventoryMemo`).

    Not warm (a cache nobody started: Python callers, tests): built on demand. With `background` a read that
    finds the answer stale wakes a rebuild on a thread and keeps the previous answer; the very first read,
    and the first after the cache sat unused for `max_age_seconds`, build at once from
    `fresh_model_source`: a person opening the page after a pause sees the cluster as it is.
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
        loaded: Callable[[], bool] | None = None,
        first_wait_seconds: float = FIRST_BUILD_WAIT_SECONDS,
        waiting: WaitingRows | None = None,
        first_views: tuple[str, ...] = (),
        first_views_ready_seconds: float = FIRST_VIEWS_READY_SECONDS,
    ) -> None:
        """`first_views`: views that read only the nodes' part of an inventory (`NodeUse`), rendered from that
        lighter pass at the first build and answered from it until the full first build is installed; while warm,
        `unready()` names them until then, at most `first_views_ready_seconds` after the model is loaded."""
        self._model_source = model_source
        self._fresh_model_source = fresh_model_source or model_source
        self._config_source = config_source
        self._loaded = loaded or (lambda: True)
        self.refresh_seconds = refresh_seconds
        self.max_age_seconds = max_age_seconds
        self.build_share = build_share
        self.background = background
        self.first_wait_seconds = first_wait_seconds
        self.last_build_seconds = 0.0
        self.last_build_cpu_seconds = 0.0  # its thread's CPU: time spent waiting for the GIL is not the build's
        self.builds = 0
        self.memo = InventoryMemo(waiting)
        self._lock = threading.Lock()  # installs and renders
        self._building = threading.Lock()  # one build at a time (the memo is the last build's)
        self._state: tuple[Inventory, dict[str, Any]] | None = None
        self.first_views = first_views
        self._provisional: dict[str, Any] = {}  # the `first_views` rendered from a NodeUse, until `_state` is set
        self.first_views_ready_seconds = first_views_ready_seconds
        self._loaded_at: float | None = None  # when `loaded()` was first seen true
        self._light_failed = False
        self._key: tuple[int, int] | None = None
        self._built = 0.0
        self._views: dict[str, tuple[View, Render]] = {}
        # Not warm, with `background`: a read that finds the answer stale wakes it and keeps the previous
        # answer; a failed rebuild waits for the next read's wake.
        self._rebuilder = Task("inventory-rebuild", self._rebuild_wanted, interval=None,
                               on_error=lambda _exc: log.exception("rebuilding the inventory failed"))
        # Warm: looks every quarter of a second (at once at start) and builds what changed, at most every
        # refresh_seconds: the store rebuilds its snapshot when a read finds it behind, so a change is seen one
        # look after the first that asks for it.
        self._warm = Task("inventory-warm", self._warm_pass, interval=max(0.05, min(refresh_seconds, 0.25)),
                          run_at_start=True, on_error=lambda _exc: log.exception("building the inventory failed"))
        self._warming = False

    # -- warm -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Keep the inventory warm from now on (the first build as soon as the cluster model is loaded)."""
        self._warming = True
        self._warm.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._warming = False
        self._warm.stop(timeout)

    @property
    def warm(self) -> bool:
        return self._warming and not self._warm.stopping

    def _warm_pass(self) -> None:
        if self._is_loaded():
            self._rebuild_wanted(fresh_when_unchanged=True)

    def _is_loaded(self) -> bool:
        if self._loaded_at is not None:
            return True
        if self._loaded():
            self._loaded_at = time.monotonic()
            return True
        return False

    def unready(self) -> list[str]:
        """Why `/readyz` should wait for this cache: warm, the model loaded, and none of the `first_views` answerable
        yet (the light pass still runs), for at most `first_views_ready_seconds` after the model was loaded; never
        once the light pass failed (the full first build answers them then, as before it existed)."""
        if not self.warm or not self.first_views_pending():
            return []
        return [f"the {', '.join(self.first_views)} view not answered yet"]

    def first_views_pending(self) -> bool:
        """None of the `first_views` answerable yet, the model loaded, at most `first_views_ready_seconds` after it
        was: False once the light pass or a full build answered them, once the light pass failed, with no first view
        registered, and while the model loads (the store's own reason)."""
        if self._state is not None or self._provisional or self._light_failed:
            return False
        if not any(name in self._views for name in self.first_views) or not self._is_loaded():
            return False
        assert self._loaded_at is not None
        return time.monotonic() - self._loaded_at < self.first_views_ready_seconds

    # -- building ---------------------------------------------------------------------------------
    def _wanted_key(self) -> tuple[tuple[int, int], ClusterModel, Config] | None:
        """The snapshot and configuration to build from, or None while the current build is good."""
        age = time.monotonic() - self._built
        interval = min(self.max_age_seconds, max(self.refresh_seconds, self.build_share * self.last_build_cpu_seconds))
        if self._state is not None and age < interval:
            return None
        model = self._model_source()
        config = self._config_source()
        key = (model.generation, id(config))
        if self._state is not None and key == self._key and age < self.max_age_seconds:
            return None
        return key, model, config

    def _build(self, model: ClusterModel, config: Config, first: tuple[int, int] | None = None
               ) -> tuple[Inventory, dict[str, Any]]:
        """The inventory of `model` with every view registered so far rendered (each view function run once:
        a document and its bytes share it). The caller holds `_building`. `first`: the key of the first build,
        installed as soon as the inventory is computed (a request at start renders its view then, rather than wait
        for every other view and the quota picture the tenants' view reads)."""
        started, cpu = time.perf_counter(), time.thread_time()
        if first is not None and self.first_views:
            self._light_pass(model, config)
        self.memo.advance(model, config)
        inventory = Inventory(model, config, memo=self.memo)
        documents: dict[int, dict[str, Any]] = {}
        rendered: dict[str, Any] = {}
        if first is not None:
            self._install(first, (inventory, rendered))
        for name, (build, render) in list(self._views.items()):
            if name in rendered:  # a request rendered it first
                continue
            document = documents.get(id(build))
            if document is None:
                document = documents[id(build)] = build(inventory)
            view = render(document)
            with self._lock:  # beside a request's `_rendered` (the first build's dict is installed already)
                rendered.setdefault(name, view)
        self.last_build_seconds = time.perf_counter() - started
        self.last_build_cpu_seconds = time.thread_time() - cpu
        self.builds += 1
        return inventory, rendered

    def _light_pass(self, model: ClusterModel, config: Config) -> None:
        try:
            light = NodeUse(model, config)
            provisional: dict[str, Any] = {}
            for name in self.first_views:
                if name in self._views:
                    build, render = self._views[name]
                    provisional[name] = render(build(light))
        except Exception:  # the full build answers these views too: it goes on, and readiness waits no more
            log.exception("the inventory's light pass failed; the first views wait for the full build")
            self._light_failed = True
            return
        self._provisional = provisional

    def _install(self, key: tuple[int, int], state: tuple[Inventory, dict[str, Any]]) -> None:
        with self._lock:
            self._state = state
            self._provisional = {}
            self._key = key
            self._built = time.monotonic()

    def _rebuild_wanted(self, fresh_when_unchanged: bool = False) -> None:
        """Build from the snapshot and configuration wanted now, if any (a wake that came while the previous
        build ran finds nothing left to do). `fresh_when_unchanged`: an unchanged snapshot past
        `max_age_seconds` is rebuilt from `fresh_model_source`."""
        with self._building:
            wanted = self._wanted_key()
            if wanted is None:
                return
            key, model, config = wanted
            if fresh_when_unchanged and key == self._key:
                model = self._fresh_model_source()
                key = (model.generation, key[1])
            self._install(key, self._build(model, config, key if self._state is None else None))

    def _first_build(self, name: str | None = None) -> tuple[Inventory | None, dict[str, Any]]:
        """Warm, nothing built yet: wait (on this thread) for the cluster model and the first inventory, bounded;
        the warm task installs it before rendering its views, so this waits for the inventory, not for them.
        With `name`, one of the `first_views`: (None, the provisional views) as soon as the light pass has it."""
        deadline = time.monotonic() + self.first_wait_seconds
        while not self._loaded():
            if time.monotonic() >= deadline:
                raise InventoryNotReady("the cluster model is still loading")
            time.sleep(0.05)
        while self._state is None:
            if name is not None and name in (provisional := self._provisional):
                return None, provisional
            if time.monotonic() >= deadline:
                raise InventoryNotReady("the inventory is still being built")
            if self._building.acquire(timeout=0.05):
                try:
                    if self._state is None:  # the warm task had not begun it (or its build failed): build it here
                        wanted = self._wanted_key()
                        assert wanted is not None
                        key, model, config = wanted
                        self._install(key, self._build(model, config, key))
                finally:
                    self._building.release()
        return self._state

    def _current(self, name: str | None = None) -> tuple[Inventory | None, dict[str, Any]]:
        """The state to answer from; (None, the provisional views) only for `name` while the first build runs."""
        state = self._state
        if self.warm:
            return state if state is not None else self._first_build(name)
        wanted = self._wanted_key()
        if wanted is None and state is not None:
            return state
        idle = time.monotonic() - self._built >= self.max_age_seconds
        if state is not None and self.background and wanted is not None and not idle:
            self._rebuilder.wake()
            return state
        with self._building:
            wanted = self._wanted_key()
            if wanted is not None:
                key, model, config = wanted
                if idle:
                    model = self._fresh_model_source()
                    key = (model.generation, key[1])
                self._install(key, self._build(model, config))
            assert self._state is not None
            return self._state

    # -- reading ----------------------------------------------------------------------------------
    def register(self, name: str, build: View, render: Render = lambda doc: doc) -> None:
        """Render `name` with every build from now on (before the first build: with the first)."""
        self._views.setdefault(name, (build, render))

    def inventory(self) -> Inventory:
        inventory = self._current()[0]
        assert inventory is not None  # only a view's name is answered provisionally
        return inventory

    def view(self, name: str, build: View, render: Render = lambda doc: doc) -> Any:
        """`render(build(inventory))`, computed once per inventory and shared by every caller."""
        self.register(name, build, render)
        if self._state is None and name in (provisional := self._provisional):
            return provisional[name]
        inventory, rendered = self._current(name if name in self.first_views else None)
        if inventory is None:
            return rendered[name]
        return self._rendered(name, inventory, rendered)

    def _rendered(self, name: str, inventory: Inventory, rendered: dict[str, Any]) -> Any:
        cached = rendered.get(name)
        if cached is None:
            build, render = self._views[name]
            with self._lock:
                cached = rendered.get(name)
                if cached is None:
                    cached = rendered[name] = render(build(inventory))
        return cached

    def ready_state(self) -> tuple[Inventory, dict[str, Any]] | None:
        """The state a request can use without waiting for a build, or None."""
        state = self._state
        if state is None:
            return None
        if self.warm:
            return state
        if self._wanted_key() is None:
            return state
        idle = time.monotonic() - self._built >= self.max_age_seconds
        if self.background and not idle:
            self._rebuilder.wake()
            return state
        return None

    async def aview(self, name: str, build: View, render: Render = lambda doc: doc) -> Any:
        """`view` for the event loop: a build, or a view first asked for after the build, runs on a thread.
        Raises InventoryNotReady when the first build did not come within `first_wait_seconds`."""
        self.register(name, build, render)
        if self._state is None and name in (provisional := self._provisional):
            return provisional[name]
        state = self.ready_state()
        if state is not None and name in state[1]:
            return state[1][name]
        return await run_in_threadpool(self.view, name, build, render)

    async def ainventory(self) -> Inventory:
        """`inventory()` for the event loop (the first build, if any, on a thread)."""
        state = self.ready_state()
        return state[0] if state is not None else await run_in_threadpool(self.inventory)
