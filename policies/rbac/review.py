"""The in-cluster Authorizer: a SubjectAccessReview per question, answers reused for a few seconds.

The review carries the request's whole userInfo (username, uid, groups, extra), so that authorizers
other than RBAC (webhook authorizers, scopes carried in `extra`) answer as they would for the user.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import AuthorizationV1Api, V1ResourceAttributes, V1SubjectAccessReview, V1SubjectAccessReviewSpec

from policies.api import WouldBlock
from policies.kernel.kube_client import deadline_api_client
from policies.rbac.evaluator import API_GROUP, USE, AuthorizationUnavailable, Resource

_CacheKey = tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], str, str, str]

MAX_CACHE_ENTRIES = 10_000
DEFAULT_TIMEOUT_SECONDS = 5.0


def _extra(user: Mapping[str, Any]) -> dict[str, list[str]]:
    raw = user.get("extra") or {}
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): [str(x) for x in v] if isinstance(v, list | tuple) else [str(v)] for k, v in raw.items()}


class SubjectAccessReviewer:
    def __init__(
        self,
        api: AuthorizationV1Api | None = None,
        *,
        cache_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `api` should be built on policies.kernel.kube_client.deadline_api_client so that the deadline holds.
        self.api = api if api is not None else AuthorizationV1Api(deadline_api_client())
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[_CacheKey, tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def can_use(
        self,
        user: Mapping[str, Any],
        resource: Resource,
        name: str,
        namespace: str,
        *,
        deadline: float | None = None,
        wait: bool = True,
    ) -> bool:
        """`deadline` is a `time.monotonic()` value; raises AuthorizationUnavailable when no answer comes by then.
        With `wait=False` only a cached answer is given; otherwise WouldBlock."""
        username = str(user.get("username") or "")
        uid = str(user.get("uid") or "")
        groups = sorted({str(g) for g in user.get("groups") or []})
        extra = _extra(user)
        key: _CacheKey = (
            username,
            uid,
            tuple(groups),
            tuple(sorted((k, tuple(v)) for k, v in extra.items())),
            resource,
            name,
            namespace,
        )
        now = self.clock()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        if not wait:
            raise WouldBlock("a SubjectAccessReview is needed")
        allowed = self._review(username, uid, groups, extra, resource, name, namespace, deadline)
        with self._lock:
            if len(self._cache) >= MAX_CACHE_ENTRIES:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            self._cache[key] = (now + self.cache_seconds, allowed)
        return allowed

    def _review(
        self,
        username: str,
        uid: str,
        groups: list[str],
        extra: dict[str, list[str]],
        resource: Resource,
        name: str,
        namespace: str,
        deadline: float | None,
    ) -> bool:
        timeout = DEFAULT_TIMEOUT_SECONDS
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise AuthorizationUnavailable("the admission deadline passed before the SubjectAccessReview")
        review = V1SubjectAccessReview(
            api_version="authorization.k8s.io/v1",
            kind="SubjectAccessReview",
            spec=V1SubjectAccessReviewSpec(
                user=username or None,
                uid=uid or None,
                groups=groups or None,
                extra=extra or None,
                resource_attributes=V1ResourceAttributes(
                    group=API_GROUP, resource=resource, name=name, namespace=namespace or None, verb=USE
                ),
            ),
        )
        try:
            answer = self.api.create_subject_access_review(review, _request_timeout=timeout)
        except Exception as exc:  # ApiException, urllib3 timeouts and connection errors alike
            raise AuthorizationUnavailable(f"SubjectAccessReview for {resource}/{name} failed: {exc}") from exc
        status = answer.status
        return bool(status is not None and status.allowed and not status.denied)
