"""Readers of pods built on the views take a view or a dict, agree on both, and never raise on hostile shapes."""

from __future__ import annotations

from typing import Any

import pytest

from policies.gpu_demand import container_gpu_amounts, dra_rendered, pod_gpu_demand
from policies.vocabulary.objects import PodView
from webhook.intent import annotations_of, parse_intent


def _gpu_pod() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "annotations": {"kgwe.io/accelerator": "h100-80gb"}},
        "spec": {
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"name": "side", "resources": {"requests": {"cpu": "1"}}},
            ],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "setup", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
            ],
        },
    }


def test_a_view_and_its_dict_give_the_same_answers() -> None:
    raw = _gpu_pod()
    view = PodView(raw)
    # Sidecars add to the app containers (2 + 1); the plain init container's 4 is the larger.
    assert pod_gpu_demand(view) == pod_gpu_demand(raw)
    assert pod_gpu_demand(view).whole_gpus == 4
    assert pod_gpu_demand(view).gpu_containers == ["main"]
    assert container_gpu_amounts(view) == container_gpu_amounts(raw)
    assert parse_intent(view) == parse_intent(raw)
    assert parse_intent(view).accelerator_types == ["h100-80gb"]
    assert annotations_of(view) == annotations_of(raw) == {"kgwe.io/accelerator": "h100-80gb"}


HOSTILE_PODS: list[Any] = [
    None,
    [],
    {"metadata": [], "spec": []},
    {"spec": {"containers": {"main": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}}},
    {"spec": {"containers": ["main", 3, None]}},
    {"spec": {"containers": [{"name": "main", "resources": ["nvidia.com/gpu"]}]}},
    {"spec": {"containers": [{"name": "main", "resources": {"limits": "nvidia.com/gpu=1"}}]}},
    {"spec": {"initContainers": "setup"}},
    {"metadata": {"annotations": {"kgwe.io/dra-claims": {"main": {"nvidia.com/gpu": "1"}}}}},
    {"metadata": {"annotations": {"kgwe.io/accelerator": 7, "kgwe.io/gpu-memory": ["10Gi"]}}},
]


@pytest.mark.parametrize("pod", HOSTILE_PODS)
def test_hostile_shapes_ask_for_nothing_and_raise_nothing(pod: Any) -> None:
    """Cluster objects and workload templates are not bounded like admission requests: a malformed
    part reads as absent (the dict readers these replaced raised on some, e.g. resources as a list)."""
    demand = pod_gpu_demand(PodView(pod))
    assert not demand.asks_gpu
    assert container_gpu_amounts(PodView(pod)) == {}
    assert dra_rendered(PodView(pod)) == {}
    intent = parse_intent(PodView(pod))
    assert intent.empty and not intent.problems


def test_a_dra_record_counts_only_for_containers_that_carry_the_claim() -> None:
    pod = _gpu_pod()
    recorded = '{"main": {"nvidia.com/gpu": "2"}, "side": {"nvidia.com/gpu": "8"}}'
    pod["metadata"]["annotations"]["kgwe.io/dra-claims"] = recorded
    pod["spec"]["initContainers"] = []
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "kgwe-gpu-1"}]}
    pod["spec"]["containers"][1]["resources"]["claims"] = "kgwe-gpu-2"  # not a list: not a claim
    assert dra_rendered(pod) == {"main": {"nvidia.com/gpu": "2"}}
    assert pod_gpu_demand(PodView(pod)).whole_gpus == pod_gpu_demand(pod).whole_gpus == 2
