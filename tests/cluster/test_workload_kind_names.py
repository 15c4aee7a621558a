"""The cluster model names the built-in workload kinds without importing the workloads wing: the names must
stay those of the wing's table, in its order (the store keeps exactly these before the configuration's)."""

from __future__ import annotations

from webhook.cluster.workloads import WORKLOAD_KINDS
from webhook.workload_kinds import BUILTIN_KINDS


def test_the_model_keeps_the_kinds_of_the_built_in_table() -> None:
    assert tuple(spec.kind for spec in BUILTIN_KINDS) == WORKLOAD_KINDS
