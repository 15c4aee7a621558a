"""`GET /api/v1/workloads`: the GPU workloads of the cluster model and whether KGWE would admit each now.

One entry per workload of a kind in the workload kind table whose templates ask for GPUs (or carry KGWE
intent, or that names a gang): kind, namespace, name, the GPU templates with their pod counts, the total
GPU demand, the gang, and the verdict of both webhooks on its CREATE now, with the refusal naming the
template path (webhook/audit/workloads.py; `kgwe audit` reports the same refusals).

Judging a workload runs every template through the admission pipeline, so the document is computed once
per cluster snapshot and configuration and the same bytes go to every caller. It runs on the event loop
like admission and `/api/v1/explain`: the policy engines are bound to the thread that built them. The
model bounds how many workloads there are (webhook/cluster/workloads.py). In a cluster a caller sees the
workloads of the namespaces it may list pods in (webhook/server/read_auth.py).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.audit.workloads import workload_verdicts
from webhook.server.read_auth import refusals_answered, visible_namespaces

PATH = "/api/v1/workloads"


def workloads_document(runtime: Any) -> dict[str, Any]:
    """The endpoint's document for `runtime`'s current snapshot (a webhook.runtime.Runtime)."""
    verdicts = workload_verdicts(runtime)
    return {
        "workloads": [v.as_dict() for v in verdicts],
        "refused": sum(1 for v in verdicts if not v.admitted),
        # Whether /api/v1/recommendations has anything to say (a Prometheus is configured): the page asks it only
        # then, rather than learning it from a 404 the browser logs as an error.
        "usageConfigured": bool(runtime.config.usage.prometheus.url),
    }


def workloads_router(runtime: Any) -> APIRouter:
    """The route over `runtime` (its store, configuration and admission service)."""
    cache: dict[str, Any] = {"key": None, "body": b"", "document": {}}

    @refusals_answered
    async def endpoint(request: Request) -> Response:
        key = (runtime.store.snapshot().generation, id(runtime.config))
        if cache["key"] != key:
            cache["document"] = workloads_document(runtime)
            cache["body"] = orjson.dumps(cache["document"])
            cache["key"] = key
        body = cache["body"]
        document = cache["document"]
        visible = await visible_namespaces(request, {str(w.get("namespace")) for w in document["workloads"]})
        if visible is not None:
            shown = [w for w in document["workloads"] if visible(str(w.get("namespace")))]
            body = orjson.dumps({"workloads": shown, "refused": sum(1 for w in shown if not w.get("admitted", True)),
                                 "usageConfigured": document["usageConfigured"]})
        return Response(body, 200, media_type="application/json", headers={"Cache-Control": "no-store"})

    router = APIRouter()
    router.routes.append(Route(PATH, endpoint, methods=["GET"]))
    return router
