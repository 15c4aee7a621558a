"""What a pod of a profile would pay now, and pending pods counted once (issue 35, item 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod, plant

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.capacity import Inventory
from webhook.inventory.profiles import hardware_profiles_view

H100, GB200, A100 = "nvidia-h100-80gb", "nvidia-gb200-186gb", "nvidia-a100-80gb"


def _profile(name: str, types: list[str], sharing: dict[str, Any], price: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"acceleratorTypes": types, "sharing": sharing}
    if price:
        spec["pricePerGPUHour"] = price
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "HardwareProfile", "metadata": {"name": name}, "spec": spec}


def _profiles(tmp_path: Path, *extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(cluster, "extra.yaml",
          _profile("big-any", [H100, GB200], {"mode": "exclusive"}),
          _profile("mig-priced", [A100], {"mode": "mig", "migProfile": "1g.10gb"}, "3.00"),
          *extra)
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    view = hardware_profiles_view(Inventory(runtime.store.snapshot(), runtime.config))
    return {p["name"]: p for p in view["profiles"]}


def test_the_price_is_the_range_over_the_types_free_now(tmp_path: Path) -> None:
    both_free = _profiles(tmp_path / "a")["big-any"]
    assert both_free["priceRange"] == {"now": True, "types": [H100, GB200],
                                       "perGPUHour": {"min": "4.50", "max": "9.00"},
                                       "perUnitHour": {"min": "4.50", "max": "9.00"}}
    assert [t["pricePerGPUHour"] for t in both_free["acceleratorTypes"]] == ["4.50", "9.00"]
    # Every H100 taken: a pod of the profile gets a GB200 now, at its price, not the first type's.
    h100_full = _profiles(tmp_path / "b", gpu_pod("fill-1", "team-a", gpus=4, node="dgx-h100-01"),
                          gpu_pod("fill-2", "team-a", gpus=8, node="dgx-h100-02"))["big-any"]
    assert h100_full["priceRange"]["types"] == [GB200] and h100_full["priceRange"]["now"]
    assert h100_full["priceRange"]["perGPUHour"] == {"min": "9.00", "max": "9.00"}
    assert h100_full["pricePerGPUHour"] == "9.00"


def test_nothing_free_prices_every_type_and_says_so(tmp_path: Path) -> None:
    full = _profiles(tmp_path, *[gpu_pod(f"fill-{rack}{tray}", "team-a", gpus=4, node=f"gb200-rack{rack}-tray{tray}")
                                 for rack in "ab" for tray in (1, 2)])
    nvl72 = full["nvl72"]
    assert nvl72["available"] == 0, "the four GB200 trays should be full"
    assert nvl72["priceRange"]["now"] is False and nvl72["priceRange"]["perGPUHour"]["min"] == "9.00"


def test_a_slice_price_is_money_to_the_cent(tmp_path: Path) -> None:
    mig = _profiles(tmp_path)["mig-priced"]
    assert mig["pricePerUnitHour"] == "0.43"  # 3.00 / 7 = 0.4286 per hour for a 1g.10gb slice
    assert mig["priceRange"]["perUnitHour"] == {"min": "0.43", "max": "0.43"}
    assert mig["acceleratorTypes"][0]["pricePerUnitHour"] == "0.43"


def test_a_pending_pod_counts_once(tmp_path: Path) -> None:
    waiting = gpu_pod("waits", "team-a", gpus=2, phase="Pending",
                      annotations={"kgwe.io/accelerator-type": f"{H100},{GB200}"})
    profiles = _profiles(tmp_path, waiting)
    # Beside the example's own 4 waiting pods (examples/cluster/pods-waiting.yaml): 8 H100s on premium-h100,
    # 4 + 2 x 4 GB200s on nvl72.
    assert (profiles["premium-h100"]["pending"], profiles["nvl72"]["pending"]) == (8, 12)
    assert sum(p["pending"] for p in profiles.values()) == 20 + 2
    assert sum(p["pendingPods"] for p in profiles.values()) == 4 + 1
    big = profiles["big-any"]  # the profile that offers exactly what it may run on, on its first type
    assert (big["pending"], big["pendingPods"]) == (2, 1)
    assert [t["pending"] for t in big["acceleratorTypes"]] == [2, 0]


def test_a_pending_pod_counts_on_the_profile_it_named(tmp_path: Path) -> None:
    waiting = gpu_pod("named", "team-a", gpus=1, phase="Pending",
                      annotations={"kgwe.io/accelerator-type": H100, "kgwe.io/profile": "big-any"})
    profiles = _profiles(tmp_path, waiting)
    # premium-h100 keeps only the example's ml-research/waiting (8 H100s).
    assert (profiles["big-any"]["pending"], profiles["premium-h100"]["pending"]) == (1, 8)
