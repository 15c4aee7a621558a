"""`kgwe profiles --kueue`: flavors per accelerator type and a ClusterQueue Kueue would accept, counting
the same resource names the mutated templates ask for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonpatch
import yaml
from workload_support import CLUSTER, ROOT, WORKLOADS, load, real_runtime, review

from webhook.review import answer, decoded_patch


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
