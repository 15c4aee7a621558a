"""`kgwe profiles --kueue`: flavors per accelerator type and a ClusterQueue Kueue would accept, counting
the same resource names the mutated templates ask for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from dra_support import DRA_CLUSTER, gpu_pod
from kube_fake_apiserver import serving_cluster, write_kubeconfig
from workload_support import CLUSTER, ROOT, WORKLOADS, load, real_runtime, review

from webhook.assembly import build_runtime
from webhook.config import Config
from webhook.review import answer, decoded_patch, review_pod
from webhook.workloads.kueue_dra import CHANNEL_CLASS


def test_flavors_and_queue_cover_the_resources_mutated_workloads_ask_for(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "profiles", "--kueue", "--cluster", str(CLUSTER)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    flavors = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ResourceFlavor"}
    (queue,) = [d for d in documents if d["kind"] == "ClusterQueue"]
    assert {"nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-gb200-186gb"} <= set(flavors)
    assert flavors["nvidia-h100-80gb"]["spec"]["nodeLabels"] == {"kgwe.io/accelerator-type": "nvidia-h100-80gb"}
    (group,) = queue["spec"]["resourceGroups"]
    covered = group["coveredResources"]
    for flavor in group["flavors"]:  # Kueue: every flavor of a group lists every covered resource
        assert [r["name"] for r in flavor["resources"]] == covered
    assert {f["name"] for f in group["flavors"]} <= set(flavors)

    # The Kueue example Job, once mutated, asks only for resources the queue covers.
    runtime = real_runtime()
    job = load(next(p for p in WORKLOADS if p.stem == "job-kueue"))
    body = review(job, user="alice", groups=("team-a",))
    mutated = jsonpatch.apply_patch(job | {"metadata": body["request"]["object"]["metadata"]},
                                    decoded_patch(answer(runtime.admission, body, True, 10.0)))
    asked = {k for c in mutated["spec"]["template"]["spec"]["containers"] for k in c["resources"]["limits"]
             if k.startswith("nvidia.com/")}
    assert asked and asked <= set(covered), (asked, covered)


# The fields of kueue.x-k8s.io/v1beta2 that these manifests may use (apis/kueue/v1beta2; REFERENCE Part E
# 6): v1beta1's `cohort` and the top-level `admissionChecks` are gone there, so a v1beta2 server would
# refuse them.
V1BETA2_CLUSTER_QUEUE_SPEC = {"cohortName", "namespaceSelector", "resourceGroups", "queueingStrategy",
                              "preemption", "flavorFungibility", "admissionChecksStrategy", "fairSharing",
                              "stopPolicy", "concurrentAdmissionPolicy"}
V1BETA2_FLAVOR_SPEC = {"nodeLabels", "nodeTaints", "tolerations", "topologyName"}


def _kueue_from_api(tmp_path: Path, cluster: Path, *extra: str) -> list[dict[str, object]]:
    """`kgwe profiles --kueue -o json` against a fake API server serving `cluster`'s objects."""
    server = serving_cluster(cluster)
    try:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        result = subprocess.run(
            [sys.executable, "-m", "webhook.cli", "profiles", "--kueue", "--kubeconfig", str(kubeconfig),
             "-o", "json", *extra],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    documents: list[dict[str, object]] = json.loads(result.stdout)
    return documents


def test_v1beta2_with_a_cohort_and_no_dra_mappings_without_dra(tmp_path: Path) -> None:
    documents = _kueue_from_api(tmp_path, CLUSTER, "--cohort", "gpu-shared")
    assert {d["apiVersion"] for d in documents} == {"kueue.x-k8s.io/v1beta2"}
    (queue,) = [d for d in documents if d["kind"] == "ClusterQueue"]
    spec = queue["spec"]
    assert isinstance(spec, dict) and spec["cohortName"] == "gpu-shared"
    assert set(spec) <= V1BETA2_CLUSTER_QUEUE_SPEC
    for flavor in (d for d in documents if d["kind"] == "ResourceFlavor"):
        assert set(flavor["spec"]) <= V1BETA2_FLAVOR_SPEC  # type: ignore[arg-type]
    assert not [d for d in documents if d["kind"] == "Configuration"]


def test_dra_cluster_gets_the_device_class_mappings_its_templates_need(tmp_path: Path) -> None:
    documents = _kueue_from_api(tmp_path, DRA_CLUSTER)
    (configuration,) = [d for d in documents if d["kind"] == "Configuration"]
    assert configuration["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    mappings = {m["name"]: m["deviceClassNames"] for m in configuration["resources"]["deviceClassMappings"]}  # type: ignore[index]
    (queue,) = [d for d in documents if d["kind"] == "ClusterQueue"]
    (group,) = queue["spec"]["resourceGroups"]  # type: ignore[index]
    # Every mapped quota name is covered by the queue, with the DRA devices of each type as its quota.
    assert set(mappings) <= set(group["coveredResources"])
    quota = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert quota["nvidia-h100-80gb"]["kgwe.io/dra-gpu"] > 0
    assert quota["nvidia-a100-80gb"]["kgwe.io/dra-mig"] > 0
    assert quota["nvidia-gb200-186gb"]["kgwe.io/dra-imex-channel"] > 0

    # Every DeviceClass the claims KGWE renders name (whole GPUs, MIG slices, a gang's IMEX channel) is
    # mapped: Kueue keeps a workload naming an unmapped class inadmissible.
    mapped = {c for names in mappings.values() for c in names}
    runtime = build_runtime(Config(), DRA_CLUSTER)
    named: set[str] = set()
    for notes, gpus in (({"kgwe.io/accelerator": "nvidia-h100-80gb"}, 2),
                              ({"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "10Gi"}, 1),
                              ({"kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": "llm",
                                "kgwe.io/gang-size": "2"}, 4)):
        result = review_pod(runtime.admission, gpu_pod("p", notes, gpus=gpus))
        assert result.allowed, result.message
        for created in result.creates:
            if created["kind"] == "ResourceClaimTemplate":
                named |= _device_classes(created["spec"]["spec"]["devices"]["requests"])
            else:  # a ComputeDomain: NVIDIA's driver makes its channel template with the channel class
                named.add(CHANNEL_CLASS)
    assert named and named <= mapped, (named, mapped)


def _device_classes(requests: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for request in requests:
        for choice in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]:
            if "deviceClassName" in choice:
                out.add(choice["deviceClassName"])
    return out
