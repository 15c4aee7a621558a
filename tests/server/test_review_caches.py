"""The read gate's caches (webhook/server/token_review.py, read_access.py): keyed by a hash of the token,
short-lived, bounded, failures never remembered; and the bearer header as it is parsed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from webhook.server.read_access import AccessReviewer, list_pods, metrics_question
from webhook.server.read_auth import bearer_token
from webhook.server.token_review import Identity, ReviewUnavailable, TokenReviewer, token_key


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeAuthentication:
    """AuthenticationV1Api.create_token_review over a token table; `down` makes it raise."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.asked: list[str] = []
        self.down = False

    def create_token_review(self, review: Any, _request_timeout: float) -> Any:
        self.asked.append(review.spec.token)
        if self.down:
            raise ConnectionError("refused")
        name = self.users.get(review.spec.token)
        user = SimpleNamespace(username=name, uid="u1", groups=["b", "a"], extra={"scope": ["x"]}) if name else None
        return SimpleNamespace(status=SimpleNamespace(authenticated=name is not None, user=user))


class FakeAuthorization:
    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.asked: list[Any] = []

    def create_subject_access_review(self, review: Any, _request_timeout: float) -> Any:
        self.asked.append(review.spec)
        attributes = review.spec.resource_attributes or review.spec.non_resource_attributes
        key = getattr(attributes, "path", None) or f"{attributes.resource}/{attributes.namespace or '*'}"
        return SimpleNamespace(status=SimpleNamespace(allowed=key in self.allowed, denied=False))


def test_a_token_is_reviewed_once_per_ttl_and_kept_only_as_a_hash() -> None:
    clock = Clock()
    api = FakeAuthentication({"tok": "alice"})
    reviewer = TokenReviewer(api, authenticated_ttl=10, rejected_ttl=5, clock=clock)  # type: ignore[arg-type]
    identity = reviewer.authenticate("tok")
    assert identity == Identity("alice", "u1", ("a", "b"), (("scope", ("x",)),))
    assert reviewer.authenticate("tok") == identity and api.asked == ["tok"]
    assert list(reviewer._cache) == [token_key("tok")] and "tok" not in repr(reviewer._cache)
    clock.now += 10
    reviewer.authenticate("tok")
    assert api.asked == ["tok", "tok"]
    assert reviewer.authenticate("bad") is None
    clock.now += 4
    assert reviewer.authenticate("bad") is None and api.asked.count("bad") == 1
    clock.now += 1
    reviewer.authenticate("bad")
    assert api.asked.count("bad") == 2


def test_the_token_cache_is_bounded() -> None:
    api = FakeAuthentication({})
    reviewer = TokenReviewer(api, max_entries=3, clock=Clock())  # type: ignore[arg-type]
    for n in range(10):
        reviewer.authenticate(f"made-up-{n}")
    assert len(reviewer._cache) == 3


def test_a_failed_review_raises_and_is_not_remembered() -> None:
    api = FakeAuthentication({"tok": "alice"})
    reviewer = TokenReviewer(api, clock=Clock())  # type: ignore[arg-type]
    api.down = True
    with pytest.raises(ReviewUnavailable) as raised:
        reviewer.authenticate("tok")
    assert "tok" not in str(raised.value)
    api.down = False
    assert reviewer.authenticate("tok") is not None


def test_access_answers_are_cached_per_user_and_question_and_bounded() -> None:
    clock = Clock()
    api = FakeAuthorization({"pods/team-a", "/metrics"})
    reviewer = AccessReviewer(api, ttl=10, max_entries=2, clock=clock)  # type: ignore[arg-type]
    alice = Identity("alice", "u1", ("team-a",))
    assert reviewer.allowed(alice, list_pods("team-a")) is True
    assert reviewer.allowed(alice, list_pods("team-a")) is True and len(api.asked) == 1
    assert api.asked[0].user == "alice" and api.asked[0].groups == ["team-a"] and api.asked[0].uid == "u1"
    assert reviewer.allowed(alice, list_pods()) is False
    assert reviewer.allowed(alice, metrics_question()) is True
    url = api.asked[-1].non_resource_attributes
    assert (url.path, url.verb) == ("/metrics", "get")
    assert len(reviewer._cache) == 2
    clock.now += 10
    reviewer.allowed(alice, metrics_question())
    assert len(api.asked) == 4


@pytest.mark.parametrize(("header", "token"), [
    (b"Bearer abc.def", "abc.def"),
    (b"bearer  abc ", "abc"),
    (b"Basic dXNlcjpwYXNz", None),
    (b"Bearer", None),
    (b"Bearer a b", None),
    (b"Bearer " + b"x" * 20_000, None),
])
def test_the_bearer_header(header: bytes, token: str | None) -> None:
    assert bearer_token({"headers": [(b"authorization", header)]}) == token
    assert bearer_token({"headers": []}) is None
