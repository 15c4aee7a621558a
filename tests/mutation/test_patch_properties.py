"""Property tests: for generated pods, every patch applies to exactly the object received (checked by an
independent RFC 6902 implementation), reviewing the result again changes nothing, and every refusal says why."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from effort import tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_support import Admit

TYPES = ["nvidia-h100-80gb", "nvidia-a100-80gb", "nvidia-l4-24gb", "nvidia-gb200-186gb", "nvidia-h200-141gb", "bogus"]
odd_keys = st.sampled_from(["app", "a/b", "x~y", "team.io/name", "~/~", "kgwe.io/tenant", "kgwe.io/decision"])
label_values = st.text(alphabet="abcxyz-._019", min_size=0, max_size=12)

gpu_amounts = st.sampled_from(["1", "2", "4", "8", "16", "0", "0.5", "1500m", "abc", 3, "1e1"])
resource_names = st.sampled_from(
    ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.5gb", "cpu", "memory"]
)


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(st.sampled_from(["main", "side", "c~1", "x/y"])), "image": "img"}
    if draw(st.booleans()):
        section = draw(st.sampled_from(["limits", "requests"]))
        container["resources"] = {section: draw(st.dictionaries(resource_names, gpu_amounts, max_size=3))}
    if draw(st.booleans()):
        container["env"] = [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "90"}, {"name": "A", "value": "b"}]
    return container


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    annotations: dict[str, Any] = draw(st.dictionaries(odd_keys, label_values, max_size=3))
    if draw(st.booleans()):
        annotations["kgwe.io/accelerator"] = ",".join(draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3)))
    if draw(st.booleans()):
        annotations["kgwe.io/sharing"] = draw(st.sampled_from(["mig", "mps", "exclusive", "time-slicing", "weird"]))
    if draw(st.booleans()):
        annotations["kgwe.io/gpu-memory"] = draw(st.sampled_from(["10Gi", "40G", "100Gi", "5Gi", "-1", "lots"]))
    if draw(st.booleans()):
        annotations["kgwe.io/gpu-fraction"] = draw(st.sampled_from(["0.25", "0.5", "1", "0", "2", "x"]))
    if draw(st.booleans()):
        annotations["kgwe.io/topology"] = draw(st.sampled_from(["nvlink", "none", "ring"]))
    if draw(st.booleans()):
        annotations["kgwe.io/gang"] = draw(st.sampled_from(["job-1", "bad name!", "j"]))
    if draw(st.booleans()):
        annotations["kgwe.io/profile"] = draw(st.sampled_from(["premium-h100", "small-mig", "shared-l4", "nope"]))
    metadata: dict[str, Any] = {"name": "p", "namespace": draw(st.sampled_from(["team-a", "inference", "default"]))}
    if annotations or draw(st.booleans()):
        metadata["annotations"] = annotations
    if draw(st.booleans()):
        metadata["labels"] = draw(st.dictionaries(odd_keys, label_values, max_size=2))
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), min_size=1, max_size=3))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers(), max_size=1))
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(
            st.dictionaries(st.sampled_from(["kgwe.io/accelerator-type", "zone", "a/b"]), st.sampled_from(TYPES))
        )
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if draw(st.booleans()):
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                        {"matchExpressions": [{"key": "kgwe.io/nvlink-domain-size", "operator": "Exists"}]},
                    ]
                }
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@settings(max_examples=tries(25, 150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pod=pods())
def test_patches_apply_and_converge_and_refusals_explain(admit: Admit, pod: dict[str, Any]) -> None:
    original = copy.deepcopy(pod)
    mutated = admit.mutate(pod)
    assert pod == original, "the pipeline never changes the object it was given"
    final = jsonpatch.apply_patch(pod, mutated.patch)  # raises if the patch does not apply
    assert admit.mutate(final).patch == [], "reviewing the result again changes nothing"
    verdict = admit.validate(final)
    if not verdict.allowed:
        assert verdict.message.strip(), "every refusal has a message"
        assert verdict.code >= 400
