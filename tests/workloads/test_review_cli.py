"""`kgwe review` on workloads and multi-document files, through the real command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from workload_support import CLUSTER, CONFIG, ROOT, WORKLOADS

KEYS = {"allowed", "message", "patch", "object", "warnings", "auditAnnotations"}


def kgwe(*args: str, env_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(env_dir), "PATH": "/usr/bin:/bin"},
    )


def test_every_example_workload_passes_review_against_the_example_cluster(tmp_path: Path) -> None:
    bundle = tmp_path / "all.yaml"
    bundle.write_text("\n---\n".join(p.read_text() for p in WORKLOADS))
    result = kgwe("review", str(bundle), "--cluster", str(CLUSTER), "--config", str(CONFIG),
                  "--user", "bob", "--group", "ml-researchers", "-o", "json", env_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    documents = orjson.loads(result.stdout)
    assert isinstance(documents, list) and len(documents) == len(WORKLOADS) >= 11
    kinds = set()
    for document, path in zip(documents, WORKLOADS, strict=True):
        assert set(document) == KEYS
        assert document["allowed"], (path.name, document["message"])
        assert document["patch"], path.name
        kinds.add(document["object"]["kind"])
    assert kinds == {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob", "JobSet",
                     "LeaderWorkerSet", "PyTorchJob", "RayJob", "RayCluster"}


def test_multi_document_file_with_a_pod_a_workload_and_an_unadmitted_kind(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text("""
apiVersion: v1
kind: Service
metadata: {name: web, namespace: team-a}
spec: {ports: [{port: 80}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team-a}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {kgwe.io/accelerator: nvidia-v100-16gb}
    spec:
      containers: [{name: m, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: single, namespace: team-a, annotations: {kgwe.io/accelerator: nvidia-h100-80gb}}
spec:
  containers: [{name: m, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}]
""")
    result = kgwe("review", str(manifest), "--cluster", str(CLUSTER), "--config", str(CONFIG),
                  "--user", "alice", "--group", "team-a", "-o", "json", env_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    service, workload, pod = orjson.loads(result.stdout)
    assert service["allowed"] and service["patch"] == [] and service["object"]["kind"] == "Service"
    assert not workload["allowed"] and workload["message"].startswith("spec.template: ")
    assert pod["allowed"] and pod["object"]["spec"]["nodeSelector"] == {"kgwe.io/accelerator-type": "nvidia-h100-80gb"}
    text = kgwe("review", str(manifest), "--cluster", str(CLUSTER), "--config", str(CONFIG), env_dir=tmp_path)
    assert text.returncode == 0
    assert "deployment team-a/web: DENIED" in text.stdout and "pod team-a/single: ALLOWED" in text.stdout


@pytest.mark.parametrize("body", ["", "- just\n- a list\n"])
def test_files_without_manifests_are_an_error(tmp_path: Path, body: str) -> None:
    manifest = tmp_path / "empty.yaml"
    manifest.write_text(body)
    result = kgwe("review", str(manifest), "--cluster", str(CLUSTER), env_dir=tmp_path)
    assert result.returncode == 2 and "kgwe review:" in result.stderr
