"""AMD GPUs behind AMD's device plugin: nodes typed from the labeller's labels (current, `beta.` and the
oldest counted form), pods placed on exactly the intended nodes, vendors kept apart, quotas and costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_dirs import add_amd_nodes, copy_example_cluster, plant
from placement_support import Admit

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.capacity import Inventory
from webhook.inventory.nodes import nodes_view
from webhook.runtime import Runtime

AMD_TOLERATION = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def amd_runtime(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    root = tmp_path_factory.mktemp("amd")
    cluster = add_amd_nodes(copy_example_cluster(root / "cluster"))
    plant(
        cluster,
        "quota-amd.yaml",
        {
            "apiVersion": "kgwe.io/v1alpha1",
            "kind": "TenantQuota",
            "metadata": {"name": "team-amd"},
            "spec": {"tenant": "team-amd", "namespaces": ["team-amd"], "limits": [
                {"acceleratorType": "amd-mi300x-192gb", "gpus": 6},
            ]},
        },
        {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-amd", "labels": {"kgwe.io/tenant": "team-amd"}},
        },
        {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "running", "namespace": "team-amd"},
            "spec": {"nodeName": "mi300x-02", "containers": [
                {"name": "main", "image": "rocm/pytorch", "resources": {"limits": {"amd.com/gpu": "4"}}},
            ]},
            "status": {"phase": "Running"},
        },
    )
    config_path = root / "config.yaml"
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "config.yaml").read_text())
    config["pricing"]["perGPUHour"]["amd-mi300x-192gb"] = 3.20
    config["pricing"]["perGPUHour"]["amd-mi325x-256gb"] = 3.90
    config_path.write_text(yaml.safe_dump(config))
    return build_runtime(load_config(config_path), cluster)


@pytest.fixture(scope="module")
def admit(amd_runtime: Runtime) -> Admit:
    return Admit(amd_runtime)


def amd_pod(gpus: int, annotations: dict[str, str] | None = None, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rocm", "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": {
            "tolerations": [AMD_TOLERATION],
            "containers": [{
                "name": "main", "image": "rocm/pytorch:latest",
                "resources": {"limits": {"amd.com/gpu": str(gpus), "memory": "64Gi"}},
            }],
        },
    }


def test_labeller_labels_type_every_amd_node(amd_runtime: Runtime) -> None:
    model = amd_runtime.store.snapshot()
    seen = {n: (f.accelerator_type, f.type_source, f.gpu_count, f.gpu_memory_mib) for n, f in model.nodes.items()
            if n.startswith("mi")}
    assert seen == {
        "mi300x-01": ("amd-mi300x-192gb", "amd-labeller", 8, 192 * 1024),
        "mi300x-02": ("amd-mi300x-192gb", "amd-labeller", 8, 192 * 1024),
        "mi325x-01": ("amd-mi325x-256gb", "amd-labeller", 8, 256 * 1024),
        "mi210-01": ("amd-mi210-64gb", "amd-labeller", 4, 64 * 1024),
    }
    assert model.types["amd-mi300x-192gb"].gpus_total == 16
    assert model.types["amd-mi300x-192gb"].max_gpus_exclusive_node == 8


def test_named_amd_type_lands_only_on_its_nodes(admit: Admit) -> None:
    final, _mutated, validated = admit.create(amd_pod(2, {"kgwe.io/accelerator": "amd-mi300x-192gb"}))
    assert validated.allowed, validated.message
    assert final["spec"]["nodeSelector"] == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}
    assert admit.landing_nodes(final) == {"mi300x-01", "mi300x-02"}
    notes = final["metadata"]["annotations"]
    assert notes["kgwe.io/accelerator-type"] == "amd-mi300x-192gb"
    assert notes["kgwe.io/hourly-cost"] == "6.4"


def test_ordered_amd_types_across_label_generations(admit: Admit) -> None:
    final, _m, validated = admit.create(amd_pod(1, {"kgwe.io/accelerator": "amd-mi325x-256gb,amd-mi300x-192gb"}))
    assert validated.allowed, validated.message
    assert admit.landing_nodes(final) == {"mi300x-01", "mi300x-02", "mi325x-01"}
    assert final["metadata"]["annotations"]["kgwe.io/accelerator-type"] == "amd-mi325x-256gb,amd-mi300x-192gb"


def test_gpu_memory_picks_amd_types_with_enough(admit: Admit) -> None:
    final, _m, validated = admit.create(amd_pod(1, {"kgwe.io/gpu-memory": "200Gi"}))
    assert validated.allowed, validated.message
    assert admit.landing_nodes(final) == {"mi325x-01"}


def test_plain_amd_pod_is_charged_as_amd_and_never_as_nvidia(admit: Admit) -> None:
    final, _mutated, validated = admit.create(amd_pod(2))
    assert validated.allowed, validated.message
    notes = final["metadata"]["annotations"]
    assert notes["kgwe.io/accelerator-type"] == "amd-mi210-64gb,amd-mi300x-192gb,amd-mi325x-256gb"
    assert "nodeSelector" not in final["spec"]  # no intent: placement unchanged
    assert notes["kgwe.io/hourly-cost"] == "7.8"  # the dearest type it may land on


def test_vendor_mismatch_is_refused_by_name(admit: Admit) -> None:
    pod = amd_pod(1, {"kgwe.io/accelerator": "nvidia-h100-80gb"})
    _final, _m, validated = admit.create(pod)
    assert not validated.allowed
    assert "nvidia-h100-80gb: not a AMD GPU" in validated.message


def test_too_many_amd_gpus_names_the_largest_node(admit: Admit) -> None:
    _final, _m, validated = admit.create(amd_pod(9, {"kgwe.io/accelerator": "amd-mi300x-192gb"}))
    assert not validated.allowed
    assert "asks for 9 GPUs on one node; the most any amd-mi300x-192gb node has is 8" in validated.message


def test_amd_quota_counts_running_amd_pods(admit: Admit) -> None:
    ok = admit.create(amd_pod(2, {"kgwe.io/accelerator": "amd-mi300x-192gb"}, namespace="team-amd"))[2]
    assert ok.allowed, ok.message
    # 4 running of 6: four more wait behind the quota gate, told why; seven could never run.
    over = admit.create(amd_pod(4, {"kgwe.io/accelerator": "amd-mi300x-192gb"}, namespace="team-amd"))[2]
    assert over.allowed, over.message
    assert any("amd-mi300x-192gb 4 of 6 GPUs in use; this pod asks 4" in w for w in over.warnings), over.warnings
    never = admit.create(amd_pod(7, {"kgwe.io/accelerator": "amd-mi300x-192gb"}, namespace="team-amd"))[2]
    assert not never.allowed
    assert "amd-mi300x-192gb limit 6 GPUs, this pod asks 7" in never.message


def test_node_view_counts_amd_gpus_and_their_use(amd_runtime: Runtime) -> None:
    view = nodes_view(Inventory(amd_runtime.store.snapshot(), amd_runtime.config))
    rows = {row["name"]: row for row in view["nodes"]}
    assert rows["mi300x-01"]["acceleratorType"] == "amd-mi300x-192gb"
    assert rows["mi300x-01"]["gpus"] == 8
    assert rows["mi300x-01"]["used"] == {"amd.com/gpu": 4}
    types = {row["id"]: row for row in view["types"]}
    assert types["amd-mi300x-192gb"]["gpus"] == 16
    assert types["amd-mi300x-192gb"]["available"] == 8
