"""Deadlines: the API server's `?timeout=` as Go durations, and admission on a thread pool answered at the deadline."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import orjson
import pytest
from server_support import GPU_POD, FakeRuntime, RunningServer, admission_review, start_server

from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from webhook.config import Config, Limits
from webhook.server.app import create_app
from webhook.server.deadline import budget_seconds, parse_go_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5s", 1.5), ("2h", 7200.0), ("250us", 0.00025)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "10x", "ten seconds", "10s garbage", "-5s"])
def test_invalid_go_durations(text: str) -> None:
    assert parse_go_duration(text) is None


def test_budget_is_the_smaller_of_ours_and_the_api_servers_minus_a_margin() -> None:
    assert budget_seconds(2.5, None) == 2.5
    assert budget_seconds(2.5, "30s") == 2.5
    assert budget_seconds(2.5, "1s") == pytest.approx(0.8)
    assert budget_seconds(2.5, "10s") == 2.5
    assert budget_seconds(20.0, "10s") == pytest.approx(9.5)
    assert budget_seconds(2.5, "nonsense") == 2.5
    assert budget_seconds(2.5, "10ms") > 0  # never zero or negative


@pytest.fixture
def offloaded(runtime: FakeRuntime, cert_paths: CertificatePaths) -> Iterator[RunningServer]:
    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key)
    yield from start_server(
        lambda: create_app(runtime, ui=False, certificate=tls, background=[tls], offload=True), cert_paths, tls
    )


CPU_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "team-a"},
           "spec": {"containers": [{"name": "web", "image": "nginx"}]}}


@pytest.mark.parametrize(
    ("endpoint", "pod", "on_error", "allowed"),
    [
        # /validate never admits a GPU pod it could not judge, whatever onError says ...
        ("validate", GPU_POD, "allow", False),
        ("validate", GPU_POD, "deny", False),
        # ... onError keeps its meaning for pods that ask nothing of KGWE, and for /mutate.
        ("validate", CPU_POD, "allow", True),
        ("validate", CPU_POD, "deny", False),
        ("mutate", GPU_POD, "allow", True),
        ("mutate", GPU_POD, "deny", False),
    ],
)
def test_a_core_that_hangs_is_answered_at_the_deadline(
    offloaded: RunningServer, runtime: FakeRuntime, endpoint: str, pod: dict, on_error: str, allowed: bool
) -> None:
    runtime.config = Config(limits=Limits.model_validate({"deadlineSeconds": 0.2, "onError": on_error}))
    runtime.admission.delay = 60.0  # the core hangs until woken below
    started = time.monotonic()
    with offloaded.client() as client:
        response = client.post(f"/{endpoint}?timeout=10s", content=orjson.dumps(admission_review(pod)))
        waited = time.monotonic() - started
        runtime.admission.delay = 0.0
        runtime.admission.wake.set()
        metrics = client.get("/metrics").text
    # The deadline (0.2 s), not the hung core (60 s) nor the API server's 10 s: wide for a busy machine.
    assert response.status_code == 200 and waited < 8
    answer = response.json()["response"]
    assert answer["allowed"] is allowed
    if not allowed:
        assert answer["status"]["code"] == 504 and "0.2s" in answer["status"]["message"]
    assert f'kgwe_admission_errors_total{{endpoint="{endpoint}",kind="deadline"}}' in metrics


def test_offloaded_admission_answers_normally(offloaded: RunningServer) -> None:
    pod = copy.deepcopy(GPU_POD)
    with offloaded.client() as client:
        response = client.post("/mutate", content=orjson.dumps(admission_review(pod)))
    assert response.json()["response"]["patchType"] == "JSONPatch"


def test_the_remembered_budget_is_the_one_each_query_gives() -> None:
    # The endpoint remembers the budget per (configured deadline, query string): asked again, in any order and
    # after other queries, it is what the query's own `timeout` gives under that deadline.
    from webhook.server.admission_endpoint import _budget, _query_value
    from webhook.server.deadline import budget_seconds

    queries = (b"timeout=10s", b"timeout=1s", b"timeout=200ms", b"", b"dryRun&timeout", b"timeout=1%30s",
               b"timeout=0s", b"timeout=bad", b"x=1&timeout=2m", b"timeout=30s&timeout=1s")
    for _round in range(2):
        for configured in (8.0, 0.5, 12.0):
            for raw in (*queries, *reversed(queries)):
                expected = budget_seconds(configured, _query_value({"query_string": raw}, "timeout"))
                assert _budget(configured, raw) == expected, (configured, raw)


def test_the_timeout_parameter_is_read_as_parse_qsl_reads_it() -> None:
    # The endpoint reads a query without `%` or `+` by splitting it (the API server sends `timeout=10s`); every
    # query gives what parse_qsl gives, whichever way it is read.
    from urllib.parse import parse_qsl

    from webhook.server.admission_endpoint import _query_value

    def by_parse_qsl(raw: bytes) -> str | None:
        return next((v for k, v in parse_qsl(raw.decode("latin-1"), keep_blank_values=True) if k == "timeout"), None)

    for raw in (b"timeout=10s", b"dryRun&timeout", b"&&timeout=&timeout=3s", b"x=1&timeout=5s", b"timeout=1%30s",
                b"=3&timeout=2=3", b"timeout+=4", b"time%6Fut=7s", b"timeouT=5", b"timeout=a+b", b"", b"\xfftimeout=1"):
        assert _query_value({"query_string": raw}, "timeout") == by_parse_qsl(raw), raw
