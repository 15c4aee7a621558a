"""Every example pod through both webhooks against the example cluster, judged by the scheduler's predicates."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from placement_support import Admit, load_pod

H100 = {"dgx-h100-01", "dgx-h100-02"}
A100_MIG_1G = {"hgx-a100-mig-01", "hgx-a100-mig-02"}
L4 = {"l4-mps-01", "l4-mps-02"}
GB200 = {"gb200-racka-tray1", "gb200-racka-tray2", "gb200-rackb-tray1", "gb200-rackb-tray2"}

# pod file -> the exact nodes the final pod may land on
LANDS_ON = {
    "01-single-type.yaml": H100,
    "02-ordered-types.yaml": H100 | GB200,
    "03-profile.yaml": H100,
    "04-gpu-memory.yaml": GB200,
    "05-mig-small.yaml": A100_MIG_1G,
    "06-mig-profile.yaml": A100_MIG_1G,
    "07-mps.yaml": L4,
    "08-nvlink.yaml": H100,
    "09-gang.yaml": GB200,
    "13-profile-defaults.yaml": H100,
}

REFUSED = {
    "20-refused-missing-type.yaml": [
        "nvidia-h200-141gb: no such GPUs; this cluster has",
        "nvidia-h100-80gb (16)",
        "MIG 1g.10gb x28",
    ],
    "21-refused-too-many-gpus.yaml": ["asks for 16 GPUs on one node", "nvidia-h100-80gb node has is 8"],
    "22-refused-mig-profile.yaml": ["MIG profile 1g.5gb: no node offers it"],
    "23-refused-fractional-gpu.yaml": ["'0.5' is not a whole number"],
    "24-refused-contradiction.yaml": ["nodeSelector kgwe.io/accelerator-type=nvidia-l4-24gb contradicts"],
    "25-refused-nvlink.yaml": ["2 GPUs in one NVLink domain", "has 1"],
    "27-refused-profile-max.yaml": ['nvidia.com/gpu 4 is above the maximum 2 of hardware profile "workbench-h100"'],
}


@pytest.mark.parametrize("name", sorted(LANDS_ON))
def test_pod_lands_exactly_where_its_intent_says(admit: Admit, name: str) -> None:
    pod = load_pod(name)
    final, mutated, verdict = admit.create(pod)
    assert verdict.allowed, verdict.message
    assert mutated.patch, "a GPU pod with an intent is mutated"
    assert admit.landing_nodes(final) == LANDS_ON[name]


@pytest.mark.parametrize("name", [*sorted(LANDS_ON), "10-plain-gpu.yaml", "11-cpu-only.yaml"])
def test_reviewing_the_result_again_changes_nothing(admit: Admit, name: str) -> None:
    final, _mutated, _verdict = admit.create(load_pod(name))
    assert admit.mutate(final).patch == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_impossible_pods_are_refused_with_a_message_that_says_why(admit: Admit, name: str) -> None:
    _final, _mutated, verdict = admit.create(load_pod(name))
    assert not verdict.allowed
    assert verdict.code >= 400
    for fragment in REFUSED[name]:
        assert fragment in verdict.message


def test_a_pod_without_intent_keeps_its_placement(admit: Admit) -> None:
    pod = load_pod("10-plain-gpu.yaml")
    final, mutated, verdict = admit.create(pod)
    assert verdict.allowed
    assert final["spec"] == pod["spec"], "only annotations change"
    assert {op["path"] for op in mutated.patch} == {"/metadata/annotations"}
    assert final["metadata"]["annotations"]["kgwe.io/tenant"] == "default"


def test_cpu_pods_pass_untouched(admit: Admit) -> None:
    pod = load_pod("11-cpu-only.yaml")
    _final, mutated, verdict = admit.create(pod)
    assert mutated.patch == [] and verdict.allowed


def _annotations(admit: Admit, name: str) -> dict[str, str]:
    final, _m, _v = admit.create(load_pod(name))
    notes: dict[str, str] = final["metadata"]["annotations"]
    return notes


def test_cost_of_whole_gpus_uses_the_profile_price(admit: Admit) -> None:
    notes = _annotations(admit, "03-profile.yaml")
    assert notes["kgwe.io/hourly-cost"] == "4.5"  # 1 GPU x the profile's 4.50
    assert notes["kgwe.io/accelerator-type"] == "nvidia-h100-80gb"


def test_cost_of_a_mig_slice_is_its_compute_share(admit: Admit) -> None:
    notes = _annotations(admit, "05-mig-small.yaml")
    assert Decimal(notes["kgwe.io/hourly-cost"]) == Decimal("2.80") / 7  # 1g = 1/7 of an A100 at 2.80


def test_cost_of_an_mps_share_is_its_fraction(admit: Admit) -> None:
    notes = _annotations(admit, "07-mps.yaml")
    assert Decimal(notes["kgwe.io/hourly-cost"]) == Decimal("0.80") * Decimal("0.25")


def test_decision_names_what_was_applied(admit: Admit) -> None:
    notes = _annotations(admit, "05-mig-small.yaml")
    decision = json.loads(notes["kgwe.io/decision"])
    assert "mig" in decision["steps"]
    assert decision["mig"] == "1g.10gb/mixed"


def test_mig_mixed_renames_the_gpu_resource(admit: Admit) -> None:
    final, _m, _v = admit.create(load_pod("05-mig-small.yaml"))
    limits = final["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}


def test_mps_sets_client_limits_on_gpu_containers(admit: Admit) -> None:
    final, _m, _v = admit.create(load_pod("07-mps.yaml"))
    env = {e["name"]: e["value"] for e in final["spec"]["containers"][0]["env"]}
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=5120M"
    assert final["spec"]["nodeSelector"]["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_gang_pods_share_a_clique(admit: Admit) -> None:
    final, _m, _v = admit.create(load_pod("09-gang.yaml"))
    assert final["metadata"]["labels"]["kgwe.io/gang"] == "llm-pretrain"
    term = final["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kgwe.io/nvlink-clique"
    assert term["labelSelector"] == {"matchLabels": {"kgwe.io/gang": "llm-pretrain"}}


def test_ordered_types_become_weighted_preferences(admit: Admit) -> None:
    final, _m, _v = admit.create(load_pod("02-ordered-types.yaml"))
    preferred = final["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    weights = [(p["weight"], p["preference"]["matchExpressions"][0]["values"]) for p in preferred]
    assert weights == [(100, ["nvidia-h100-80gb"]), (50, ["nvidia-gb200-186gb"])]


def test_requirements_are_anded_into_every_existing_term(admit: Admit) -> None:
    pod = load_pod("01-single-type.yaml")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["dgx-h100-01"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["l4-mps-01"]}
                        ]
                    },
                ]
            }
        }
    }
    final, _m, verdict = admit.create(pod)
    assert verdict.allowed
    terms = final["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 2, "never a new OR-ed term"
    # The user's second term (an L4 node) can no longer escape the H100 requirement.
    assert admit.landing_nodes(final) == {"dgx-h100-01"}


def test_user_set_output_annotations_are_replaced(admit: Admit) -> None:
    pod = load_pod("01-single-type.yaml")
    pod["metadata"]["annotations"].update({"kgwe.io/hourly-cost": "0", "kgwe.io/tenant": "someone-else"})
    final, _m, _v = admit.create(pod)
    assert final["metadata"]["annotations"]["kgwe.io/tenant"] == "team-a"
    assert final["metadata"]["annotations"]["kgwe.io/hourly-cost"] != "0"


def test_users_cannot_change_output_annotations_on_update(admit: Admit) -> None:
    final, _m, _v = admit.create(load_pod("01-single-type.yaml"))
    changed = json.loads(json.dumps(final))
    changed["metadata"]["annotations"]["kgwe.io/hourly-cost"] = "0.01"
    mutated = admit.mutate(changed, operation="UPDATE", old=final)
    assert mutated.patch and mutated.patch[0]["value"] == final["metadata"]["annotations"]["kgwe.io/hourly-cost"]
    verdict = admit.validate(changed, operation="UPDATE", old=final)
    assert not verdict.allowed and "kgwe.io/hourly-cost" in verdict.message


def test_validate_refuses_a_pod_the_mutating_webhook_skipped(admit: Admit) -> None:
    verdict = admit.validate(load_pod("01-single-type.yaml"))
    assert not verdict.allowed
    assert "mutating webhook did not place this GPU pod" in verdict.message


def test_unknown_and_cpu_nodes_never_receive_intent_pods(admit: Admit) -> None:
    for name in LANDS_ON:
        final, _m, _v = admit.create(load_pod(name))
        assert not {"gpu-unlabelled-01", "cpu-01"} & admit.landing_nodes(final)
