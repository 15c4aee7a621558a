"""The costs document's rows as the build makes them (webhook/spend/report.py): each row's set of given fields is
shared with every row given the same ones (memory at 150,000 pods), and reads as pydantic's own would: the same
dumps, with and without `exclude_unset`, as rows validated one by one; a row set after the build raises."""

from __future__ import annotations

from pathlib import Path

import pytest
from spend_cluster import pick_now, write_cluster

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.spend.service import SpendService

NOW = pick_now()


def test_rows_read_as_rows_validated_one_by_one(tmp_path: Path) -> None:
    directory, config_file = write_cluster(tmp_path, NOW)
    runtime = build_runtime(load_config(config_file), directory)
    doc = SpendService(lambda: runtime.config, runtime.store.snapshot, clock=lambda: NOW).window_costs("30d")
    levels = (doc.tenants, doc.namespaces, doc.workloads, doc.runs, doc.pod_costs)
    assert all(levels), "the cluster has rows at every level"
    for rows in levels:
        for row in rows:
            alone = type(row).model_validate(row.model_dump(exclude_unset=True))
            assert row.model_fields_set == alone.model_fields_set
            assert row.model_dump(exclude_unset=True) == alone.model_dump(exclude_unset=True)
            assert row.model_dump(mode="json") == alone.model_dump(mode="json") and row == alone
        assert all(row.model_fields_set is rows[0].model_fields_set for row in rows if
                   row.model_fields_set == rows[0].model_fields_set)
    assert doc.tenants[0].model_fields_set is not doc.pod_costs[0].model_fields_set  # not given the same fields
    assert "namespace" not in doc.tenants[0].model_fields_set
    with pytest.raises(TypeError):
        doc.pod_costs[0].cost = "0.00"
