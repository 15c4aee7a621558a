"""The gang controller's pass plans on a snapshot at least as new as the change that woke it, taken from the store's
background rebuild (shared with admission and the quota pass, issue 36) rather than one forced per pass: a gang's
last member, stored a moment ago, releases the gang in that pass, not at the next tick."""

from __future__ import annotations

from gang_support import (
    GangApiServer,
    admit,
    api,  # noqa: F401  (fixture)
    cliques,
    gang_apiserver,  # noqa: F401  (fixture)
    member,
    replica,
    with_nodes,
)
from kubernetes import client as k8s_client

from webhook.cluster.model import object_key


def test_the_pass_woken_by_a_gangs_last_member_plans_with_it(
    gang_apiserver: GangApiServer, api: k8s_client.ApiClient  # noqa: F811
) -> None:
    with_nodes(gang_apiserver, cliques(4))
    cluster = replica(gang_apiserver, api)
    controller = cluster.controller()
    cluster.create(member("w-0", "llm", 3))
    cluster.create(member("w-1", "llm", 3))
    assert controller.reconcile_once() == []
    cluster.store.min_rebuild_interval = 0.3  # snapshots rebuilt in the background from here, as `kgwe serve` does
    last = admit(cluster.runtime, member("w-2", "llm", 3))
    assert last.allowed, last.message
    stale = cluster.store.snapshot()
    gang_apiserver.put("Pod", last.pod)
    gang_apiserver.wait_for(lambda: "ml/w-2" in {object_key(p) for p in cluster.store.objects("Pod")})
    assert cluster.store.snapshot() is stale and "ml/w-2" not in stale.pods  # admission's, until the rebuild
    assert [action.kind for action in controller.reconcile_once()] == ["release"]
    assert cluster.gated() == set()
