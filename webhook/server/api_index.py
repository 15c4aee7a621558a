"""`GET /api/v1/`: the read API's endpoints, so that someone who finds the prefix finds the rest (as the
Kubernetes API server answers its own group versions). Built from the routes the app serves, so the list
cannot drift from them."""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PREFIX = "/api/v1"
# What each endpoint answers; an endpoint missing here is still listed, without words.
DESCRIPTIONS = {
    "hardware-profiles": "HardwareProfiles: their accelerator types, GPUs available now and pending, price",
    "hardware-profiles/proposal": "a HardwareProfile for ?nodes=NAME,NAME (or a label selector) or ?type=TYPE",
    "nodes": "every node's GPUs, and per accelerator type the capacity left",
    "tenants": "per tenant: TenantQuotas, use against each limit, pods waiting, hourly cost of running pods",
    "costs": "the hourly cost of running GPU pods by tenant and accelerator type",
    "gangs": "gangs: size, members present and bound, the NVLink room, why one waits",
    "workloads": "GPU workloads and whether KGWE would admit each now",
    "recommendations": "per workload: peak GPU memory, engine activity, the smallest shape that holds it, what it "
                       "saves (?namespace=, ?workload=); 404 without a Prometheus",
    "mig-plan": "per node a MIGStrategy selects: the MIG manager layout that best serves waiting pods, "
                "recommendations and preferred profiles, and the mig-parted config naming it",
    "idle": "pods whose GPUs stayed idle, with tenant and hourly cost (?namespace=); 404 without a Prometheus",
    "explain": "?pod=NAMESPACE/NAME: why KGWE places or refuses a pod, what blocks it now; "
               "without ?pod: the GPU pods not bound yet",
}


def api_index(routers: Iterable[APIRouter]) -> list[Route]:
    """Routes for `/api/v1/` and `/api/v1` listing the GET endpoints under the prefix that `routers` serve."""
    endpoints = sorted({
        route.path for router in routers for route in router.routes
        if isinstance(route, Route) and route.path.startswith(f"{PREFIX}/") and "GET" in (route.methods or ())
    })
    body = orjson.dumps({
        "apiVersion": "v1",
        "endpoints": [
            {"path": path, "description": DESCRIPTIONS.get(path.removeprefix(f"{PREFIX}/"), "")} for path in endpoints
        ],
    })

    async def index(_request: Request) -> Response:
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    return [Route(f"{PREFIX}/", index, methods=["GET"]), Route(PREFIX, index, methods=["GET"])]
