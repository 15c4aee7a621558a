"""Who may scrape the agent's `/metrics` (SPEC section 13): a Kubernetes identity allowed `get` on it.

As kube-rbac-proxy does, and as `kgwe serve` guards its own `/metrics` (webhook/server/read_auth.py, which
the agent may not import: this is the agent's own copy of the one question it asks): the caller sends
`Authorization: Bearer <token>`; a TokenReview (authentication.k8s.io/v1) says who it is, a
SubjectAccessReview (authorization.k8s.io/v1, with the user's uid, groups and extra) whether it may `get`
the non-resource URL `/metrics`. The agent never reads a token itself: any token the API server accepts
works (a service account's, `kubectl create token`, OIDC).

Bounded: the answer (allowed, 401 or 403) is reused for seconds, keyed by a SHA-256 of the token (the token
itself is never kept or logged), in a table of at most `max_entries` (oldest out first), so a flood of
made-up tokens costs reviews but no memory; a failure is never cached. One check makes one attempt per
review, both within one deadline (`timeout`): a slow API server is a 503 (fail closed), never the series.
How many checks run at once is the server's connection cap (agent/metrics_http.py).

Blocking (the kubernetes client is synchronous): runs in the metrics server's connection threads.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kgwe.agent.metrics")

METRICS_PATH = "/metrics"
# Seconds an answer is reused: a revoked token or a removed binding keeps working this long at most. A refusal
# is remembered less, so that a binding made just after a failed scrape is taken soon.
ALLOWED_TTL_SECONDS = 10.0
REFUSED_TTL_SECONDS = 5.0
MAX_CACHE_ENTRIES = 4096
TIMEOUT_SECONDS = 5.0  # both reviews of one check
MAX_TOKEN_BYTES = 16_384
TOKEN_HINT = (
    "the agent's /metrics needs a Kubernetes token allowed 'get' on the non-resource URL /metrics: send it as "
    "'Authorization: Bearer TOKEN' (for example Prometheus' service account token)"
)


@dataclass(frozen=True)
class Verdict:
    """200: serve the series; 401, 403 or 503: the refusal, with what to tell the caller."""

    code: int
    message: str = ""

    @property
    def result(self) -> str:
        """The verdict as the requests counter names it."""
        return _RESULTS.get(self.code, "unavailable")


_RESULTS = {200: "allowed", 401: "unauthenticated", 403: "forbidden"}
UNAUTHENTICATED = Verdict(401, TOKEN_HINT)


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer` header; None when there is none or it is not one."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_BYTES or " " in token:
        return None
    return token


def token_key(token: str) -> str:
    """What the cache is keyed by: a hash, so a heap dump or a debug print shows no token."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


class MetricsAuth:
    """`check(authorization_header)`: the Verdict for one request to /metrics."""

    def __init__(
        self,
        authentication: Any,  # kubernetes.client.AuthenticationV1Api
        authorization: Any,  # kubernetes.client.AuthorizationV1Api
        *,
        timeout: float = TIMEOUT_SECONDS,
        allowed_ttl: float = ALLOWED_TTL_SECONDS,
        refused_ttl: float = REFUSED_TTL_SECONDS,
        max_entries: int = MAX_CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.authentication = authentication
        self.authorization = authorization
        self.timeout = timeout
        self.allowed_ttl = allowed_ttl
        self.refused_ttl = refused_ttl
        self.max_entries = max_entries
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()
        self._lock = threading.Lock()
        self._failing: str | None = None

    @classmethod
    def for_api_client(cls, api_client: Any, **options: Any) -> MetricsAuth:
        """Reviews through `api_client`'s API server (its credentials, refreshed as it refreshes them), one
        attempt per call: the client's retries would outlast the deadline."""
        from kubernetes import client

        configuration = copy.copy(api_client.configuration)
        configuration.retries = False
        bounded = client.ApiClient(configuration)
        return cls(client.AuthenticationV1Api(bounded), client.AuthorizationV1Api(bounded), **options)

    def cache_size(self) -> int:
        with self._lock:
            return len(self._cache)

    def check(self, header: str | None) -> Verdict:
        token = bearer_token(header)
        if token is None:
            return UNAUTHENTICATED
        key = token_key(token)
        cached = self._cached(key)
        if cached is not None:
            return cached
        deadline = self.clock() + self.timeout
        try:
            user = self._authenticate(token, deadline)
            verdict = Verdict(401, f"the API server did not accept the token; {TOKEN_HINT}") if user is None else (
                Verdict(200) if self._allowed(user, deadline)
                else Verdict(403, f'user "{user.username}" may not get {METRICS_PATH}'))
        except _Unavailable as exc:
            self._report(str(exc))
            return Verdict(503, f"cannot check the caller: {exc}")
        self._report(None)
        self._remember(key, verdict)
        return verdict

    # -- the cache ------------------------------------------------------------------------------------------

    def _cached(self, key: str) -> Verdict | None:
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._cache[key]
                return None
            return entry[1]

    def _remember(self, key: str, verdict: Verdict) -> None:
        ttl = self.allowed_ttl if verdict.code == 200 else self.refused_ttl
        with self._lock:
            self._cache[key] = (self.clock() + ttl, verdict)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    # -- the reviews ----------------------------------------------------------------------------------------

    def _left(self, deadline: float, what: str) -> float:
        left = deadline - self.clock()
        if left <= 0:
            raise _Unavailable(f"{what}: the API server did not answer within {self.timeout:g}s")
        return left

    def _authenticate(self, token: str, deadline: float) -> _User | None:
        from kubernetes.client import V1TokenReview, V1TokenReviewSpec

        review = V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                               spec=V1TokenReviewSpec(token=token))
        left = self._left(deadline, "TokenReview")
        try:
            answer = self.authentication.create_token_review(review, _request_timeout=left)
        except Exception as exc:  # ApiException, urllib3 timeouts and connection errors alike
            # Never the token in a message: only what went wrong.
            raise _Unavailable(f"TokenReview failed: {_short(exc)}") from exc
        status = answer.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        user = status.user
        return _User(str(user.username), str(user.uid or ""), [str(g) for g in user.groups or []],
                     {str(k): [str(v) for v in values or []] for k, values in (user.extra or {}).items()})

    def _allowed(self, user: _User, deadline: float) -> bool:
        from kubernetes.client import V1NonResourceAttributes, V1SubjectAccessReview, V1SubjectAccessReviewSpec

        spec = V1SubjectAccessReviewSpec(
            user=user.username, uid=user.uid or None, groups=user.groups or None, extra=user.extra or None,
            non_resource_attributes=V1NonResourceAttributes(path=METRICS_PATH, verb="get"),
        )
        review = V1SubjectAccessReview(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview", spec=spec)
        left = self._left(deadline, "SubjectAccessReview")
        try:
            answer = self.authorization.create_subject_access_review(review, _request_timeout=left)
        except Exception as exc:
            raise _Unavailable(f"SubjectAccessReview failed: {_short(exc)}") from exc
        status = answer.status
        return bool(status is not None and status.allowed and not status.denied)

    def _report(self, problem: str | None) -> None:
        """One warning when the reviews start failing (or fail differently), one line when they answer again."""
        with self._lock:
            before, self._failing = self._failing, problem
        if problem is not None and problem != before:
            log.warning("/metrics refused (503) while the API server does not answer the reviews: %s", problem)
        elif problem is None and before is not None:
            log.info("/metrics: the API server answers the reviews again")


@dataclass(frozen=True)
class _User:
    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class _Unavailable(Exception):
    """The API server gave no answer in time (down, slow, refused the agent's own call)."""


def _short(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        return f"{type(exc).__name__}: HTTP {status} {getattr(exc, 'reason', None) or ''}".strip()
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
