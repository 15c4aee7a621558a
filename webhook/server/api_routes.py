"""The read-only JSON API of `kgwe serve` (docs/inventory.md): hardware profiles, nodes, tenants, costs.

Every answer comes from the in-memory cluster model through one `InventoryCache`: the body is rendered
once per snapshot generation and the same bytes go to every caller, so 100 concurrent callers cost one
rendering. The cache the router makes is kept warm from the application's start (built once the cluster
model is loaded, rebuilt in the background on change: webhook/inventory/cache.py), so a request is answered
from what is built; one that comes before the first build waits for it off the event loop, and a 503 with
Retry-After answers it if that takes longer than the cache's bound. Only the proposal endpoint, whose
answer depends on the query, and the documents of a caller who may not see every namespace are computed per
request (on a thread).

In a cluster every caller has passed the read gate (webhook/server/read_auth.py): profiles go to any
authenticated user, nodes and proposals to those who may list nodes, and a caller who may not list pods
in every namespace gets tenants and costs rendered for the namespaces it may list pods in (per request,
from the same cached inventory).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import orjson
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from policies.quota.budget import BudgetState
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.inventory.cache import InventoryCache, InventoryNotReady, View
from webhook.inventory.chargeback import costs_view
from webhook.inventory.nodes import nodes_view
from webhook.inventory.profiles import hardware_profiles_view
from webhook.inventory.tenants import tenants_view
from webhook.profile_proposal import NoSuchNodes, ProposalError, propose_profile
from webhook.quotas.view import remembered_waiting_rows
from webhook.server.read_auth import refusals_answered, require_node_reader, visible_namespaces
from webhook.spend.report import amount, budget_fields
from webhook.spend.service import SpendService
from webhook.spend.warm import WarmWindows
from webhook.spend.window import WindowError
from webhook.usage.nodes import with_utilisation
from webhook.usage.prometheus import PrometheusUnavailable
from webhook.usage.refresher import current_table

JSON = "application/json"
PREFIX = "/api/v1"


class _Snapshots(Protocol):
    def snapshot(self, force: bool = False) -> ClusterModel: ...


class ApiRuntime(Protocol):
    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> _Snapshots: ...


def _json(body: bytes, status: int = 200) -> Response:
    return Response(body, status, media_type=JSON, headers={"Cache-Control": "no-store"})


def _error(status: int, message: str) -> Response:
    return _json(orjson.dumps({"error": message}), status)


def _not_ready(exc: InventoryNotReady) -> Response:
    response = _error(503, f"{exc}: try again shortly")
    response.headers["Retry-After"] = "5"
    return response


def not_ready_answered(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A route whose InventoryNotReady (no first build within the cache's bound) is a 503 with Retry-After."""

    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except InventoryNotReady as exc:
            return _not_ready(exc)

    return answered


def server_inventory(runtime: ApiRuntime) -> InventoryCache:
    """The inventory the server's read API keeps warm, which other readers of the server's process may share
    (the HardwareProfile status sync)."""
    return InventoryCache(
        lambda: runtime.store.snapshot(), lambda: runtime.config,
        fresh_model_source=lambda: runtime.store.snapshot(force=True),
        loaded=lambda: bool(getattr(runtime.store, "loaded", True)),
        waiting=remembered_waiting_rows(),
        # The UI's first page and a read at ready: answered from the nodes' light pass before the full first build.
        first_views=("nodes",),
    )


def api_router(runtime: ApiRuntime, cache: InventoryCache | None = None, spend_service: SpendService | None = None,
               budgets: Callable[[], Mapping[str, BudgetState]] | None = None, keep_warm: bool | None = None,
               ) -> APIRouter:
    """Routes of the read-only API over `runtime`'s cluster store and configuration.

    Plain Starlette routes inside the router, as for the admission endpoints: FastAPI's per-request
    parameter handling would cost more than serving the cached bytes (bench/bench_inventory.py).

    `keep_warm`: the router keeps its cache warm while the application runs (its lifespan). By default it does
    for the cache it makes without `cache` (`server_inventory`), and a `cache` given is the caller's to start
    or not.
    """
    inventory = cache or server_inventory(runtime)
    warms = cache is None if keep_warm is None else keep_warm
    # Every view the UI's pages and the API serve, rendered with each build (the first one included).
    for name, view, render in _VIEWS:
        inventory.register(name, view, render)

    def cached(name: str, view: View) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(_request: Request) -> Response:
            return _json(await inventory.aview(name, view, orjson.dumps))

        return endpoint

    def node_facts(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        @refusals_answered
        async def guarded(request: Request) -> Response:
            await require_node_reader(request)
            return await endpoint(request)

        return guarded

    async def scoped(request: Request, view: Callable[..., dict[str, Any]], namespaces: str
                     ) -> dict[str, Any] | None:
        """The document rendered for the caller's namespaces, or None when it may see every namespace
        (then the shared cached answer is its answer). `namespaces`: the cached view of the namespaces
        the document names."""
        visible = await visible_namespaces(request, await inventory.aview(namespaces, *_NAMESPACES[namespaces]))
        if visible is None:
            return None
        built = await inventory.ainventory()
        return await run_in_threadpool(view, built, visible)

    async def proposal(request: Request) -> Response:
        nodes = request.query_params.get("nodes")
        type_id = request.query_params.get("type")
        if not nodes and not type_id:
            return _error(400, "give ?nodes=NAME,NAME (or a label selector) or ?type=ACCELERATOR_TYPE")
        model = runtime.store.snapshot()
        try:
            found = propose_profile(
                model, runtime.config, selection=nodes, type_id=type_id, name=request.query_params.get("name")
            )
        except NoSuchNodes as exc:
            return _error(404, str(exc))
        except ProposalError as exc:
            return _error(400, str(exc))
        return _json(orjson.dumps(found.as_document()))

    cached_nodes = cached("nodes", nodes_view)

    async def nodes(request: Request) -> Response:
        # Utilisation from the usage table (memory only), where a Prometheus is configured (docs/usage.md).
        if not runtime.config.usage.prometheus.url:
            return await cached_nodes(request)
        table = current_table(runtime)
        return _json(orjson.dumps(with_utilisation(await inventory.aview("nodes-document", nodes_view), table)))

    cached_tenants = cached("tenants", tenants_view)
    cached_costs = cached("costs", costs_view)

    @refusals_answered
    async def tenants(request: Request) -> Response:
        doc = await scoped(request, tenants_view, "tenants-namespaces")
        states = budgets() if budgets is not None else {}
        if doc is None and not states:
            return await cached_tenants(request)
        doc = doc if doc is not None else await inventory.aview("tenants-document", tenants_view)
        return _json(orjson.dumps(with_budgets(doc, states)))

    book = getattr(runtime, "budgets", None)  # webhook.runtime.Runtime's BudgetBook: one spend service and cache
    spend = spend_service or (book.service if book is not None else SpendService(
        lambda: runtime.config, lambda: runtime.store.snapshot()))
    if budgets is None and book is not None:
        budgets = book.states
    warm_windows = WarmWindows(spend, lambda: runtime.config, lambda: bool(getattr(runtime.store, "loaded", True)))

    @refusals_answered
    async def costs(request: Request) -> Response:
        window = request.query_params.get("window")
        if window:
            return await window_costs(request, window)
        doc = await scoped(request, costs_view, "costs-namespaces")
        return _json(orjson.dumps(doc)) if doc is not None else await cached_costs(request)

    async def window_costs(request: Request, window: str) -> Response:
        """The current document's fields plus the window's (webhook/spend/report.py), for the caller's
        namespaces: a reader of every namespace gets the warm answer (webhook/spend/warm.py). Prometheus is
        read off the event loop; a failure is a 503 saying why."""
        try:
            answer = await run_in_threadpool(warm_windows.answer, window)
        except WindowError as exc:
            return _error(400, str(exc))
        except PrometheusUnavailable as exc:
            return _error(503, str(exc))
        namespaces = await inventory.aview("costs-namespaces", *_NAMESPACES["costs-namespaces"])
        visible = await visible_namespaces(request, namespaces | answer.namespaces)
        if visible is None:
            return _json(joined(await inventory.aview("costs", costs_view, orjson.dumps), answer.body))
        now = await run_in_threadpool(costs_view, await inventory.ainventory(), visible)
        try:
            doc = await run_in_threadpool(spend.window_costs, window, visible)
        except PrometheusUnavailable as exc:
            return _error(503, str(exc))
        return _json(orjson.dumps({**now, **doc.model_dump(mode="json")}))

    @asynccontextmanager
    async def warm(_app: Any) -> AsyncIterator[None]:
        # The cache is built from the start and kept warm while the application serves.
        if warms:
            inventory.start()
        warm_windows.start()
        try:
            yield
        finally:
            await run_in_threadpool(warm_windows.stop)
            if warms:
                await run_in_threadpool(inventory.stop)

    router = APIRouter(lifespan=warm)
    router.routes.extend([
        Route(f"{PREFIX}/hardware-profiles", not_ready_answered(cached("hardware-profiles", hardware_profiles_view)),
              methods=["GET"]),
        Route(f"{PREFIX}/hardware-profiles/proposal", node_facts(proposal), methods=["GET"]),
        Route(f"{PREFIX}/nodes", not_ready_answered(node_facts(nodes)), methods=["GET"]),
        Route(f"{PREFIX}/tenants", not_ready_answered(tenants), methods=["GET"]),
        Route(f"{PREFIX}/costs", not_ready_answered(costs), methods=["GET"]),
    ])
    return router


def joined(now: bytes, window: bytes) -> bytes:
    """`{**now, **window}` as JSON, from the two documents' JSON: their keys are apart (the current view's
    generatedAt, currency, rows, hourlyCost, pods; the window's report.py WindowCosts fields), so the answer
    is the one object's members and then the other's, without parsing 50 MB again. Sent whole, not in pieces
    (pieces.py): read answers in pieces raised admission's tail on the same server (docs/performance.md, "Peak
    memory at 10,000 nodes")."""
    if now == b"{}":
        return window
    if window == b"{}":
        return now
    return b"".join((now[:-1], b",", window[1:]))


def with_budgets(doc: dict[str, Any], states: Mapping[str, BudgetState]) -> dict[str, Any]:
    """The tenants document with each budgeted tenant's month: spent, rate, projection, state (SPEC 12)."""
    if not states:
        return doc
    tenants = []
    for tenant in doc.get("tenants", []):
        state = states.get(str(tenant.get("tenant")))
        if state is not None:
            tenant = {**tenant, "budget": {"spent": amount(state.spent), "hourlyRate": amount(state.hourly),
                                           "projected": amount(state.projected), "monthEnd": state.month_end,
                                           "message": state.message(), **budget_fields(state)}}
        tenants.append(tenant)
    return {**doc, "tenants": tenants}


def _tenant_namespaces(doc: dict[str, Any]) -> frozenset[str]:
    """The namespaces the tenants document names (what a reader's access is asked about)."""
    return frozenset(str(n) for tenant in doc.get("tenants", []) for n in tenant.get("namespaces", []))


def _cost_namespaces(doc: dict[str, Any]) -> frozenset[str]:
    """The namespaces of the pods the costs document lists."""
    return frozenset(str(pod.get("namespace")) for pod in doc.get("pods", []))


def _same(doc: Any) -> Any:
    return doc


# The namespaces each per-reader document names, rendered from the shared document with each build.
_NAMESPACES: dict[str, tuple[View, Callable[[dict[str, Any]], Any]]] = {
    "tenants-namespaces": (tenants_view, _tenant_namespaces),
    "costs-namespaces": (costs_view, _cost_namespaces),
}

# (name, view, render) of every cached answer: bodies (bytes), the documents the per-request answers start
# from and the namespaces they name, rendered with each build (each view function run once per build). The costs
# document itself is not kept (a row per running pod, 25 MB at 150,000 pods): no answer starts from it.
_VIEWS: tuple[tuple[str, View, Callable[[Any], Any]], ...] = (
    ("hardware-profiles", hardware_profiles_view, orjson.dumps),
    ("nodes", nodes_view, orjson.dumps),
    ("tenants", tenants_view, orjson.dumps),
    ("tenants-document", tenants_view, _same),
    ("costs", costs_view, orjson.dumps),
    *((name, view, render) for name, (view, render) in _NAMESPACES.items()),
)
