"""What `/readyz` reports beyond "ready": problems of the parts that keep serving a degraded answer.

Readiness itself stays narrow (a cluster model loaded, a serving certificate): taking the webhook out of
its Service for a problem that has a defined degraded behaviour would turn that problem into the API
server's failurePolicy for every pod. The problems listed here are those degraded behaviours: a cluster
directory file refused while its last good version serves, a policy engine unreachable while its
policies follow `policies.failureMode`.
"""

from __future__ import annotations

from typing import Any


def readiness_problems(runtime: Any) -> list[str]:
    """One line per current problem of the runtime's cluster sources and policy engines.

    Duck-typed on purpose: the HTTP shell serves any runtime with a `store` (tests use small ones), and only
    the parts that can degrade expose `source_problems()` / `engine_problems()`.
    """
    problems: list[str] = []
    source_problems = getattr(runtime.store, "source_problems", None)
    if callable(source_problems):
        problems.extend(source_problems())
    engine_problems = getattr(getattr(runtime, "policies", None), "engine_problems", None)
    if callable(engine_problems):
        problems.extend(engine_problems())
    return problems
