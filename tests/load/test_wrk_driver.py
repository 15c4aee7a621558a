"""The wrk driver of bench/bench_wrk.py (issue 17's side-by-side is measured with wrk): every request carries
a uid of its own, answers are checked, refusals counted. Skipped where wrk is not installed; no speed is
asserted."""

from __future__ import annotations

import pytest
from bench_wrk import drive, wrk_path
from soak import kgwe_serve, request_bodies

pytestmark = pytest.mark.skipif(wrk_path() is None, reason="wrk is not installed (apt-get install wrk)")


def test_wrk_drives_kgwe_serve_and_checks_every_answer() -> None:
    bodies = [b for b in request_bodies() if b[0].startswith("/validate")]
    with kgwe_serve(workers=1) as server:
        result = drive(server.port, bodies, 1, warmup=1, threads=1)
        # The same bodies to a path that answers 404, not an AdmissionReview: every answer is an error.
        wrong = drive(server.port, [("/nowhere", bodies[0][1])], 1, warmup=1, threads=1)
    assert result["requests"] > 0 and result["errors"] == 0
    # Some example pods are refused by design (a missing type, an infeasible NVLink ask...): counted apart.
    assert 0 < result["refused_share"] < 1
    # The bytes each way: a request's is the mean of the bodies cycled through; an answer's what was read back,
    # an AdmissionReview with the request's uid (the shortest example answer is well over 100 bytes).
    assert result["request_bytes"] == sum(len(body) for _path, body in bodies) / len(bodies)
    assert 100 < result["response_bytes"] < 4096
    assert wrong["errors"] == wrong["requests"] > 0
