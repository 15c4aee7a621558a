"""Who may read: in a cluster, the read API (`/api/v1/...`) and `/metrics` need a Kubernetes identity.

As kube-rbac-proxy and metrics-server do it: the caller sends `Authorization: Bearer <token>`; a
TokenReview says who it is (webhook/server/token_review.py) and SubjectAccessReviews say what it may see
(webhook/server/read_access.py):

- `/metrics`: `get` on the non-resource URL `/metrics` (the ClusterRole the chart ships for scrapers).
- The read API: any authenticated user reads the hardware profiles (the catalogue every user picks from;
  the chart lets every authenticated user `use` them). The node view and profile proposals need `list
  nodes`. Tenants, costs, gangs, workloads and pods are shown for the namespaces the user may `list pods`
  in; `list pods` in every namespace shows everything.

No token or a token the API server rejects: 401; authenticated but not allowed: 403; the API server not
answering within the bound: 503 (fail closed, never the data). The reviews run on this gate's own small
thread pool, never on the event loop, so /mutate and /validate (which this gate never sees) keep being
answered whatever the API server does; a bounded number of requests may wait for reviews, more get 503 at
once. /healthz, /readyz and the UI's static files (which hold no data) stay open.

Outside a cluster (a YAML directory, no API to ask) there is no gate: the server is meant for loopback.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson
from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from webhook.server.read_access import LIST_NODES, AccessReviewer, Question, list_pods, metrics_question
from webhook.server.token_review import Identity, ReviewUnavailable, TokenReviewer

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
API_PREFIX = "/api/"
READER_KEY = "kgwe.reader"  # the ASGI scope key a guarded request's Reader is under
# Longest wait for the reviews of one request, whatever the API server does.
TIMEOUT_SECONDS = 5.0
REVIEW_THREADS = 4
# Requests waiting for a review at once; more are answered 503 without queueing (a flood of made-up tokens
# costs a bounded number of TokenReviews in flight and no memory).
MAX_WAITING = 64
MAX_TOKEN_BYTES = 16_384
TOKEN_HINT = (
    "this KGWE needs a Kubernetes token: send it as 'Authorization: Bearer TOKEN' "
    "(for example the output of: kubectl create token SERVICE_ACCOUNT -n NAMESPACE)"
)

READ_REQUESTS = Counter(
    "kgwe_read_requests_total",
    "Requests to the read API and /metrics by verdict: authenticated (api), allowed (metrics), unauthenticated, "
    "forbidden, unavailable.",
    ["endpoint", "result"],
)

T = TypeVar("T")


class ReadRefused(Exception):
    """The answer instead of the data: 401, 403 or 503, as a Kubernetes Status."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def response(self) -> Response:
        body = orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "message": self.message, "reason": self.reason, "code": self.code})
        headers = {"Cache-Control": "no-store"}
        if self.code == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="kgwe"'
        return Response(body, self.code, media_type="application/json", headers=headers)


def bearer_token(scope: Mapping[str, Any]) -> str | None:
    """The token of an `Authorization: Bearer` header, None when there is none or it is not one."""
    for key, value in scope.get("headers") or ():
        if key.lower() != b"authorization":
            continue
        scheme, _, token = bytes(value).partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token or len(token) > MAX_TOKEN_BYTES or b" " in token:
            return None
        return token.decode("latin-1")
    return None


class Reader:
    """One authenticated caller of the read API, with what it may see asked as the routes need it."""

    def __init__(self, identity: Identity, gate: ReadAuth) -> None:
        self.identity = identity
        self._gate = gate

    async def may(self, question: Question) -> bool:
        return (await self._gate.ask(self.identity, [question]))[0]

    async def require(self, question: Question) -> None:
        if not await self.may(question):
            raise ReadRefused(403, "Forbidden", f'user "{self.identity.username}" may not {question}')

    async def visible_namespaces(self, namespaces: Iterable[str]) -> frozenset[str] | None:
        """The namespaces among `namespaces` whose pods the user may list; None: every namespace."""
        if await self.may(list_pods()):
            return None
        wanted = sorted({n for n in namespaces if n})
        answers = await self._gate.ask(self.identity, [list_pods(n) for n in wanted])
        return frozenset(n for n, allowed in zip(wanted, answers, strict=True) if allowed)


class ReadAuth:
    """The gate in front of the read API and /metrics (see the module's text)."""

    def __init__(
        self,
        tokens: TokenReviewer,
        access: AccessReviewer,
        *,
        timeout: float = TIMEOUT_SECONDS,
        threads: int = REVIEW_THREADS,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.tokens = tokens
        self.access = access
        self.timeout = timeout
        self.max_waiting = max_waiting
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="kgwe-read-auth")
        self._waiting = 0
        self._waiting_lock = threading.Lock()

    @classmethod
    def for_cluster(cls, api_client: Any) -> ReadAuth:
        """Reviews through `api_client`'s API server, one attempt per call, each within TIMEOUT_SECONDS."""
        from kubernetes import client as k8s

        from policies.kernel.kube_client import deadline_api_client

        bounded = deadline_api_client(api_client.configuration)
        return cls(TokenReviewer(k8s.AuthenticationV1Api(bounded)), AccessReviewer(k8s.AuthorizationV1Api(bounded)))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def guards(path: str) -> bool:
        return path == METRICS_PATH or path.startswith(API_PREFIX)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Answer the request with `app` once its caller may see it, or with the refusal."""
        path = str(scope.get("path", ""))
        endpoint = "metrics" if path == METRICS_PATH else "api"
        try:
            reader = await self.reader(scope)
            if path == METRICS_PATH:
                verb = "get" if scope.get("method") in ("GET", "HEAD") else str(scope.get("method", "")).lower()
                await reader.require(metrics_question(path) if verb == "get" else Question(verb, url=path))
        except ReadRefused as refused:
            READ_REQUESTS.labels(endpoint, _RESULTS.get(refused.code, "unavailable")).inc()
            await refused.response()(scope, receive, send)
            return
        # The API's routes may still refuse (403) what the identity may not see.
        READ_REQUESTS.labels(endpoint, "allowed" if endpoint == "metrics" else "authenticated").inc()
        scope[READER_KEY] = reader
        await app(scope, receive, send)

    async def reader(self, scope: Mapping[str, Any]) -> Reader:
        token = bearer_token(scope)
        if token is None:
            raise ReadRefused(401, "Unauthorized", TOKEN_HINT)
        found, identity = self.tokens.cached(token)
        if not found:
            identity = (await self._off_loop([functools.partial(self.tokens.authenticate, token)]))[0]
        if identity is None:
            raise ReadRefused(401, "Unauthorized", f"the API server did not accept the token; {TOKEN_HINT}")
        return Reader(identity, self)

    async def ask(self, identity: Identity, questions: Sequence[Question]) -> list[bool]:
        """The answer to every question, from the cache where it can, the rest asked in parallel."""
        answers: list[bool | None] = [self.access.cached(identity, q) for q in questions]
        missing = [i for i, answer in enumerate(answers) if answer is None]
        if missing:
            asked = await self._off_loop([functools.partial(self.access.allowed, identity, questions[i])
                                          for i in missing])
            for i, answer in zip(missing, asked, strict=True):
                answers[i] = answer
        return [bool(a) for a in answers]

    async def _off_loop(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Every call on the review threads, all within `timeout`; 503 when any fails or time runs out."""
        with self._waiting_lock:
            if self._waiting >= self.max_waiting:
                raise ReadRefused(503, "ServiceUnavailable", "too many requests waiting for the API server's "
                                  "reviews; try again")
            self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            futures = [loop.run_in_executor(self._executor, call) for call in calls]
            try:
                return list(await asyncio.wait_for(asyncio.gather(*futures), self.timeout))
            except ReviewUnavailable as exc:
                log.warning("read access refused, the API server did not answer: %s", exc)
                raise ReadRefused(503, "ServiceUnavailable", f"cannot check the caller: {exc}") from exc
            except TimeoutError as exc:
                log.warning("read access refused: the API server's reviews took longer than %.3gs", self.timeout)
                raise ReadRefused(503, "ServiceUnavailable",
                                  f"cannot check the caller: the API server did not answer within {self.timeout:g}s"
                                  ) from exc
            except Exception as exc:  # whatever else goes wrong asking, the answer is a refusal, never a 500
                log.exception("read access refused: checking the caller failed")
                raise ReadRefused(503, "ServiceUnavailable",
                                  f"cannot check the caller: {type(exc).__name__}") from exc
        finally:
            with self._waiting_lock:
                self._waiting -= 1


_RESULTS = {401: "unauthenticated", 403: "forbidden"}


# -- what the routes call -----------------------------------------------------------------------------------


def reader_of(request: Request) -> Reader | None:
    """The request's Reader; None where no gate runs (outside a cluster): the caller sees everything."""
    reader = request.scope.get(READER_KEY)
    return reader if isinstance(reader, Reader) else None


async def visible_namespaces(request: Request, namespaces: Iterable[str]) -> Callable[[str], bool] | None:
    """A test for the namespaces whose pods, tenants and costs the caller may see; None: every namespace."""
    reader = reader_of(request)
    if reader is None:
        return None
    visible = await reader.visible_namespaces(namespaces)
    return None if visible is None else visible.__contains__


async def require_node_reader(request: Request) -> None:
    """Node facts are cluster-scoped: the caller must be allowed to list nodes."""
    reader = reader_of(request)
    if reader is not None:
        await reader.require(LIST_NODES)


def refusals_answered(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A route whose ReadRefused becomes its Status answer (403, 503) instead of a 500."""

    @functools.wraps(endpoint)
    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ReadRefused as refused:
            READ_REQUESTS.labels("api", _RESULTS.get(refused.code, "unavailable")).inc()
            return refused.response()

    return answered
