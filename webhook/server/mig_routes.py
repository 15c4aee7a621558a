"""`GET /api/v1/mig-plan` (SPEC section 11, docs/mig.md): the MIG plan of every MIGStrategy.

Worked out per request from the cluster model on a worker thread (a few milliseconds: the layouts of each
model are enumerated once per process). Recommendations come from the usage table while it is fresh; the
request never reads Prometheus itself. Node facts are cluster-scoped: the caller must be allowed to list
nodes (webhook/server/read_auth.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.inventory.numbers import utc_stamp
from webhook.migplan.views import plan_cluster
from webhook.server.read_auth import refusals_answered, require_node_reader
from webhook.usage.refresher import current_table

PREFIX = "/api/v1"


def mig_plan_document(runtime: Any) -> dict[str, Any]:
    table = current_table(runtime) if runtime.config.usage.prometheus.url else None
    report = table.report if table is not None else None
    note = "recommendations from the usage table" if report is not None else \
        "no recommendations (no fresh usage table: usage.prometheus.url, rightsizing.refreshInterval)"
    model = runtime.store.snapshot()
    doc = plan_cluster(model, recommendations=report.recommendations if report else None, usage_note=note).document()
    # Worked out now from the cluster model: the pages' "data as of".
    return {"generatedAt": utc_stamp(datetime.now(UTC)), **doc}


def mig_router(runtime: Any) -> APIRouter:
    @refusals_answered
    async def mig_plan(request: Request) -> Response:
        await require_node_reader(request)
        doc = await run_in_threadpool(mig_plan_document, runtime)
        return Response(orjson.dumps(doc), media_type="application/json", headers={"Cache-Control": "no-store"})

    router = APIRouter()
    router.routes.append(Route(f"{PREFIX}/mig-plan", mig_plan, methods=["GET"]))
    return router
