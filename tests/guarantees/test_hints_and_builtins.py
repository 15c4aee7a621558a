"""Issue 13 items 13 and 14: every built-in rule works through the webhook, and typos get a hint."""

from __future__ import annotations

from guarantees_support import gpu_pod, review


def test_a_misspelled_key_is_warned_with_the_closest_valid_key(webhook) -> None:
    pod = gpu_pod("typo", annotations={"kgwe.io/acclerator": "nvidia-h100-80gb"})
    answer, _ = webhook.mutate(pod)
    assert any("kgwe.io/acclerator" in w and "did you mean kgwe.io/accelerator?" in w for w in answer["warnings"])


def test_a_short_or_vendor_type_name_gets_a_suggestion(webhook) -> None:
    for written in ("h100", "NVIDIA-H100-80GB-HBM3"):
        answer = webhook.ask("validate", review(gpu_pod("t", annotations={"kgwe.io/accelerator": written})))
        assert answer["allowed"] is False
        assert "did you mean nvidia-h100-80gb?" in answer["status"]["message"], written


def test_builtin_inference_mig_places_a_small_inference_pod_on_a_mig_slice(webhook) -> None:
    pod = gpu_pod("infer", annotations={"kgwe.io/workload": "inference", "kgwe.io/gpu-memory": "8Gi"})
    answer, mutated = webhook.admit(pod)
    assert answer["allowed"] is True
    limits = mutated["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits
    assert any(k.startswith("nvidia.com/mig-1g") for k in limits)
    assert "kgwe.placement.inference_mig" in mutated["metadata"]["annotations"]["kgwe.io/decision"]


def test_builtin_namespace_mig_gives_a_slice_in_a_mig_namespace(webhook) -> None:
    answer, mutated = webhook.admit(gpu_pod("ns-mig", namespace="inference"), user="carol", groups=("inference",))
    assert answer["allowed"] is True
    limits = mutated["spec"]["containers"][0]["resources"]["limits"]
    assert any(k.startswith("nvidia.com/mig-") for k in limits)


def test_builtin_nvlink_keeps_a_multi_gpu_pod_on_one_domain(webhook) -> None:
    answer, mutated = webhook.admit(gpu_pod("multi", gpus=4, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}))
    assert answer["allowed"] is True
    assert "kgwe.io/nvlink-domain-size" in str(mutated["spec"]["affinity"])


def test_builtin_privileged_refuses_a_privileged_gpu_container(webhook) -> None:
    pod = gpu_pod("root", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is False and "privileged" in answer["status"]["message"]


def test_builtin_visible_devices_refuses_a_gpu_smuggled_by_env(webhook) -> None:
    pod = gpu_pod("smuggler")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox",
                                      "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is False and "NVIDIA_VISIBLE_DEVICES" in answer["status"]["message"]


def test_builtin_visible_devices_refuses_a_zero_gpu_container_that_asks_for_every_gpu(webhook) -> None:
    # `nvidia.com/gpu: 0` reaches KGWE (it names a GPU resource) and gets no GPU from the scheduler, but the
    # NVIDIA runtime still honours the container's own NVIDIA_VISIBLE_DEVICES=all: every GPU of the node.
    pod = gpu_pod("zero")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0"
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is False and "NVIDIA_VISIBLE_DEVICES=\"all\"" in answer["status"]["message"]


def test_builtin_visible_devices_refuses_a_value_taken_from_a_configmap(webhook) -> None:
    pod = gpu_pod("from-configmap")
    pod["spec"]["containers"].append({"name": "side", "image": "busybox", "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "devices", "key": "all"}}}]})
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is False and "from valueFrom" in answer["status"]["message"]


def test_builtin_memory_limit_warns(webhook) -> None:
    pod = gpu_pod("nolimit", annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    del pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    answer, _ = webhook.admit(pod)
    assert answer["allowed"] is True
    assert any("no memory limit" in w for w in answer.get("warnings", []))
