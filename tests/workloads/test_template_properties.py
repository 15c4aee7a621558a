"""Property: for any template, the mutated template equals the mutated pod made from it, and the pod a
controller makes from the mutated template passes the mutating webhook unchanged."""

from __future__ import annotations

import base64
import copy
from typing import Any

import jsonpatch
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workload_support import REPLICASET_CONTROLLER, pod_from_template, real_runtime, review

from webhook.review import answer
from webhook.runtime import Runtime

RUNTIME: list[Runtime] = []

INTENT = {
    "kgwe.io/accelerator": st.sampled_from(
        ["nvidia-h100-80gb", "nvidia-a100-80gb,nvidia-h100-80gb", "nvidia-l4-24gb", "nvidia-v100-16gb", "H100"]
    ),
    "kgwe.io/profile": st.sampled_from(["premium-h100", "small-mig", "shared-l4", "missing"]),
    "kgwe.io/gpu-memory": st.sampled_from(["10Gi", "20Gi", "40G", "80Gi", "-1"]),
    "kgwe.io/sharing": st.sampled_from(["exclusive", "mig", "mps", "time-slicing", "bogus"]),
    "kgwe.io/topology": st.sampled_from(["nvlink", "none"]),
}


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, str]:
    keys = draw(st.sets(st.sampled_from(sorted(INTENT)), max_size=3))
    return {key: draw(INTENT[key]) for key in sorted(keys)}


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    gpus = draw(st.integers(min_value=0, max_value=8))
    limits: dict[str, Any] = {"memory": "8Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    template_metadata: dict[str, Any] = {"labels": {"app": "w"}}
    own = draw(annotations())
    if own:
        template_metadata["annotations"] = own
    spec: dict[str, Any] = {"containers": [{"name": "m", "image": "cuda", "resources": {"limits": limits}}]}
    if draw(st.booleans()):
        pinned = draw(st.sampled_from(["nvidia-h100-80gb", "nvidia-l4-24gb"]))
        spec["nodeSelector"] = {"kgwe.io/accelerator-type": pinned}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "w", "namespace": draw(st.sampled_from(["team-a", "inference", "ml-research"])),
                     "annotations": draw(annotations())},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w"}},
                 "template": {"metadata": template_metadata, "spec": spec}},
    }


def mutate(runtime: Runtime, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    response = answer(runtime.admission, body, True, 10.0)
    patch = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(body["request"]["object"], patch), patch


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """Metadata and spec less what only says who asked and how (requested-by, decision's `via`)."""
    metadata = copy.deepcopy(obj.get("metadata") or {})
    for key in ("name", "namespace"):
        metadata.pop(key, None)
    notes = metadata.get("annotations") or {}
    notes.pop("kgwe.io/requested-by", None)
    if "kgwe.io/decision" in notes:
        decision = orjson.loads(notes["kgwe.io/decision"])
        decision.pop("via", None)
        notes["kgwe.io/decision"] = orjson.dumps(decision).decode()
    return {"metadata": metadata, "spec": obj.get("spec")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_the_mutated_template_is_the_mutated_pod(workload: dict[str, Any]) -> None:
    if not RUNTIME:
        RUNTIME.append(real_runtime())
    runtime = RUNTIME[0]
    namespace = workload["metadata"]["namespace"]
    mutated, _ = mutate(runtime, review(workload, user="bob"))
    template = mutated["spec"]["template"]
    # The pod bob would create himself from the template, the workload's intent written onto a GPU one.
    direct = pod_from_template(workload["spec"]["template"], namespace, "direct")
    if "nvidia.com/gpu" in direct["spec"]["containers"][0]["resources"]["limits"]:  # GPU templates inherit
        for key, value in workload["metadata"]["annotations"].items():
            direct["metadata"].setdefault("annotations", {}).setdefault(key, value)
    direct_mutated, _ = mutate(runtime, review(direct, user="bob"))
    expected = comparable(direct_mutated)
    expected["metadata"]["labels"].pop("pod-template-hash")
    assert comparable(template) == expected
    # The controller's pod from the mutated template: no second rewrite.
    made = pod_from_template(template, namespace, "made")
    _, patch = mutate(runtime, review(made, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",)))
    assert patch == []
    # And mutating the mutated workload again changes nothing.
    _, again = mutate(runtime, review(mutated, user="bob", operation="UPDATE", old=mutated))
    assert again == []
