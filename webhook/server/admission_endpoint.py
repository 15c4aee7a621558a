"""The admission endpoints /mutate and /validate: AdmissionReview in, AdmissionReview out, around the pure
admission core.

Each is a plain ASGI app that reads the raw body and answers with orjson bytes; `KgweApp` (app.py) hands it
POSTs to its path before FastAPI's middleware and routing run. The connection's protocol answers most POSTs
without the ASGI cycle at all (admission_protocol.py): it reads the body itself and calls `answer_read`.
Whatever happens inside admission, the API server gets an AdmissionReview back before its timeout: deadline
and internal errors are answered per `limits.onError`, never with a 500 or a hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl

import orjson
from prometheus_client import Counter
from starlette.types import Receive, Scope, Send

from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest, BadReview, decode_review
from webhook.admission.response import render_review
from webhook.config import Config
from webhook.server import metrics
from webhook.server.callers import CallerAuthenticator, CallerCheck
from webhook.server.deadline import budget_seconds
from webhook.server.fallback import FailureKind, failure_outcome
from webhook.server.large_lane import LargeLane

log = logging.getLogger(__name__)

# Everything else raised by admission becomes an answer per onError.
_NOT_OURS_TO_CATCH = (KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit)


class AdmissionCore(Protocol):
    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    def validate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    async def validate_async(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome: ...

    def fails_closed(self, request: AdmissionRequest) -> bool: ...


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


# The API server sends the same query (`timeout=10s`) on every call of a webhook: the budget it gives under a
# configured deadline is worked out once per distinct pair (both are all it depends on), not parsed per request.
@lru_cache(maxsize=64)
def _budget(configured: float, query: bytes) -> float:
    """`budget_seconds` of the configured deadline and the `timeout` of the query string `query`."""
    return budget_seconds(configured, _query_value({"query_string": query}, "timeout"))


def _query_value(scope: Mapping[str, Any], name: str) -> str | None:
    raw = scope.get("query_string") or b""
    if not raw:
        return None
    text = raw.decode("latin-1")
    if "%" not in text and "+" not in text:
        # Nothing to unquote (the API server sends `timeout=10s`): parse_qsl's answer without its machinery.
        for piece in text.split("&"):
            key, _equals, value = piece.partition("=")
            if piece and key == name:
                return value
        return None
    for key, value in parse_qsl(text, keep_blank_values=True):
        if key == name:
            return value
    return None


def answer_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of an answer of `body` (both paths write them: here, and admission_protocol.py)."""
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    return headers


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
        if not self.mutating and self.runtime.admission.fails_closed(admission_request):
            return "deny"
        return config.limits.on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The endpoint as a plain ASGI app: `KgweApp` hands it POSTs to its path before any middleware
        or routing runs (their cost is per request, and this answer never needs them)."""
        status, body = await self.answer(scope, receive)
        await send({"type": "http.response.start", "status": status, "headers": answer_headers(body)})
        await send({"type": "http.response.body", "body": body})

    async def answer(self, scope: Mapping[str, Any], receive: Receive) -> tuple[int, bytes]:
        """The HTTP status and body for one call of this endpoint."""
        started = time.perf_counter()
        config = self.runtime.config
        # Before the body is read: an unauthenticated caller costs nothing and changes nothing.
        caller = self.caller(scope)
        if caller.refused:
            return self._unauthorized(caller)
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
        return await self._answer_body(scope, body, caller.authenticated, config, started)

    @property
    def max_request_bytes(self) -> int:
        return self.runtime.config.limits.max_request_bytes

    def caller(self, scope: Mapping[str, Any]) -> CallerCheck:
        """Who calls (counted in kgwe_admission_callers_total): decided before the body is read."""
        return self.authenticator.check(scope, self.name)

    async def answer_read(self, scope: Mapping[str, Any], body: bytes, caller: CallerCheck) -> tuple[int, bytes]:
        """`answer` for a body the connection's protocol has read whole, its declared length within
        `limits.maxRequestBytes`, from a `caller` it checked before reading it (a refused caller's body is
        not kept: webhook/server/admission_protocol.py)."""
        started = time.perf_counter()
        if caller.refused:
            return self._unauthorized(caller)
        return await self._answer_body(scope, body, caller.authenticated, self.runtime.config, started)

    def _unauthorized(self, caller: CallerCheck) -> tuple[int, bytes]:
        message = f"the {self.name} endpoint only answers the API server: {caller.reason}"
        return 401, _status_body(401, "Unauthorized", message)

    async def _answer_body(self, scope: Mapping[str, Any], body: bytes, authenticated: bool, config: Config,
                           started: float) -> tuple[int, bytes]:
        budget = _budget(config.limits.deadline_seconds, scope.get("query_string") or b"")
        try:
            if self.lane is not None and self.lane.takes(body):
                admission_request, outcome = await self._large(body, authenticated, budget, config)
            else:
                admission_request = decode_review(body, authenticated=authenticated)
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
        failure: FailureKind
        try:
            if not self.mutating and self.executor is None:
                outcome = await self.runtime.admission.validate_async(admission_request, deadline=deadline)
            elif self.executor is None:
                outcome = self._decide()(admission_request, deadline=deadline)
            else:
                decide = partial(self._decide(), admission_request, deadline=deadline)  # only where a thread runs it
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
