"""The read-only JSON API of `kgwe serve` (docs/api.md): hardware profiles, nodes, tenants, costs.

Every answer comes from the in-memory cluster model through one `InventoryCache`: the body is rendered
once per snapshot generation and the same bytes go to every caller, so 100 concurrent callers cost one
rendering. Only the proposal endpoint, whose answer depends on the query, is computed per request.
"""

from __future__ import annotations

from typing import Protocol

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.inventory import (
    InventoryCache,
    View,
    costs_view,
    hardware_profiles_view,
    nodes_view,
    tenants_view,
)
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
    """Routes of the read-only API over `runtime`'s cluster store and configuration."""
    inventory = cache or InventoryCache(lambda: runtime.store.snapshot(), lambda: runtime.config)
    router = APIRouter(prefix=PREFIX, tags=["inventory"])

    def cached(name: str, view: View) -> Response:
        return _json(inventory.view(name, view, orjson.dumps))

    @router.get("/hardware-profiles")
    async def hardware_profiles() -> Response:
        return cached("hardware-profiles", hardware_profiles_view)

    @router.get("/hardware-profiles/proposal")
    async def hardware_profile_proposal(
        nodes: str | None = Query(None, description="node names, comma-separated, or a label selector"),
        type: str | None = Query(None, description="an accelerator type id: every node of that type"),
        name: str | None = Query(None, description="metadata.name of the proposed profile"),
    ) -> Response:
        if not nodes and not type:
            return _error(400, "give ?nodes=NAME,NAME (or a label selector) or ?type=ACCELERATOR_TYPE")
        model = runtime.store.snapshot()
        try:
            proposal = propose_profile(model, runtime.config, selection=nodes, type_id=type, name=name)
        except NoSuchNodes as exc:
            return _error(404, str(exc))
        except ProposalError as exc:
            return _error(400, str(exc))
        return _json(orjson.dumps(proposal.as_document()))

    @router.get("/nodes")
    async def nodes() -> Response:
        return cached("nodes", nodes_view)

    @router.get("/tenants")
    async def tenants() -> Response:
        return cached("tenants", tenants_view)

    @router.get("/costs")
    async def costs() -> Response:
        return cached("costs", costs_view)

    return router
