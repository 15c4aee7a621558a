"""Kinds an admin adds in the configuration, template-path parsing, and the signing key's lifecycle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from workload_support import KEY, real_runtime

from webhook.admission.request import UserInfo, decode_review
from webhook.config import ConfigError, parse_config
from webhook.identity_key import IdentityKeyError, load_key
from webhook.review import create_review, review_pod
from webhook.workload_kinds import KindTable, TemplatePath, WorkloadShapeError, extract_templates
from webhook.workloads.identity import Signer
from webhook.workloads.kind import workloads_of

TFJOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {"name": "mnist", "namespace": "team-a", "annotations": {"kgwe.io/accelerator": "nvidia-a100-80gb"}},
    "spec": {"tfReplicaSpecs": {
        "PS": {"replicas": 1, "template": {"spec": {"containers": [{"name": "ps", "image": "tf"}]}}},
        "Worker": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "w", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "8Gi"}}}]}}},
    }},
}


def test_an_admin_added_kind_is_admitted_like_the_builtin_ones() -> None:
    runtime = real_runtime()
    config = parse_config(
        "workloads:\n  kinds:\n  - {group: kubeflow.org, kind: TFJob, resource: tfjobs,\n"
        "     templates: ['spec.tfReplicaSpecs.*.template']}\n"
    )
    runtime.set_config(config)
    result = review_pod(runtime.admission, TFJOB, "alice", ["team-a"], kinds=workloads_of(runtime.admission).kinds)
    assert result.allowed, result.message
    worker = result.object["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert worker["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"} or \
        worker["spec"]["nodeSelector"] == {"kgwe.io/accelerator-type": "nvidia-a100-80gb"}
    assert worker["metadata"]["annotations"]["kgwe.io/accelerator"] == "nvidia-a100-80gb"
    # The CPU-only parameter server does not inherit the workers' intent: it stays as written.
    assert result.object["spec"]["tfReplicaSpecs"]["PS"] == TFJOB["spec"]["tfReplicaSpecs"]["PS"]


@pytest.mark.parametrize("path", ["spec..template", "*.template", "spec.temp late", "spec.x[0]"])
def test_bad_template_paths_are_configuration_errors(path: str) -> None:
    with pytest.raises(ConfigError):
        parse_config(f"workloads:\n  kinds:\n  - {{group: g, kind: K, resource: ks, templates: ['{path}']}}\n")


def test_extraction_follows_wildcards_and_names_concrete_paths() -> None:
    spec = KindTable.build().lookup("ray.io", "RayCluster")
    assert spec is not None
    cluster = {"spec": {"headGroupSpec": {"template": {}}, "workerGroupSpecs": [{"template": {}}, {"template": {}}]}}
    assert [t.path for t in extract_templates(cluster, spec)] == [
        "spec.headGroupSpec.template", "spec.workerGroupSpecs[0].template", "spec.workerGroupSpecs[1].template",
    ]
    assert extract_templates({"spec": {}}, spec) == []
    cluster["spec"]["headGroupSpec"]["template"] = "pod"  # type: ignore[index]
    with pytest.raises(WorkloadShapeError, match=r"spec\.headGroupSpec\.template: a pod template must be an object"):
        extract_templates(cluster, spec)
    assert TemplatePath.parse("spec.a[*].b").segments[1].each_item


def test_signatures_bind_user_groups_and_namespace() -> None:
    signer = Signer(KEY)
    value = signer.sign(UserInfo("bob", groups=["b", "a", "a"]), "default")
    user = signer.verify(value, "default")
    assert user is not None and (user.username, user.groups) == ("bob", ["a", "b"])
    assert signer.verify(value, "team-a") is None
    assert Signer(b"another-key-of-32-bytes-000000000").verify(value, "default") is None
    with pytest.raises(IdentityKeyError):
        Signer(b"short")


def test_the_local_key_is_made_once_and_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path))
    first = load_key(None)
    assert load_key(None) == first and len(first) >= 32
    assert os.stat(tmp_path / "identity.key").st_mode & 0o777 == 0o600
    with pytest.raises(IdentityKeyError, match="missing"):
        load_key(tmp_path / "missing")


def test_workers_starting_together_share_one_whole_key(tmp_path: Path) -> None:
    # Separate processes, as `kgwe serve --workers N` starts them: each makes the key if it finds none.
    script = "import sys; from webhook.identity_key import load_key; sys.stdout.write(load_key(None).decode())"
    env = {**os.environ, "KGWE_STATE_DIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    started = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE) for _ in range(6)]
    keys = {process.communicate(timeout=120)[0] for process in started}
    assert len(keys) == 1 and len(keys.pop()) >= 32
    assert [p.name for p in tmp_path.iterdir()] == ["identity.key"], "no half-made key is left behind"


def test_a_key_file_left_empty_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path))
    (tmp_path / "identity.key").write_bytes(b"")
    with pytest.raises(IdentityKeyError, match="fewer than 16 bytes"):
        load_key(None)


def test_the_kinds_judged_follow_the_configuration_without_asking_the_table_first() -> None:
    """`workload_kind` reads the kind table inline while it is the configuration's: each configuration change
    is seen by the very next request (no other reader of `kinds` in between)."""
    runtime = real_runtime()
    plain = runtime.config
    with_tfjob = parse_config(
        "workloads:\n  kinds:\n  - {group: kubeflow.org, kind: TFJob, resource: tfjobs,\n"
        "     templates: ['spec.tfReplicaSpecs.*.template']}\n"
    )
    seams = runtime.admission.seams
    workloads = workloads_of(runtime.admission)
    runtime.set_config(with_tfjob)
    request = decode_review(orjson.dumps(create_review(TFJOB, "alice", ["team-a"], workloads.kinds)))
    for config, judged in ((plain, False), (with_tfjob, True), (plain, False), (with_tfjob, True)):
        runtime.set_config(config)
        assert (seams.handler_of(request) is workloads) is judged
        spec = workloads.workload_kind(request)
        assert (spec is not None and spec.kind == "TFJob") is judged
