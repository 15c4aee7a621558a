"""Who holds a bearer token: the API server's TokenReview (authentication.k8s.io/v1), answers reused briefly.

The same delegated authentication kube-rbac-proxy and metrics-server use: KGWE never reads or verifies a
token itself, it asks the API server, so a token `kubectl create token` made, a service account's token
and an OIDC token all work as they do against the API server. Answers are cached by a hash of the token
(the token itself is never kept), for a few seconds and in a bounded table: a page that polls costs one
review per token per TTL, and a flood of made-up tokens cannot grow the memory.

Blocking (the kubernetes client is synchronous): callers run it off the event loop.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the client is imported where a cluster is asked, not for a directory
    from kubernetes.client import AuthenticationV1Api


# Seconds an answer is reused. A revoked token keeps working this long at most; a rejected one is
# remembered a little less, so that a token made just after a failed try is taken soon.
AUTHENTICATED_TTL_SECONDS = 10.0
REJECTED_TTL_SECONDS = 5.0
MAX_CACHE_ENTRIES = 4096
TIMEOUT_SECONDS = 5.0


class ReviewUnavailable(Exception):
    """The API server gave no answer (down, slow, refused KGWE's own call): callers fail closed."""


@dataclass(frozen=True)
class Identity:
    """An authenticated user as the API server describes it (the userInfo of a TokenReview)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    def extra_dict(self) -> dict[str, list[str]]:
        return {key: list(values) for key, values in self.extra}


def token_key(token: str) -> str:
    """What the cache is keyed by: a hash, so a heap dump or a debug print shows no token."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def _identity(user: Any) -> Identity | None:
    if user is None or not getattr(user, "username", None):
        return None
    extra = getattr(user, "extra", None) or {}
    return Identity(
        username=str(user.username),
        uid=str(getattr(user, "uid", None) or ""),
        groups=tuple(sorted({str(g) for g in getattr(user, "groups", None) or []})),
        extra=tuple(sorted((str(k), tuple(str(v) for v in values or [])) for k, values in extra.items())),
    )


class TokenReviewer:
    """`authenticate(token)`: the Identity behind it, None when the API server says it is not valid."""

    def __init__(
        self,
        api: AuthenticationV1Api,
        *,
        authenticated_ttl: float = AUTHENTICATED_TTL_SECONDS,
        rejected_ttl: float = REJECTED_TTL_SECONDS,
        max_entries: int = MAX_CACHE_ENTRIES,
        timeout: float = TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `api` should sit on policies.kernel.kube_client.deadline_api_client: no retry past `timeout`.
        self.api = api
        self.authenticated_ttl = authenticated_ttl
        self.rejected_ttl = rejected_ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, Identity | None]] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, token: str) -> tuple[bool, Identity | None]:
        """(found, identity) from the cache alone: lets the caller skip a thread hop."""
        key = token_key(token)
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return False, None
            if entry[0] <= self.clock():
                del self._cache[key]
                return False, None
            return True, entry[1]

    def authenticate(self, token: str) -> Identity | None:
        found, identity = self.cached(token)
        if found:
            return identity
        identity = self._review(token)
        ttl = self.authenticated_ttl if identity is not None else self.rejected_ttl
        with self._lock:
            self._cache[token_key(token)] = (self.clock() + ttl, identity)
            # Oldest written first out: bounded whatever the callers send.
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return identity

    def _review(self, token: str) -> Identity | None:
        from kubernetes.client import V1TokenReview, V1TokenReviewSpec

        review = V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                               spec=V1TokenReviewSpec(token=token))
        try:
            answer = self.api.create_token_review(review, _request_timeout=self.timeout)
        except Exception as exc:  # ApiException, urllib3 timeouts and connection errors alike
            # Never the token in a message: only what went wrong.
            raise ReviewUnavailable(f"TokenReview failed: {type(exc).__name__}: {_short(exc)}") from exc
        status = answer.status
        if status is None or not status.authenticated:
            return None
        return _identity(status.user)


def _short(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return str(exc).splitlines()[0][:200] if str(exc) else ""
