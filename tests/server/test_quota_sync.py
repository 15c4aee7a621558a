"""The quota reconciliation task of `kgwe serve`, on the real runtime over examples/cluster."""

from __future__ import annotations

from prometheus_client import REGISTRY
from server_support import CLUSTER, CONFIG

from webhook.config import load_config
from webhook.runtime import build_runtime
from webhook.server.quota_sync import QuotaSync


def test_reconciliation_writes_used_into_each_quota_status_and_publishes_metrics() -> None:
    runtime = build_runtime(load_config(CONFIG), CLUSTER, load_policies=False)
    assert runtime.quotas is not None
    quotas = list(runtime.store.snapshot().tenant_quotas)
    assert quotas
    QuotaSync(runtime, is_leader=lambda: True).sync_once()
    statuses = {name: runtime.quotas.store.read(name).status for name in quotas}
    assert any(status.used for status in statuses.values())
    tenants = {
        sample.labels["tenant"]
        for family in REGISTRY.collect() if family.name == "kgwe_quota_limit"
        for sample in family.samples
    }
    assert {"team-a", "ml-research"} <= tenants
