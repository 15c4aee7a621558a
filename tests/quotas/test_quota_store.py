"""One compare-and-swap contract for every QuotaStore, and what KubeQuotaStore sends to the API server."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest
import yaml
from quota_fixtures import ROOT, TenantQuotaEndpoint, charge, unique_name

from policies.quota.check import QuotaService
from policies.quota.kube_store import KubeQuotaStore
from policies.quota.model import LimitKey
from policies.quota.store import (
    QuotaStatus,
    QuotaUnavailable,
    Reservation,
    UsedEntry,
    status_from_json,
    status_to_json,
)

H100 = "nvidia-h100-80gb"


def tenant_quota(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "kgwe.io/v1alpha1",
        "kind": "TenantQuota",
        "metadata": {"name": name},
        "spec": {"tenant": name, "namespaces": [name], "limits": [{"acceleratorType": H100, "gpus": gpus}]},
    }


def sample_status() -> QuotaStatus:
    return QuotaStatus(
        reservations=(
            Reservation("r1", "team-a/train", "uid-1", LimitKey("acceleratorType", H100), Decimal(4),
                        Decimal(320 * 1024**3), 1_800_000_000.25, 1_800_000_060.25),
            Reservation("r2", "team-a/nb", None, LimitKey("profile", "small-mig"), Decimal(3) / 7, None,
                        1_800_000_001.0, 1_800_000_061.0),
        ),
        used=(UsedEntry(LimitKey("acceleratorType", H100), Decimal(12), Decimal(960 * 1024**3)),),
    )


def test_compare_and_swap_contract(store_backend: Any) -> None:
    name = unique_name("cas")
    store_backend.add(tenant_quota(name))
    store, other_replica = store_backend.new_store(), store_backend.new_store()
    first = store.read(name)
    assert first.status.reservations == ()
    assert store.write(name, sample_status(), first.version)
    # The writer that read before that write loses and changes nothing.
    assert not other_replica.write(name, QuotaStatus(), first.version)
    second = other_replica.read(name)
    assert second.version != first.version
    assert second.status.used == sample_status().used
    [whole, fraction] = second.status.reservations
    assert whole == sample_status().reservations[0]
    assert fraction.gpus == pytest.approx(Decimal(3) / 7, abs=Decimal("1e-12"))
    assert other_replica.write(name, QuotaStatus(), second.version)
    assert store.read(name).status == QuotaStatus()


def test_status_fits_the_chart_crd_schema() -> None:
    # The API server prunes fields its structural schema does not list: everything we write must be listed.
    crd = yaml.safe_load((ROOT / "charts" / "kgwe" / "crds" / "tenantquotas.kgwe.io.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    written = status_to_json(sample_status())
    for field in ("reservations", "used"):
        allowed = set(schema[field]["items"]["properties"])
        for item in written[field]:
            assert set(item) <= allowed, f"{field}: {set(item) - allowed} would be pruned"
            assert isinstance(item["gpus"], int | str)  # int-or-string in the schema


def test_kube_store_sends_the_read_object_back_with_its_resource_version(
    tenantquota_endpoint: TenantQuotaEndpoint,
) -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    tenantquota_endpoint.add({**tenant_quota("team-a"), "status": ready})
    store = tenantquota_endpoint.new_store()
    read = store.read("team-a")
    assert store.write("team-a", sample_status(), read.version)
    stored = tenantquota_endpoint.objects["team-a"]
    assert stored["status"]["conditions"] == ready["conditions"]  # not ours: kept
    assert stored["status"]["reservations"][1]["gpus"] == "0.4285714285714285714285714286"
    assert stored["status"]["reservations"][0] == {
        "id": "r1", "namespace": "team-a", "name": "train", "uid": "uid-1", "acceleratorType": H100, "gpus": 4,
        "gpuMemory": "320Gi", "created": "2027-01-15T08:00:00.250000Z", "expires": "2027-01-15T08:01:00.250000Z",
    }
    assert [m for m, _ in tenantquota_endpoint.requests] == ["GET", "PUT"]


def test_kube_store_reports_a_missing_quota_or_an_unreachable_server(
    tenantquota_endpoint: TenantQuotaEndpoint,
) -> None:
    store = tenantquota_endpoint.new_store()
    with pytest.raises(QuotaUnavailable, match="not found"):
        store.read("gone")
    unreachable = TenantQuotaEndpoint()
    unreachable.server.server_close()  # never served: connections are refused
    with pytest.raises(QuotaUnavailable):
        unreachable.new_store().read("team-a")


def test_kube_store_times_out_at_the_deadline(tenantquota_endpoint: TenantQuotaEndpoint) -> None:
    tenantquota_endpoint.add(tenant_quota("team-a"))
    tenantquota_endpoint.delay_seconds = 1.0
    service = QuotaService(tenantquota_endpoint.new_store(), lambda _: None)
    with pytest.raises(QuotaUnavailable):
        service.check(charge("team-a", "p", 1, H100), "team-a", [tenant_quota("team-a")], [], dry_run=False,
                      deadline=time.monotonic() + 0.2)


def test_no_api_call_for_pods_that_hit_no_limit(tenantquota_endpoint: TenantQuotaEndpoint) -> None:
    quota = tenant_quota("team-a")
    tenantquota_endpoint.add(quota)
    service = QuotaService(KubeQuotaStore(tenantquota_endpoint.api()), lambda _: None)
    for pod in (charge("team-a", "l4", 2, "nvidia-l4-24gb"), charge("team-a", "p", 1, "nvidia-l4-24gb", profile="x")):
        assert service.check(pod, "team-a", [quota], [], dry_run=False, deadline=None).allowed
    assert tenantquota_endpoint.requests == []
    # A dry run reads but never writes.
    assert service.check(charge("team-a", "h", 1, H100), "team-a", [quota], [], dry_run=True, deadline=None).allowed
    assert [m for m, _ in tenantquota_endpoint.requests] == ["GET"]


def test_status_entries_read_alike_however_often_and_whatever_came_before() -> None:
    """Reservations are converted once and remembered: equal entries share a conversion, but an entry is
    never read as another that is merely equal as a Python key (1, 1.0 and True), and one holding a
    value that cannot be a key (a list) is still converted."""
    written = status_to_json(sample_status())
    for _ in range(3):
        assert status_from_json(written).reservations[0] == sample_status().reservations[0]
    whole = dict(written["reservations"][0], gpus=1)
    assert status_from_json({"reservations": [whole]}).reservations[0].gpus == Decimal(1)
    assert status_from_json({"reservations": [dict(whole, gpus=True)]}).reservations == ()
    assert status_from_json({"reservations": [dict(whole, gpus=1.0)]}).reservations[0].gpus == Decimal(1)
    # A value that cannot be a memo key is converted all the same (here, as ever, to its text).
    assert status_from_json({"reservations": [dict(whole, acceleratorType=[H100])]}).reservations[0].key == LimitKey(
        "acceleratorType", str([H100]))
    without_id = {k: v for k, v in whole.items() if k != "id"}
    assert status_from_json({"reservations": [without_id]}).reservations[0].id == ""
    assert status_from_json({"reservations": [dict(whole, id=None)]}).reservations[0].id == "None"
    # What the caller does with the document it got does not change the next one.
    written["reservations"][0]["gpus"] = 99
    assert status_to_json(sample_status())["reservations"][0]["gpus"] == 4
