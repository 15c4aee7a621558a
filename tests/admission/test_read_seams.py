"""The read side's seams (webhook/read_seams.py, webhook/cluster/claim_charging.py) and the wings' controllers
(webhook/assembly.py `wing_controllers`): the assembly fills every slot with the wing's `reads.py`, and the
controllers' runner gets the wings' controllers from it (issue 34: only the assembly and the routes import a
wing)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.assembly import build_runtime, wing_controllers
from webhook.cluster.claim_charging import CLAIM_CHARGING
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.dra import charges as dra_charges
from webhook.gangs import reads as gang_reads
from webhook.ordered_seam import SeamNotFilled, SeamSlot
from webhook.quotas import reads as quota_reads
from webhook.read_seams import GANG_READS, QUOTA_READS, WORKLOAD_READS
from webhook.workload_kinds import KindTable, WorkloadShapeError, extract_templates
from webhook.workloads import reads as workload_reads


def test_the_assembly_fills_every_read_slot_with_the_wings_reads() -> None:
    # tests/conftest.py imports webhook.assembly, as the product does before anything is built.
    assert QUOTA_READS.value is quota_reads
    assert GANG_READS.value is gang_reads
    assert WORKLOAD_READS.value is workload_reads
    assert CLAIM_CHARGING.value is dra_charges


def test_a_slot_read_before_the_assembly_filled_it_says_so() -> None:
    with pytest.raises(SeamNotFilled, match=r"webhook\.assembly"):
        _ = SeamSlot[Any]("a wing's reads").value


def test_the_kind_table_is_the_one_the_runtime_admits_by() -> None:
    runtime = build_runtime(Config(), None, load_policies=False)
    kinds = WORKLOAD_READS.value.kind_table(runtime.admission.seams)
    assert kinds.lookup("batch", "Job") is not None


def test_a_count_out_of_range_reaches_the_read_side_as_a_shape_error() -> None:
    spec = KindTable.build().lookup("apps", "Deployment")
    assert spec is not None
    workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"replicas": -1, "template": {"spec": {"containers": []}}}}
    templates = extract_templates(workload, spec)
    with pytest.raises(WorkloadShapeError, match="replicas"):
        WORKLOAD_READS.value.pods_per_template(workload, spec, templates)


def test_the_wings_controllers_come_from_the_assembly_in_order_and_follow_the_configuration() -> None:
    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
    # A directory: no gang records to keep, no API to collect templates from.
    found = wing_controllers(store, Config(), None, lambda: True)
    assert [wing.name for wing in found] == ["quotas"]
    assert all(wing.task.leader_only for wing in found)
    changed = Config.model_validate({"excludedNamespaces": ["kube-system", "elsewhere"]})
    found[0].follow_config(changed)
    assert found[0].controller.config is changed
