"""The HTTP shell: AdmissionReview in, AdmissionReview out, around the pure admission core.

The admission endpoints are plain ASGI apps that read the raw body and answer with orjson bytes,
reached before FastAPI's middleware and routing (`KgweApp`): request parsing, response validation
and the middleware stack would cost more than the decision itself.
Whatever happens inside admission, the API server gets an AdmissionReview back before its timeout:
deadline and internal errors are answered per `limits.onError`, never with a 500 or a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl

import orjson
from fastapi import APIRouter, FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, Counter
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from policies.kernel.background import Supervisor, Task
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest, BadReview, decode_review
from webhook.admission.response import render_review
from webhook.admission.validate import fails_closed
from webhook.config import Config
from webhook.server import metrics, multiproc_metrics
from webhook.server.api_index import api_index
from webhook.server.callers import CallerAuthenticator
from webhook.server.deadline import budget_seconds
from webhook.server.fallback import FailureKind, failure_outcome
from webhook.server.health import readiness_problems
from webhook.server.large_lane import LargeLane
from webhook.server.openapi import add_shell_routes
from webhook.server.read_auth import ReadAuth
from webhook.server.serving_loop import ReloadableCertificate, ServingLoop, certificate_task
from webhook.server.ui_routes import ui_router

log = logging.getLogger(__name__)

JSON = "application/json"
# Admission runs on the event loop. Measured with bench/bench_admission.py: the core is CPU-bound and
# sub-millisecond, and a thread hop costs as much or more CPU per request than it saves (the GIL
# serialises the work anyway). The native Rego engine is also bound to the thread that built it, so
# with policies loaded a thread pool cannot evaluate them at all. I/O inside the core
# (SubjectAccessReview) is cached and bounded by the deadline it is given.
OFFLOAD_DEFAULT = False
OFFLOAD_THREADS = 8


# Everything else raised by admission becomes an answer per onError.
_NOT_OURS_TO_CATCH = (KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit)


class AdmissionCore(Protocol):
    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    def validate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    async def validate_async(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...


class LoadState(Protocol):
    @property
    def loaded(self) -> bool: ...


class ServingRuntime(Protocol):
    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> LoadState: ...

    @property
    def admission(self) -> AdmissionCore: ...


# What the server runs for its whole life: background tasks (policies/kernel/background.py), and serving
# certificates polled for renewal, which become `certificate-reload` tasks reloading on the serving loop.
BackgroundTask = Task | ReloadableCertificate


def _status_body(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}
    )


class _Disconnected(Exception):
    """The caller went away before sending its whole body."""


def _header(scope: Mapping[str, Any], name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


async def read_limited_body(scope: Mapping[str, Any], receive: Receive, limit: int) -> bytes | None:
    """The request body, or None when it is (or claims to be) larger than `limit` bytes; raises
    `_Disconnected` when the caller goes away first."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _query_value(scope: Mapping[str, Any], name: str) -> str | None:
    raw = scope.get("query_string") or b""
    if not raw:
        return None
    for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        if key == name:
            return value
    return None


class AdmissionEndpoint:
    """One of /mutate and /validate."""

    def __init__(
        self,
        runtime: ServingRuntime,
        name: str,
        mutating: bool,
        executor: ThreadPoolExecutor | None,
        authenticator: CallerAuthenticator | None = None,
        lane: LargeLane | None = None,
    ):
        self.runtime = runtime
        # Shared by both endpoints of a worker: one large review judged at a time, whichever it asks.
        self.lane = lane
        self.authenticator = authenticator or CallerAuthenticator(runtime.config.authentication)
        self.name = name
        self.mutating = mutating
        self.executor = executor
        self._duration = metrics.ADMISSION_DURATION.labels(name)
        # Counter children per (allowed, mode): `labels()` takes a lock and builds a key on every call.
        self._answered: dict[tuple[bool, str], Counter] = {}

    def _answered_counter(self, allowed: bool, mode: str) -> Counter:
        counter = self._answered.get((allowed, mode))
        if counter is None:
            counter = metrics.ADMISSION_REQUESTS.labels(self.name, "true" if allowed else "false", mode)
            self._answered[(allowed, mode)] = counter
        return counter

    def _decide(self) -> Callable[..., Outcome]:
        admission = self.runtime.admission
        return admission.mutate if self.mutating else admission.validate

    def _on_error(self, admission_request: AdmissionRequest, config: Config) -> Literal["allow", "deny"]:
        """`/validate` never turns an error into the admission of a GPU pod or a pod with KGWE intent;
        `limits.onError` applies to `/mutate` and to pods that ask nothing of KGWE."""
        if not self.mutating and fails_closed(admission_request):
            return "deny"
        return config.limits.on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The endpoint as a plain ASGI app: `KgweApp` hands it POSTs to its path before any middleware
        or routing runs (their cost is per request, and this answer never needs them)."""
        status, body = await self.answer(scope, receive)
        headers = [(b"content-length", str(len(body)).encode())]
        if body:
            headers.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def answer(self, scope: Mapping[str, Any], receive: Receive) -> tuple[int, bytes]:
        """The HTTP status and body for one call of this endpoint."""
        started = time.perf_counter()
        config = self.runtime.config
        # Before the body is read: an unauthenticated caller costs nothing and changes nothing.
        caller = self.authenticator.check(scope, self.name)
        if caller.refused:
            message = f"the {self.name} endpoint only answers the API server: {caller.reason}"
            return 401, _status_body(401, "Unauthorized", message)
        try:
            body = await read_limited_body(scope, receive, config.limits.max_request_bytes)
        except _Disconnected:
            # The caller went away (or the server's body timeout closed it): nothing to answer.
            log.debug("%s: client disconnected before sending the whole body", self.name)
            metrics.ADMISSION_ERRORS.labels(self.name, "disconnected").inc()
            return 400, b""
        if body is None:
            metrics.ADMISSION_ERRORS.labels(self.name, "too_large").inc()
            message = f"AdmissionReview larger than the limit of {config.limits.max_request_bytes} bytes"
            return 413, _status_body(413, "RequestEntityTooLarge", message)
        budget = budget_seconds(config.limits.deadline_seconds, _query_value(scope, "timeout"))
        try:
            if self.lane is not None and self.lane.takes(body):
                admission_request, outcome = await self._large(body, caller.authenticated, budget, config)
            else:
                admission_request = decode_review(body, authenticated=caller.authenticated)
                outcome = await self._outcome(admission_request, budget, config)
        except BadReview as exc:
            metrics.ADMISSION_ERRORS.labels(self.name, "bad_request").inc()
            return 400, _status_body(400, "BadRequest", str(exc))
        try:
            review = render_review(admission_request.uid, admission_request.api_version, outcome, self.mutating)
        except Exception as exc:
            log.exception("%s: rendering the response for uid=%s failed", self.name, admission_request.uid)
            metrics.ADMISSION_ERRORS.labels(self.name, "internal").inc()
            on_error = self._on_error(admission_request, config)
            outcome = failure_outcome("internal", on_error, f"internal error: {type(exc).__name__}")
            review = render_review(admission_request.uid, admission_request.api_version, outcome, self.mutating)
        content = orjson.dumps(review)
        events = getattr(self.runtime, "decision_events", None)
        if events is not None:  # queued, written by another thread: never on the request path
            events.offer(admission_request, outcome, self.mutating)
        self._answered_counter(outcome.allowed, config.mode).inc()
        self._duration.observe(time.perf_counter() - started)
        return 200, content

    async def _large(
        self, body: bytes, authenticated: bool, budget: float, config: Config
    ) -> tuple[AdmissionRequest, Outcome]:
        """A large body's review through the lane (webhook/server/large_lane.py). Its deadline runs from now:
        the wait for a turn is part of what the API server waits."""
        assert self.lane is not None
        deadline = time.monotonic() + budget
        async with self.lane.turn(deadline) as turn:
            admission_request = await self.lane.decode(body, authenticated=authenticated)
            left = deadline - time.monotonic()
            if turn and left > 0:
                metrics.LARGE_REVIEWS.labels(self.name, "taken").inc()
                return admission_request, await self._outcome(admission_request, left, config)
        metrics.LARGE_REVIEWS.labels(self.name, "none").inc()
        detail = f"no turn for a large review ({len(body)} bytes) within {budget:.3g}s"
        return admission_request, self._failure(admission_request, config, "deadline", detail)

    async def _outcome(self, admission_request: AdmissionRequest, budget: float, config: Config) -> Outcome:
        deadline = time.monotonic() + budget
        decide = partial(self._decide(), admission_request, deadline=deadline)
        failure: FailureKind
        try:
            if not self.mutating and self.executor is None:
                outcome = await self.runtime.admission.validate_async(admission_request, deadline=deadline)
            elif self.executor is None:
                outcome = decide()
            else:
                future = asyncio.get_running_loop().run_in_executor(self.executor, decide)
                outcome = await asyncio.wait_for(future, budget)
            if not isinstance(outcome, Outcome):
                raise TypeError(f"admission returned {type(outcome).__name__}, not an Outcome")
            return outcome
        except TimeoutError:
            failure, detail = "deadline", f"no decision within {budget:.3g}s"
        except _NOT_OURS_TO_CATCH:
            raise
        except BaseException as exc:  # also panics of native engines (pyo3's PanicException is a BaseException)
            log.exception("%s: admission of uid=%s failed", self.name, admission_request.uid)
            failure, detail = "internal", f"internal error: {type(exc).__name__}"
        return self._failure(admission_request, config, failure, detail)

    def _failure(self, admission_request: AdmissionRequest, config: Config, failure: FailureKind, detail: str
                 ) -> Outcome:
        """The answer when no decision was made: per onError, and fail closed on /validate (`_on_error`)."""
        on_error = self._on_error(admission_request, config)
        log.warning(
            "%s uid=%s %s/%s: %s; answering %s",
            self.name, admission_request.uid, admission_request.namespace, admission_request.name,
            detail, "allowed (onError=allow)" if on_error == "allow" else "refused (fail closed)",
        )
        metrics.ADMISSION_ERRORS.labels(self.name, failure).inc()
        return failure_outcome(failure, on_error, detail)


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
        return Response(multiproc_metrics.latest(), media_type=CONTENT_TYPE_LATEST)

    # The web UI's static pages, served at /ui/ (read once into memory).
    routers = [*([ui_router()] if ui else []), *extra_routers]
    for router in routers:
        app.include_router(router)
    app.router.routes.extend(api_index(routers))  # what the routers above serve under /api/v1/
    return app

