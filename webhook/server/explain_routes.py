"""`GET /api/v1/explain?pod=NAMESPACE/NAME`: why KGWE placed or refuses an existing pod, and what blocks it
now when it is not bound (webhook/explain.py; the same data `kgwe explain NAMESPACE/NAME -o json` prints).
`GET /api/v1/explain` without `pod`: the GPU pods that are not bound yet (`{"pending": ["ns/name", ...]}`,
at most 500, oldest names first), the ones a person asks "why" about.

Read-only: the explanation is computed as a dry run (no quota reserved, nothing written). It runs on the
event loop like admission: the policy engines are bound to the thread that built them. In a cluster a
caller may ask about pods of the namespaces it may list pods in, and the pending list shows those only
(webhook/server/read_auth.py).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.explain import explain
from webhook.server.read_auth import refusals_answered, visible_namespaces

# A namespace and a pod name as Kubernetes allows them (DNS-1123 label / subdomain), nothing else.
_POD_REF = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json", headers={"Cache-Control": "no-store"})


MAX_PENDING = 500


def pending_gpu_pods(pods: dict[str, dict[str, Any]]) -> list[str]:
    """namespace/name of every pod that asks for a GPU (or carries a kgwe.io/ annotation) and is not bound."""
    from policies.gpu_demand import pod_gpu_demand
    from policies.vocabulary.objects import PodView

    found = []
    for key, raw in pods.items():
        pod = PodView(raw)
        if pod.node_name or pod.terminal:
            continue
        if pod_gpu_demand(pod).asks_gpu or any(k.startswith("kgwe.io/") for k in pod.annotations):
            found.append(key)
    return sorted(found)[:MAX_PENDING]


def explain_router(runtime: Any) -> APIRouter:
    """The route over `runtime` (a webhook.runtime.Runtime: its store, configuration and admission core)."""

    @refusals_answered
    async def endpoint(request: Request) -> Response:
        if "pod" not in request.query_params:
            pending = pending_gpu_pods(runtime.store.snapshot().pods)
            visible = await visible_namespaces(request, {key.split("/", 1)[0] for key in pending})
            if visible is not None:
                pending = [key for key in pending if visible(key.split("/", 1)[0])]
            return _json({"pending": pending})
        ref = request.query_params.get("pod", "")
        if not _POD_REF.match(ref):
            return _json({"error": "give ?pod=NAMESPACE/NAME"}, 400)
        namespace = ref.split("/", 1)[0]
        visible = await visible_namespaces(request, {namespace})
        if visible is not None and not visible(namespace):
            # The same answer whether the pod exists or not: a 404 would tell who may not look what is there.
            return _json({"error": f"you may not list pods in namespace {namespace}"}, 403)
        pod = runtime.store.snapshot().pods.get(ref)
        if not isinstance(pod, dict):
            return _json({"error": f"no pod {ref} in KGWE's model of the cluster"}, 404)
        found = explain(runtime.admission, pod, existing=True,
                        deadline_seconds=runtime.config.limits.deadline_seconds)
        return _json(found.as_json())

    router = APIRouter()
    router.routes.append(Route("/api/v1/explain", endpoint, methods=["GET"]))
    return router
