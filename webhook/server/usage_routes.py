"""`GET /api/v1/recommendations` and `GET /api/v1/idle` (SPEC section 11, docs/usage.md).

Both answer from the background usage table (webhook/usage/refresher.py) while it is fresh: its report is the
same one a read would give, at most `rightsizing.refreshInterval` old, and a page's refreshes then cost
Prometheus nothing. Before the first refresh, or once the table is older than `rightsizing.staleAfter`,
they read the configured Prometheus on a worker thread (never on the event loop that answers the API
server) through one `UsageService`, which keeps an answer `usage.cacheSeconds`. Without
`usage.prometheus.url` the answer is 404 saying so; a Prometheus that cannot answer is 503 with its
reason. Query parameters: `namespace`, and `workload` (NAME, KIND/NAME or the key) for recommendations.
In a cluster a caller sees the namespaces it may list pods in (webhook/server/read_auth.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.server.read_auth import refusals_answered, visible_namespaces
from webhook.usage.refresher import current_table
from webhook.usage.service import PrometheusUnavailable, UsageNotConfigured, UsageService
from webhook.usage.views import UsageReport, idle_document, recommendations_document

PREFIX = "/api/v1"


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json", headers={"Cache-Control": "no-store"})


def usage_router(runtime: Any, service: UsageService | None = None) -> APIRouter:
    usage = service or UsageService(lambda: runtime.config, lambda: runtime.store.snapshot())

    def _from_table() -> UsageReport | None:
        # Only where a Prometheus is configured now: a table left from before the URL was removed is not used.
        if not runtime.config.usage.prometheus.url:
            return None
        table = current_table(runtime)  # None when missing or stale (refresher.current)
        return table.report if table is not None else None

    async def _report(namespace: str | None) -> UsageReport | Response:
        # The table holds every namespace; the documents below pick the namespace asked for.
        found = _from_table()
        if found is not None:
            return found
        try:
            return await run_in_threadpool(usage.report, namespace)
        except UsageNotConfigured as exc:
            return _json({"error": str(exc)}, 404)
        except PrometheusUnavailable as exc:
            return _json({"error": str(exc)}, 503)

    async def _scoped(request: Request, document: dict[str, Any], rows: str,
                      namespace_of: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
        visible = await visible_namespaces(request, {namespace_of(r) for r in document[rows]})
        if visible is None:
            return document
        return {**document, rows: [r for r in document[rows] if visible(namespace_of(r))]}

    @refusals_answered
    async def recommendations(request: Request) -> Response:
        namespace = request.query_params.get("namespace") or None
        report = await _report(namespace)
        if isinstance(report, Response):
            return report
        doc = recommendations_document(report, namespace, request.query_params.get("workload") or None)
        return _json(await _scoped(request, doc, "recommendations", lambda r: str(r["workload"]["namespace"])))

    @refusals_answered
    async def idle(request: Request) -> Response:
        namespace = request.query_params.get("namespace") or None
        report = await _report(namespace)
        if isinstance(report, Response):
            return report
        return _json(await _scoped(request, idle_document(report, namespace), "idle", lambda r: str(r["namespace"])))

    router = APIRouter()
    router.routes.extend([
        Route(f"{PREFIX}/recommendations", recommendations, methods=["GET"]),
        Route(f"{PREFIX}/idle", idle, methods=["GET"]),
    ])
    return router

