"""Hypothesis strategies: pods as users write them (and get wrong), AdmissionReviews as the API server sends
them, and bodies no API server would send."""

from __future__ import annotations

import os
from typing import Any

from effort import tries
from hypothesis import strategies as st

# Examples per fuzz test; `KGWE_FUZZ_EXAMPLES=2000` for a longer hunt.
EXAMPLES = int(os.environ.get("KGWE_FUZZ_EXAMPLES", tries(30, 150)))

NAMESPACES = ("team-a", "team-b", "ml-research", "default", "kube-system", "")
TYPES = ("nvidia-h100-80gb", "nvidia-h200-141gb", "nvidia-a100-80gb", "nvidia-a100-40gb", "nvidia-l4-24gb",
         "nvidia-gb200-186gb", "nvidia-t4-16gb", "amd-mi300x-192gb", "unknown", "NVIDIA-H100")
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-7g.80gb",
                 "nvidia.com/gpumem", "amd.com/gpu", "cpu", "memory", "ephemeral-storage")
QUANTITIES = ("0", "1", "2", "4", "8", "16", "-1", "0.5", "1.5", "1e3", "10Gi", "40G", "100m", "abc", "", " 1",
              "1Ki", "9999999999999999999999")
INTENT_VALUES: dict[str, tuple[str, ...]] = {
    "kgwe.io/accelerator": (*TYPES, "nvidia-h100-80gb,nvidia-a100-80gb", ",", "nvidia-l4-24gb, nvidia-t4-16gb"),
    "kgwe.io/profile": ("premium-h100", "inference-small", "no-such-profile", ""),
    "kgwe.io/gpu-memory": ("10Gi", "40G", "80Gi", "0", "-5Gi", "lots", "1Ti"),
    "kgwe.io/sharing": ("exclusive", "mig", "mps", "time-slicing", "MIG", "shared", ""),
    "kgwe.io/gpu-fraction": ("0.25", "0.5", "1", "0", "1.5", "-0.1", "nan", "1/3"),
    "kgwe.io/topology": ("nvlink", "none", "NVLINK", "pcie"),
    "kgwe.io/gang": ("llm-7b", "", "x" * 70, "Bad Name!"),
    # Output keys a user may try to set.
    "kgwe.io/accelerator-type": ("nvidia-h100-80gb", "anything"),
    "kgwe.io/hourly-cost": ("0", "1000"),
    "kgwe.io/tenant": ("someone-else",),
    "kgwe.io/decision": ("{}", "not json"),
}

text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FFF), max_size=12)  # no surrogates
names = st.one_of(st.sampled_from(("train", "infer", "job-1", "a")),
                  st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), text)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), finite, text)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)), max_leaves=8)
quantities = st.one_of(st.sampled_from(QUANTITIES), st.integers(-3, 64),
                       st.floats(allow_nan=False, allow_infinity=False, width=32), st.none(), text)


@st.composite
def pod_annotations(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(sorted(INTENT_VALUES)), max_size=4, unique=True))
    chosen: dict[str, Any] = {key: draw(st.one_of(st.sampled_from(INTENT_VALUES[key]), text)) for key in keys}
    chosen.update(draw(st.dictionaries(st.sampled_from(("team", "kgwe.io/workload", "owner")),
                                       st.one_of(text, st.just("inference")), max_size=2)))
    return chosen


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(names), "image": "nvcr.io/nvidia/cuda:12.4.0-base"}
    for section in draw(st.lists(st.sampled_from(("limits", "requests")), max_size=2, unique=True)):
        container.setdefault("resources", {})[section] = draw(
            st.dictionaries(st.sampled_from(GPU_RESOURCES), quantities, max_size=3))
    if draw(st.booleans()):
        container["env"] = draw(st.lists(st.fixed_dictionaries(
            {"name": st.sampled_from(("NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "X")),
             "value": text}), max_size=2))
    if draw(st.integers(0, 9)) == 0:
        container["securityContext"] = {"privileged": draw(st.booleans())}
    return container


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": draw(st.sampled_from(NAMESPACES))}
    if draw(st.booleans()):
        metadata["name"] = draw(names)
    else:
        metadata["generateName"] = "job-"
    if draw(st.booleans()):
        metadata["annotations"] = draw(pod_annotations())
    if draw(st.booleans()):
        metadata["labels"] = draw(st.dictionaries(st.sampled_from(("app", "kgwe.io/gang", "owner")), text, max_size=2))
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), max_size=3))}
    if draw(st.integers(0, 3)) == 0:
        spec["initContainers"] = draw(st.lists(containers(), max_size=1))
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = draw(st.dictionaries(
            st.sampled_from(("nvidia.com/gpu.product", "kgwe.io/accelerator-type", "zone")), text, max_size=2))
    if draw(st.integers(0, 4)) == 0:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if draw(st.integers(0, 5)) == 0:
        spec["affinity"] = draw(st.one_of(st.just({}), st.just({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["zone-a"]}]}]}}})))
    if draw(st.integers(0, 9)) == 0:
        spec["nodeName"] = draw(names)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _gvk(kind: str) -> dict[str, str]:
    return {"group": "", "version": "v1", "kind": kind}


@st.composite
def reviews(draw: st.DrawFn) -> dict[str, Any]:
    """An AdmissionReview v1 as kube-apiserver sends it (any operation, mostly Pods)."""
    pod = draw(pods())
    operation = draw(st.sampled_from(("CREATE", "CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT")))
    kind = draw(st.sampled_from(("Pod", "Pod", "Pod", "Deployment", "ConfigMap")))
    old = draw(pods()) if operation in ("UPDATE", "DELETE") else None
    groups = draw(st.lists(st.sampled_from(("team-a", "ml-researchers", "system:authenticated", "system:masters")),
                           max_size=3, unique=True))
    request: dict[str, Any] = {
        "uid": draw(st.uuids()).hex,
        "kind": _gvk(kind),
        "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
        "requestKind": _gvk(kind),
        "name": pod["metadata"].get("name", ""),
        "namespace": pod["metadata"]["namespace"],
        "operation": operation,
        "userInfo": {"username": draw(st.sampled_from(("alice", "bob", "system:serviceaccount:kgwe:controller"))),
                     "groups": groups},
        "object": None if operation == "DELETE" else pod,
        "oldObject": old,
        "dryRun": draw(st.booleans()),
    }
    if draw(st.integers(0, 9)) == 0:
        request["subResource"] = draw(st.sampled_from(("status", "ephemeralcontainers")))
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@st.composite
def broken_reviews(draw: st.DrawFn) -> Any:
    """Bodies no API server sends: any JSON, or a review with a field removed or of the wrong type."""
    review = draw(reviews())
    choice = draw(st.integers(0, 4))
    if choice == 4 and isinstance(review["request"]["object"], dict):
        review["request"]["object"]["spec"][draw(st.sampled_from(("affinity", "containers", "tolerations")))] = (
            draw(json_values))
        return review
    if choice == 0:
        return draw(json_values)
    if choice == 1:
        review.pop(draw(st.sampled_from(("apiVersion", "kind", "request"))))
        return review
    field = draw(st.sampled_from(("uid", "kind", "object", "oldObject", "userInfo", "operation", "namespace",
                                  "dryRun", "resource")))
    review["request"][field] = draw(json_values)
    return review
