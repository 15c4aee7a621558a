"""`kgwe audit` judges the GPU workloads of the cluster model as the validating webhook would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, copy_example_cluster, plant

from webhook.cluster.model import ClusterStore
from webhook.cluster.workloads import MAX_WORKLOADS_PER_KIND
from webhook.reports.commands import run
from webhook.workloads.kind import workloads_of


def deployment(name: str, namespace: str, gpus: str, **template_annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "managedFields": [{"manager": "kubectl"}]},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": template_annotations},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "1Gi"}}}]},
            },
        },
        "status": {"replicas": 3},
    }


def audit(capsys: pytest.CaptureFixture[str], cluster: Path, *argv: str) -> tuple[int, str]:
    status = run("audit", ["--cluster", str(cluster), "--config", str(EXAMPLE_CONFIG), *argv])
    return status, capsys.readouterr().out


def test_the_example_deployments_one_admitted_one_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = audit(capsys, EXAMPLE_CLUSTER, "-o", "json", "--exit-code")
    # examples/cluster/workloads.yaml: llm-serving is admitted; chat-h200 asks for H200s, which no node has.
    assert status == 1
    [refused] = [f for f in json.loads(out)["findings"] if f.get("kind")]
    assert (refused["kind"], refused["namespace"], refused["pod"], refused["result"]) == (
        "Deployment", "team-a", "chat-h200", "fail")
    assert refused["message"].startswith("spec.template: nvidia-h200-141gb: no such GPUs")


def test_a_refused_template_is_reported_with_its_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    # No node of the example has a V100: KGWE refuses the template.
    plant(cluster, "wl.yaml",
          deployment("old-gpus", "team-a", "1", **{"kgwe.io/accelerator": "nvidia-v100-16gb"}),
          deployment("fine", "team-a", "1"))
    status, out = audit(capsys, cluster, "-o", "json", "--exit-code")
    assert status == 1
    # Beside the example's own refused workload (chat-h200), the one planted: "fine" is admitted.
    found = [f for f in json.loads(out)["findings"] if f.get("kind")]
    assert sorted(f["pod"] for f in found) == ["chat-h200", "old-gpus"]
    [finding] = [f for f in found if f["pod"] == "old-gpus"]
    assert finding["kind"] == "Deployment" and finding["api_version"] == "apps/v1"
    assert (finding["namespace"], finding["pod"], finding["result"]) == ("team-a", "old-gpus", "fail")
    assert finding["message"].startswith("spec.template: ")
    assert "nvidia-v100-16gb" in finding["message"]

    status, out = audit(capsys, cluster)
    assert any(line.split()[:2] == ["team-a", "Deployment/old-gpus"] for line in out.splitlines()), out

    status, out = audit(capsys, cluster, "-o", "yaml")
    team_a = next(r for r in yaml.safe_load_all(out) if r["metadata"].get("namespace") == "team-a")
    resources = [res for r in team_a["results"] for res in r.get("resources", [])]
    assert {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "old-gpus"} in resources


def test_the_store_keeps_workloads_slimmed_and_bounded() -> None:
    from policies.vocabulary.accelerator_types import AcceleratorTable

    store = ClusterStore(AcceleratorTable.build(), workload_kinds=["Deployment", "Widget"])
    many = [deployment(f"d{i:05d}", "team-a", "1") for i in range(MAX_WORKLOADS_PER_KIND + 5)]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "x"}}
    store.replace_all([*many, widget, {**widget, "kind": "Gadget"}])
    model = store.snapshot(force=True)
    assert len([k for k in model.workloads if k.startswith("Deployment/")]) == MAX_WORKLOADS_PER_KIND
    assert "Widget/x/w" in model.workloads and not any(k.startswith("Gadget/") for k in model.workloads)
    kept = model.workloads["Deployment/team-a/d00000"]
    assert "status" not in kept and "managedFields" not in kept["metadata"]
    store.upsert(deployment("zzz", "team-a", "1"))  # over the bound: left out
    assert "Deployment/team-a/zzz" not in store.snapshot(force=True).workloads
    store.upsert(deployment("d00000", "team-a", "2"))  # one it holds: updated
    updated = store.snapshot(force=True).workloads["Deployment/team-a/d00000"]
    assert updated["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_an_applied_workload_carrying_kgwe_outputs_is_admitted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What is in a cluster was mutated at its admission: its templates carry KGWE's outputs."""
    from webhook.assembly import from_directory
    from webhook.config import load_config
    from webhook.review import review_pod

    cluster = copy_example_cluster(tmp_path / "cluster")
    assembly = from_directory(load_config(EXAMPLE_CONFIG), cluster)
    runtime = assembly.runtime
    kinds = workloads_of(runtime.admission).kinds
    result = review_pod(runtime.admission, deployment("applied", "team-a", "2"), kinds=kinds)
    assert result.allowed, result.message
    annotations = result.object["spec"]["template"]["metadata"]["annotations"]
    assert "kgwe.io/accelerator-type" in annotations  # the mutated template, as the cluster stores it
    plant(cluster, "applied.yaml", result.object)
    _status, out = audit(capsys, cluster, "-o", "json")  # the example's chat-h200 is refused; this one is not
    assert not [f for f in json.loads(out)["findings"] if f["pod"] == "applied"], out
