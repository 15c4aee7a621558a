"""Quota test fixtures: the example cluster's quotas, prices, and where KubeQuotaStore writes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from quota_fixtures import (
    ROOT,
    FileBackend,
    InMemoryBackend,
    MappedBackend,
    RealCluster,
    TenantQuotaEndpoint,
    load_objects,
)


@pytest.fixture
def example_quotas() -> list[dict[str, Any]]:
    return load_objects("tenant-quotas.yaml")


@pytest.fixture
def price_of() -> Callable[[str], Decimal | None]:
    prices = yaml.safe_load((ROOT / "examples" / "config.yaml").read_text())["pricing"]["perGPUHour"]

    def lookup(type_id: str) -> Decimal | None:
        return Decimal(str(prices[type_id])) if type_id in prices else None

    return lookup


@pytest.fixture
def tenantquota_endpoint() -> Iterator[TenantQuotaEndpoint]:
    endpoint = TenantQuotaEndpoint()
    endpoint.start()
    yield endpoint
    endpoint.stop()


@pytest.fixture(params=["in-memory", "file", "mapped", "http-endpoint", "real-api-server"])
def store_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[InMemoryBackend | FileBackend | MappedBackend | TenantQuotaEndpoint | RealCluster]:
    """The stores under one contract: in memory, KubeQuotaStore against the in-test HTTP endpoint, and
    KubeQuotaStore against the real API server of KGWE_TEST_KUBECONFIG (skipped without it)."""
    if request.param == "in-memory":
        yield InMemoryBackend()
        return
    if request.param == "file":
        yield FileBackend(tmp_path)
        return
    if request.param == "mapped":
        yield MappedBackend(tmp_path)
        return
    if request.param == "http-endpoint":
        endpoint = TenantQuotaEndpoint()
        endpoint.start()
        yield endpoint
        endpoint.stop()
        return
    kubeconfig = os.environ.get("KGWE_TEST_KUBECONFIG")
    if not kubeconfig:
        pytest.skip("KGWE_TEST_KUBECONFIG is not set: no real API server to run against")
    cluster = RealCluster(kubeconfig)
    cluster.ensure_crd()
    try:
        yield cluster
    finally:
        cluster.cleanup()
