"""Reading a node as named steps (webhook/cluster/node_facts.py `NODE_STEPS`), and NVLink domain-size
inference where its module name says (webhook/cluster/nvlink_domain.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from policies.vocabulary.accelerator_types import AcceleratorTable
from policies.vocabulary.nodes import NodeView
from webhook.cluster.node_facts import NODE_STEPS, node_facts

TABLE = AcceleratorTable.build()
STALE_AFTER = 300.0


def _node(labels: dict[str, str], gpus: str = "8", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": labels, "annotations": annotations or {}},
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": gpus}},
    }


def test_steps_are_named_once_and_nvlink_inference_is_in_its_module() -> None:
    names = [name for name, _step in NODE_STEPS]
    assert len(names) == len(set(names))
    steps = dict(NODE_STEPS)
    assert steps["nvlink-domain"].__module__ == "webhook.cluster.nvlink_domain"
    assert steps["accelerator-type"].__module__ == "webhook.cluster.node_type"
    # The domain size is inferred from the type, board and GPU count: those steps come first.
    for earlier in ("accelerator-type", "gpu-count", "mig"):
        assert names.index(earlier) < names.index("nvlink-domain")


def test_without_the_agent_an_sxm_board_is_one_domain_and_pcie_cards_are_alone() -> None:
    sxm = node_facts(_node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}),
                     TABLE, STALE_AFTER)
    assert sxm.accelerator_type == "nvidia-h100-80gb" and sxm.type_source == "gfd"
    assert sxm.nvlink_domain_size == 8
    pcie = node_facts(_node({"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "4"}, gpus="4"),
                      TABLE, STALE_AFTER)
    assert pcie.gpu_count == 4 and pcie.nvlink_domain_size == 1


def test_mig_partitioned_gpus_offer_no_nvlink_domain() -> None:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.count": "56",
    }
    facts = node_facts(_node(labels, gpus="56"), TABLE, STALE_AFTER)
    assert facts.mig_profiles == {"1g.10gb": 56}
    assert facts.gpu_count == 8  # 56 slices, 7 per A100
    assert facts.nvlink_domain_size == 1


def test_a_stale_agent_is_not_trusted_for_its_domain_size_label() -> None:
    old = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "4", "kgwe.io/nvlink-domain-size": "4"}
    fresh = node_facts(_node(labels, gpus="4"), TABLE, STALE_AFTER)
    assert fresh.nvlink_domain_size == 4
    document = (
        '{"version": 1, "timestamp": "' + old + '", "acceleratorType": "nvidia-l4-24gb", "gpus": '
        '[{"index": 0, "uuid": "GPU-0", "product": "NVIDIA L4", "acceleratorType": "nvidia-l4-24gb", '
        '"memoryMiB": 23034}]}'
    )
    stale = node_facts(_node(labels, gpus="4", annotations={"kgwe.io/topology": document}), TABLE, STALE_AFTER)
    assert stale.topology_stale
    assert any("stale" in note for note in stale.notes)
    assert stale.nvlink_domain_size == 1  # inferred from the PCIe board, not the agent's old label


def test_a_node_read_through_its_view_gives_the_same_facts_as_its_dict() -> None:
    node = _node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
    node["spec"] = {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "unschedulable": True}
    from_view = node_facts(NodeView(node), TABLE, STALE_AFTER)
    assert from_view == node_facts(node, TABLE, STALE_AFTER)
    assert from_view.unschedulable and [t.key for t in from_view.taints] == ["nvidia.com/gpu"]


def test_unquoted_label_values_of_a_yaml_node_still_count() -> None:
    # A YAML directory's node may say `nvidia.com/gpu.count: 8`; the label means 8, not "no label".
    node = _node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = 8  # type: ignore[assignment]
    facts = node_facts(node, TABLE, STALE_AFTER)
    assert facts.labels["nvidia.com/gpu.count"] == "8" and facts.gpu_count == 8


def test_malformed_node_parts_read_as_empty() -> None:
    node: dict[str, Any] = {
        "metadata": {"name": "odd", "labels": ["not", "a", "map"]},
        "spec": {"taints": {"key": "x"}},
        "status": {"allocatable": [], "capacity": {"cpu": "4", "nvidia.com/gpu": "many"}},
    }
    facts = node_facts(node, TABLE, STALE_AFTER)
    assert facts.name == "odd" and facts.labels == {} and facts.taints == ()
    assert facts.allocatable == {"cpu": 4} and not facts.has_gpus
