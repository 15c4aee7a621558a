"""The read-only JSON API of `kgwe serve` (docs/inventory.md): hardware profiles, nodes, tenants, costs.

Every answer comes from the in-memory cluster model through one `InventoryCache`: the body is rendered
once per snapshot generation and the same bytes go to every caller, so 100 concurrent callers cost one
rendering. Only the proposal endpoint, whose answer depends on the query, is computed per request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.inventory.cache import InventoryCache, View
from webhook.inventory.chargeback import costs_view
from webhook.inventory.nodes import nodes_view
from webhook.inventory.profiles import hardware_profiles_view
from webhook.inventory.tenants import tenants_view
from webhook.profile_proposal import NoSuchNodes, ProposalError, propose_profile

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


def api_router(runtime: ApiRuntime, cache: InventoryCache | None = None) -> APIRouter:
    """Routes of the read-only API over `runtime`'s cluster store and configuration.

    Plain Starlette routes inside the router, as for the admission endpoints: FastAPI's per-request
    parameter handling would cost more than serving the cached bytes (bench/bench_inventory.py).
    """
    inventory = cache or InventoryCache(
        lambda: runtime.store.snapshot(), lambda: runtime.config,
        fresh_model_source=lambda: runtime.store.snapshot(force=True),
    )

    def cached(name: str, view: View) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(_request: Request) -> Response:
            return _json(inventory.view(name, view, orjson.dumps))

        return endpoint

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

    router = APIRouter()
    router.routes.extend([
        Route(f"{PREFIX}/hardware-profiles", cached("hardware-profiles", hardware_profiles_view), methods=["GET"]),
        Route(f"{PREFIX}/hardware-profiles/proposal", proposal, methods=["GET"]),
        Route(f"{PREFIX}/nodes", cached("nodes", nodes_view), methods=["GET"]),
        Route(f"{PREFIX}/tenants", cached("tenants", tenants_view), methods=["GET"]),
        Route(f"{PREFIX}/costs", cached("costs", costs_view), methods=["GET"]),
    ])
    return router
