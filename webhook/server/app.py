"""The HTTP shell: the FastAPI application around the admission endpoints (admission_endpoint.py), the
health and metrics routes, the read API's routers, and the background tasks started and stopped with it.

The admission endpoints are plain ASGI apps reached before FastAPI's middleware and routing (`KgweApp`):
request parsing, response validation and the middleware stack would cost more than the decision itself. A POST
with a declared length does not even reach the app: the connection's protocol answers it (admission_protocol.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from policies.kernel.background import Task
from policies.kernel.supervisor import Supervisor
from webhook.server import multiproc_metrics
from webhook.server.admission_endpoint import AdmissionEndpoint, LoadState, ServingRuntime
from webhook.server.api_index import api_index
from webhook.server.callers import CallerAuthenticator
from webhook.server.health import readiness_problems
from webhook.server.large_lane import LargeLane
from webhook.server.openapi import add_shell_routes
from webhook.server.pieces import PiecesResponse
from webhook.server.read_auth import ReadAuth
from webhook.server.serving_loop import ReloadableCertificate, ServingLoop, certificate_task
from webhook.server.ui_routes import ui_router

JSON = "application/json"
# Admission runs on the event loop. Measured with bench/bench_admission.py: the core is CPU-bound and
# sub-millisecond, and a thread hop costs as much or more CPU per request than it saves (the GIL
# serialises the work anyway). The native Rego engine is also bound to the thread that built it, so
# with policies loaded a thread pool cannot evaluate them at all. I/O inside the core
# (SubjectAccessReview) is cached and bounded by the deadline it is given.
OFFLOAD_DEFAULT = False
OFFLOAD_THREADS = 8


# What the server runs for its whole life: background tasks (policies/kernel/background.py), and serving
# certificates polled for renewal, which become `certificate-reload` tasks reloading on the serving loop.
BackgroundTask = Task | ReloadableCertificate


class KgweApp(FastAPI):
    """The FastAPI application, with the admission endpoints answered before its middleware and routing.

    A POST to /mutate or /validate goes straight to its `AdmissionEndpoint` (a plain ASGI app that
    handles every error itself); with a `read_auth` gate (in a cluster), the read API and /metrics pass
    it first (webhook/server/read_auth.py); everything else takes FastAPI's path.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admission_endpoints: dict[str, AdmissionEndpoint] = {}
        self.read_auth: ReadAuth | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["method"] == "POST":
                endpoint = self.admission_endpoints.get(scope["path"])
                if endpoint is not None:
                    await endpoint(scope, receive, send)
                    return
            gate = self.read_auth
            if gate is not None and gate.guards(scope["path"]):
                await gate(scope, receive, send, super().__call__)
                return
        await super().__call__(scope, receive, send)


def create_app(
    runtime: ServingRuntime,
    *,
    ui: bool = True,
    extra_routers: Iterable[APIRouter] = (),
    certificate: LoadState | None = None,
    background: Iterable[BackgroundTask] = (),
    offload: bool | None = None,
    authenticator: CallerAuthenticator | None = None,
    supervisor: Supervisor | None = None,
    unready: Callable[[], list[str]] | None = None,
    read_auth: ReadAuth | None = None,
) -> FastAPI:
    """The webhook application.

    `unready` lists reasons the replica must not serve (the CRDs and RBAC its controllers need: pods would
    wait gated in silence otherwise); `/readyz` answers 503 naming them.

    `certificate` is the serving certificate's state (readiness needs one loaded); it can also be set
    later as `app.state.certificate`. `background` tasks run from startup to shutdown, on `supervisor`
    (default: one of the app's own) with whatever else it holds; the supervisor is started at startup
    and stopped (within its bound, off the event loop) at shutdown. `offload`
    runs admission on a thread pool instead of the event loop (default: OFFLOAD_DEFAULT).
    `authenticator` decides who may call /mutate and /validate (default: from the runtime's config
    `authentication` section as it is now). `read_auth`, in a cluster, lets only callers with a
    Kubernetes identity read the API and /metrics (webhook/server/read_auth.py); without it they are open.
    """
    serving_loop = ServingLoop()
    tasks = supervisor if supervisor is not None else Supervisor()
    for item in background:
        tasks.add(item if isinstance(item, Task) else certificate_task(item, serving_loop))
    use_threads = OFFLOAD_DEFAULT if offload is None else offload
    executor = ThreadPoolExecutor(OFFLOAD_THREADS, thread_name_prefix="kgwe-admission") if use_threads else None
    lane = LargeLane()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        serving_loop.bind(asyncio.get_running_loop())
        tasks.start()
        try:
            yield
        finally:
            # Off the loop: a task may be waiting for the loop (the certificate reload) while it is joined.
            await asyncio.to_thread(tasks.stop)
            serving_loop.unbind()
            if read_auth is not None:
                read_auth.close()
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            lane.close()

    app = KgweApp(title="KGWE", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.runtime = runtime
    app.read_auth = read_auth
    generated_openapi = app.openapi
    # FastAPI describes only its own routes; the plain routes below are described in webhook/server/openapi.py.
    app.openapi = lambda: add_shell_routes(generated_openapi())  # type: ignore[method-assign]
    app.state.certificate = certificate
    callers = authenticator or CallerAuthenticator(runtime.config.authentication)
    endpoints = [
        AdmissionEndpoint(runtime, "mutate", True, executor, callers, lane),
        AdmissionEndpoint(runtime, "validate", False, executor, callers, lane),
    ]
    for endpoint in endpoints:
        app.admission_endpoints[f"/{endpoint.name}"] = endpoint
    # Also routed, for what is not a POST (405) and for anything that walks the routes.
    app.router.routes.extend(Route(f"/{e.name}", e, methods=["POST"]) for e in endpoints)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type=JSON)

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        reasons = []
        if not runtime.store.loaded:
            reasons.append("cluster model not loaded yet")
        cert: LoadState | None = app.state.certificate
        if cert is None or not cert.loaded:
            reasons.append("no serving certificate loaded")
        if unready is not None:
            reasons.extend(unready())
        # Degraded but serving: shown, not a reason to be unready.
        problems = readiness_problems(runtime) + tasks.problems()
        if reasons:
            body: dict[str, Any] = {"status": "not ready", "reasons": reasons}
            if problems:
                body["problems"] = problems
            return Response(orjson.dumps(body), 503, media_type=JSON)
        if problems:
            return Response(orjson.dumps({"status": "ready", "problems": problems}), media_type=JSON)
        return Response(b'{"status":"ready"}', media_type=JSON)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        # Off the event loop: at 150,000 pods the per-pod cost series take seconds to render, which the loop
        # would not answer the API server's admissions in (issue 36).
        # In parts, sent as the scraper reads them (pieces.py, metrics_parts.py): at that size the whole text and
        # its copies were the worker's peak memory.
        parts = await run_in_threadpool(multiproc_metrics.latest_parts)
        return PiecesResponse(tuple(parts), media_type=CONTENT_TYPE_LATEST)

    # The web UI's static pages, served at /ui/ (read once into memory).
    routers = [*([ui_router()] if ui else []), *extra_routers]
    for router in routers:
        app.include_router(router)
    app.router.routes.extend(api_index(routers))  # what the routers above serve under /api/v1/
    return app

