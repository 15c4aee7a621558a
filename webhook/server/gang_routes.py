"""`GET /api/v1/gangs`: the gang view of `kgwe serve` (the same rows as `kgwe gangs -o json`); in a cluster,
the rows of the namespaces the caller may list pods in (webhook/server/read_auth.py).

In a cluster the records are read from the GangLedger the leader's controller writes; over a YAML cluster
directory, which keeps none, they are planned from the directory's pods on every call (`planned_records`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.cluster.model import ClusterModel
from webhook.gangs.ledger import GangStore, GangStoreUnavailable, Records
from webhook.gangs.planning import planned_records
from webhook.gangs.view import gangs_view
from webhook.server.read_auth import refusals_answered, visible_namespaces

# Records are read from the store (an API call in a cluster) at most this often, whatever the callers.
RECORDS_TTL_SECONDS = 2.0


def gangs_router(runtime: Any, store: GangStore | None = None) -> APIRouter:
    """Routes over `runtime.store` (the cluster model) and `store` (the records; None: planned from the model)."""
    cache: dict[str, tuple[float, Records]] = {}
    lock = threading.Lock()

    def records(model: ClusterModel) -> Records:
        if store is None:
            return planned_records(model, runtime.config.gangs, time.time())
        with lock:
            found = cache.get("records")
            if found is not None and time.monotonic() - found[0] < RECORDS_TTL_SECONDS:
                return found[1]
            current = store.read(timeout=5.0).records
            cache["records"] = (time.monotonic(), current)
            return current

    @refusals_answered
    async def endpoint(request: Request) -> Response:
        model = runtime.store.snapshot()
        try:
            current = await run_in_threadpool(records, model)
        except GangStoreUnavailable as exc:
            body = orjson.dumps({"error": f"gang records unavailable: {exc}"})
            return Response(body, 503, media_type="application/json", headers={"Cache-Control": "no-store"})
        view = gangs_view(model, current, recorded=store is not None)
        visible = await visible_namespaces(request, {str(row["namespace"]) for row in view["gangs"]})
        if visible is not None:
            view = {**view, "gangs": [row for row in view["gangs"] if visible(str(row["namespace"]))]}
        return Response(orjson.dumps(view), media_type="application/json", headers={"Cache-Control": "no-store"})

    router = APIRouter()
    router.routes.append(Route("/api/v1/gangs", endpoint, methods=["GET"]))
    return router
