"""Issue 13 items 1 and 4: hostile sizes, nesting and shapes are refused with the limit named, never
admitted and never answered by the deadline's fallback."""

from __future__ import annotations

import copy

import orjson
from guarantees_support import gpu_pod, review

LIMIT_MESSAGE = "no decision within"  # the deadline fallback: must never be how these are answered


def test_a_huge_accelerator_list_is_refused_naming_the_limit(webhook) -> None:
    ids = ",".join(f"bogus-type-{i}" for i in range(20_000))
    pod = gpu_pod(gpus=8, annotations={"kgwe.io/accelerator": ids})
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    answer = webhook.ask("validate", review(pod))
    assert answer["allowed"] is False
    assert "the limit is 1024" in answer["status"]["message"]
    assert LIMIT_MESSAGE not in answer["status"]["message"]


def test_many_short_ids_within_the_character_limit_are_bounded_too(webhook) -> None:
    ids = ",".join("a" for _ in range(400))
    answer = webhook.ask("validate", review(gpu_pod(annotations={"kgwe.io/accelerator": ids})))
    assert answer["allowed"] is False
    assert "at most 16 are allowed" in answer["status"]["message"]


def test_mutate_refuses_a_100000_id_list_without_placing_it(webhook) -> None:
    # Refused as /validate refuses it (issue 30): no patch, so nothing half-placed is stored.
    ids = ",".join(f"x{i}" for i in range(100_000))
    answer, _mutated = webhook.mutate(gpu_pod(annotations={"kgwe.io/accelerator": ids}))
    assert answer["allowed"] is False and "patch" not in answer
    assert "the limit is 1024" in answer["status"]["message"]
    assert LIMIT_MESSAGE not in answer["status"]["message"]


def deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"f:x": value}
    return value


def test_nesting_past_the_limit_is_refused_on_both_endpoints(webhook) -> None:
    pod = gpu_pod(gpus=8)
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                                         "fieldsV1": deep(250)}]
    for endpoint in ("mutate", "validate"):
        answer = webhook.ask(endpoint, review(pod))
        assert answer["allowed"] is False
        assert answer["status"]["code"] == 400
        assert "deeper than 64 levels" in answer["status"]["message"]


def test_realistic_nesting_passes(webhook) -> None:
    pod = gpu_pod(annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsType": "FieldsV1", "fieldsV1": deep(30)}]
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is True


def test_shapes_the_api_server_never_sends_are_refused(webhook) -> None:
    broken = []
    pod = gpu_pod(gpus=8)
    pod["metadata"]["annotations"] = "kgwe.io/profile=premium-h100"
    broken.append((pod, "metadata.annotations must be a JSON object"))
    pod = gpu_pod(gpus=8)
    pod["spec"]["containers"] = {"main": {"image": "x"}}
    broken.append((pod, "spec.containers must be a JSON array"))
    pod = gpu_pod(gpus=8)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = {"value": 8}
    broken.append((pod, "must be a quantity"))
    pod = gpu_pod(gpus=8)
    pod["metadata"]["labels"] = {"team": 7}
    broken.append((pod, "metadata.labels['team'] must be a string"))
    for pod, expected in broken:
        answer = webhook.ask("validate", review(pod))
        assert answer["allowed"] is False, expected
        assert expected in answer["status"]["message"]


def test_each_part_checked_at_once_is_still_judged_and_named(webhook) -> None:
    # bounds.py compares the set of a part's types with the allowed ones first: a bool amount, one wrong entry
    # among right ones, and the other lists it checks that way are refused by name as the walk refuses them.
    broken = []
    pod = gpu_pod(gpus=8)
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "nvidia.com/gpu": True}
    broken.append((pod, "resources.requests['nvidia.com/gpu'] must be a quantity"))
    pod = gpu_pod(gpus=8)
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}, "B=2"]
    broken.append((pod, "spec.containers[0].env[1] must be a JSON object"))
    pod = gpu_pod(gpus=8)
    pod["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}, ["b"]]
    broken.append((pod, "spec.tolerations[1] must be a JSON object"))
    pod = gpu_pod(gpus=8)
    pod["spec"]["nodeSelector"] = {"zone": "a", "rack": None}
    broken.append((pod, "spec.nodeSelector['rack'] must be a string"))
    pod = gpu_pod(gpus=8)
    pod["metadata"]["annotations"] = {"a": "1", "b": ["2"]}
    broken.append((pod, "metadata.annotations['b'] must be a string"))
    for pod, expected in broken:
        answer = webhook.ask("validate", review(pod))
        assert answer["allowed"] is False, expected
        assert expected in answer["status"]["message"]
    pod = gpu_pod(gpus=8)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8  # a number is a quantity too
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    answer = webhook.ask("validate", review(pod))
    assert "must be" not in (answer.get("status") or {}).get("message", "")


def test_a_malformed_envelope_is_a_400_status(webhook) -> None:
    for body in (b"{not json", b"[]", orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})):
        reply = webhook.post("validate", body)
        assert reply.status_code == 400
        assert reply.json()["kind"] == "Status"


def test_an_object_that_is_not_a_mapping_is_refused(webhook) -> None:
    body = review(gpu_pod())
    body["request"]["object"] = ["not", "a", "pod"]
    answer = webhook.ask("validate", body)
    assert answer["allowed"] is False and "object must be a JSON object" in answer["status"]["message"]


def test_oversized_values_of_every_intent_key_are_refused(webhook) -> None:
    for key in ("kgwe.io/profile", "kgwe.io/gpu-memory", "kgwe.io/sharing", "kgwe.io/gang", "kgwe.io/topology"):
        pod = gpu_pod(annotations={key: "x" * 5000})
        answer = webhook.ask("validate", review(copy.deepcopy(pod)))
        assert answer["allowed"] is False, key
        assert f"{key} is 5000 characters long" in answer["status"]["message"]
