"""DRA offline: `kgwe review` shows the templates (and a gang's ComputeDomain) it would create; a missing
DeviceClass is named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from dra_support import DRA_CLUSTER, ROOT, gpu_pod

from webhook.assembly import build_runtime
from webhook.config import Config
from webhook.review import render_text, review_pod


def test_review_prints_the_templates_it_would_create(tmp_path: Path) -> None:
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(gpu_pod("p", {"kgwe.io/accelerator": "nvidia-gb200-186gb"}, gpus=2)))
    out = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "review", str(pod_file), "--cluster", str(DRA_CLUSTER), "-o", "json"],
        capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True,
    )
    document = json.loads(out.stdout)
    assert document["allowed"], document
    (template,) = document["resourceClaimTemplates"]
    claim = document["object"]["spec"]["resourceClaims"][0]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert template["metadata"]["namespace"] == "default"
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


def test_a_missing_device_class_is_named(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(DRA_CLUSTER, cluster)
    classes = [d for d in yaml.safe_load_all((cluster / "device-classes.yaml").read_text()) if d]
    (cluster / "device-classes.yaml").write_text(yaml.safe_dump_all([c for c in classes
                                                                     if c["metadata"]["name"] != "mig.nvidia.com"]))
    runtime = build_runtime(Config(), cluster)
    result = review_pod(runtime.admission, gpu_pod("p", {"kgwe.io/sharing": "mig", "kgwe.io/gpu-memory": "5Gi"}))
    assert not result.allowed
    assert ("DRA: DeviceClass mig.nvidia.com does not exist; this cluster has "
            "compute-domain-default-channel.nvidia.com, dranet, gpu.nvidia.com") in result.message
    assert result.creates == []


def test_review_shows_a_gangs_compute_domain_first() -> None:
    runtime = build_runtime(Config(), DRA_CLUSTER)
    pod = gpu_pod("w-0", {"kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": "llm",
                          "kgwe.io/gang-size": "2"}, gpus=4)
    result = review_pod(runtime.admission, pod)
    assert result.allowed, result.message
    domain, template = result.creates
    assert (domain["kind"], template["kind"]) == ("ComputeDomain", "ResourceClaimTemplate")
    assert domain["spec"]["numNodes"] == 2
    channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    wanted = {"name": "kgwe-imex-channel", "resourceClaimTemplateName": channel}
    assert wanted in result.object["spec"]["resourceClaims"]
    text = render_text(result)
    assert f"creates ComputeDomain default/{domain['metadata']['name']}:" in text
    assert f"creates ResourceClaimTemplate default/{template['metadata']['name']}:" in text


def test_a_device_plugin_mig_resource_on_dra_slices_is_answered_not_an_internal_error() -> None:
    # The cluster's MIG slices are published through DRA only; a pod naming the device plugin's MIG
    # resource (no KGWE intent) is admitted with a warning saying how to ask, never an internal error.
    runtime = build_runtime(Config(), DRA_CLUSTER)
    pod = gpu_pod("p", {})
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    result = review_pod(runtime.admission, pod)
    assert result.allowed, result.message
    assert any("MIG slices here are DRA devices: ask for nvidia.com/gpu with kgwe.io/sharing: mig" in w
               for w in result.warnings), result.warnings
    assert not any("internal error" in w for w in result.warnings)


def test_review_reads_the_claim_templates_of_the_same_file(tmp_path: Path) -> None:
    # A file that creates a template and a pod naming it: the pod is judged by that template (team-a's
    # H100 limit in the example cluster is 8 with 4 in use).
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
           "spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "eight"}],
                    "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "g"}]}}]}}
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "eight", "namespace": "team-a"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]}}}}
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([template, pod]))
    out = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "review", str(both), "--cluster", str(ROOT / "examples" / "cluster"),
         "-o", "json"],
        capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True,
    )
    _template_result, pod_result = json.loads(out.stdout)
    assert not pod_result["allowed"]
    assert "nvidia-a100-80gb limit 2 GPUs, this pod asks 8; this pod could never run within it" in pod_result["message"]
