"""What an authenticated reader may see: SubjectAccessReviews (authorization.k8s.io/v1), answers reused briefly.

Asked the way kube-rbac-proxy and metrics-server ask: a non-resource URL and the verb of the request for
`/metrics` (`get /metrics`), resource attributes for the read API (`list pods` in a namespace, or in every
namespace; `list nodes`). The review carries the user's whole userInfo (uid, groups, extra), so every
authorizer of the cluster answers as it would for the user itself.

Blocking (the kubernetes client is synchronous): callers run it off the event loop.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook.server.token_review import Identity, ReviewUnavailable

if TYPE_CHECKING:  # the client is imported where a cluster is asked, not for a directory
    from kubernetes.client import AuthorizationV1Api

# The API server's own delegated authorizer caches allowed and denied answers 10 s by default.
TTL_SECONDS = 10.0
MAX_CACHE_ENTRIES = 16_384
TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Question:
    """One thing asked about a user: a verb on a resource (in a namespace, or "" for all) or a URL."""

    verb: str
    resource: str = ""
    group: str = ""
    namespace: str = ""
    url: str = ""  # a non-resource URL; then `resource` is unused

    def __str__(self) -> str:
        if self.url:
            return f"{self.verb} {self.url}"
        where = f" in namespace {self.namespace}" if self.namespace else " in every namespace"
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}" + (
            where if self.resource not in CLUSTER_SCOPED else "")


CLUSTER_SCOPED = frozenset({"nodes", "namespaces"})


def metrics_question(path: str = "/metrics") -> Question:
    return Question("get", url=path)


def list_pods(namespace: str = "") -> Question:
    return Question("list", "pods", namespace=namespace)


LIST_NODES = Question("list", "nodes")


class AccessReviewer:
    """`allowed(identity, question)`: the API server's answer, cached per (user, question)."""

    def __init__(
        self,
        api: AuthorizationV1Api,
        *,
        ttl: float = TTL_SECONDS,
        max_entries: int = MAX_CACHE_ENTRIES,
        timeout: float = TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl = ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self.clock = clock
        self._cache: OrderedDict[tuple[Identity, Question], tuple[float, bool]] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, identity: Identity, question: Question) -> bool | None:
        """The cached answer, or None when a review is needed."""
        key = (identity, question)
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._cache[key]
                return None
            return entry[1]

    def allowed(self, identity: Identity, question: Question) -> bool:
        answer = self.cached(identity, question)
        if answer is not None:
            return answer
        answer = self._review(identity, question)
        with self._lock:
            self._cache[(identity, question)] = (self.clock() + self.ttl, answer)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return answer

    def _review(self, identity: Identity, question: Question) -> bool:
        from kubernetes.client import (
            V1NonResourceAttributes,
            V1ResourceAttributes,
            V1SubjectAccessReview,
            V1SubjectAccessReviewSpec,
        )

        spec = V1SubjectAccessReviewSpec(
            user=identity.username,
            uid=identity.uid or None,
            groups=list(identity.groups) or None,
            extra=identity.extra_dict() or None,
        )
        if question.url:
            spec.non_resource_attributes = V1NonResourceAttributes(path=question.url, verb=question.verb)
        else:
            spec.resource_attributes = V1ResourceAttributes(
                verb=question.verb, group=question.group, resource=question.resource,
                namespace=question.namespace or None,
            )
        review = V1SubjectAccessReview(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview", spec=spec)
        try:
            answer = self.api.create_subject_access_review(review, _request_timeout=self.timeout)
        except Exception as exc:  # ApiException, urllib3 timeouts and connection errors alike
            status = getattr(exc, "status", None)
            detail = f"HTTP {status}" if status is not None else (str(exc).splitlines() or [""])[0][:200]
            raise ReviewUnavailable(f"SubjectAccessReview ({question}) failed: {type(exc).__name__}: {detail}") from exc
        status = answer.status
        return bool(status is not None and status.allowed and not status.denied)
