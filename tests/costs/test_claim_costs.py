"""GPUs held through a pod's own ResourceClaims are priced once (docs/costs.md, webhook/dra/holders.py): a
claim several pods name goes to its running pod that started first; the devices of the scheduler's claim
that stand for `nvidia.com/gpu` are the pod's demand, priced there; a GPU request beside a claim of one's
own is two devices, each charged once; a device the slices do not describe is of its node's type.

The pods are added to the test cluster of spend_cluster.py (its dra-h200 node publishes seven whole H200s
through DRA; H200 5.60 an hour)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from spend_cluster import _claim, _pod, pick_now, write_cluster

from webhook.assembly import build_runtime
from webhook.cluster.model import ClusterModel
from webhook.config import Config, load_config
from webhook.controllers.bound_pods import cost_series
from webhook.inventory.capacity import Inventory
from webhook.spend.rates import PodRate, pod_rates

NOW = pick_now()
H = 3600
NS = "team-a"


def _own(name: str, claims: list[str], limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "cuda",
            "resources": {"limits": dict(limits or {}), "claims": [{"name": c} for c in claims]}}


def _named(name: str, claim: str, start: float, end: float | None) -> dict[str, Any]:
    """A pod on dra-h200 whose container `main` uses the ResourceClaim `claim` it names directly."""
    return _pod(NS, name, "dra-h200", {}, start, end, container=_own("main", ["gpu"]),
                extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]})


def _extended(name: str, claim: str, mappings: list[dict[str, str]] | None, start: float) -> dict[str, Any]:
    """A pod asking `nvidia.com/gpu: 1` and one device of the class as an extended resource, which the
    scheduler serves with one claim of its own for both (DRA extended resources, KEP-5004)."""
    limits = {"nvidia.com/gpu": "1", "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}
    pod = _pod(NS, name, "dra-h200", limits, start, None)
    status: dict[str, Any] = {"resourceClaimName": claim}
    if mappings is not None:
        status["requestMappings"] = mappings
    pod["status"]["extendedResourceClaimStatus"] = status
    return pod


def _scheduler_claim(name: str, devices: dict[str, str]) -> dict[str, Any]:
    claim = _claim(NS, name, len(devices), "dra-h200", list(devices.values()))
    results = claim["status"]["allocation"]["devices"]["results"]
    for result, request in zip(results, devices, strict=True):
        result["request"] = request
    return claim


MAPPINGS = [
    {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"},
    {"containerName": "main", "resourceName": "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
     "requestName": "container-0-request-1"},
]


def _objects() -> list[dict[str, Any]]:
    both = _pod(NS, "both", "dra-h200", {}, NOW - 2 * H, None,
                extra_spec={"resourceClaims": [{"name": "own", "resourceClaimName": "both-own"}]})
    both["spec"]["containers"] = [_own("main", [], {"nvidia.com/gpu": "1"}), _own("side", ["own"])]
    return [
        # A claim of two pods: the first started has finished, so the one running pays.
        _claim(NS, "relay", 1, "dra-h200", ["gpu-3"]),
        _named("relay-first", "relay", NOW - 6 * H, NOW - 2 * H),
        _named("relay-second", "relay", NOW - 5 * H, None),
        # A claim of two finished pods: the first started pays for it (its past, in directory mode).
        _claim(NS, "past", 1, "dra-h200", ["gpu-3"]),
        _named("past-late", "past", NOW - 9 * H, NOW - 8 * H),
        _named("past-early", "past", NOW - 10 * H, NOW - 7 * H),
        # The scheduler's claim: the device that stands for nvidia.com/gpu is the demand's, priced there.
        _scheduler_claim("ext-claim", {"container-0-request-0": "gpu-4", "container-0-request-1": "gpu-5"}),
        _extended("ext", "ext-claim", MAPPINGS, NOW - H),
        _extended("ext-unmapped", "ext-claim", None, NOW - H),  # no mappings: the claim is left out whole
        # A GPU asked as a resource beside a claim of its own: two devices, each charged once.
        _claim(NS, "both-own", 1, "dra-h200", ["gpu-6"]),
        both,
        # A device the slices do not describe (yet): of its node's type.
        _claim(NS, "unseen", 1, "dra-h200", ["gpu-99"]),
        _named("unseen", "unseen", NOW - H, None),
    ]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClusterModel, Config]:
    directory, config_file = write_cluster(tmp_path_factory.mktemp("claims"), NOW)
    (directory / "claims.yaml").write_text(yaml.safe_dump_all(_objects()), encoding="utf-8")
    runtime = build_runtime(load_config(config_file), directory)
    return runtime.store.snapshot(), runtime.config


@pytest.fixture(scope="module")
def rates(snapshot: tuple[ClusterModel, Config]) -> dict[str, PodRate]:
    return {r.pod: r for r in pod_rates(*snapshot) if r.namespace == NS}


def test_a_shared_claim_goes_to_its_first_started_running_pod_else_its_first_started(
    rates: dict[str, PodRate],
) -> None:
    assert rates["relay-second"].hourly == Decimal("5.60") and "relay-first" not in rates
    assert rates["past-early"].hourly == Decimal("5.60") and "past-late" not in rates


def test_the_devices_that_stand_for_nvidia_gpu_are_charged_once(rates: dict[str, PodRate]) -> None:
    # 5.60 for nvidia.com/gpu (the demand) + 5.60 for the class's device; not 16.80.
    assert (rates["ext"].hourly, rates["ext"].equivalents) == (Decimal("11.20"), Decimal(2))
    assert rates["ext-unmapped"].hourly == Decimal("5.60")


def test_a_gpu_request_beside_a_claim_of_its_own_is_two_devices(
    rates: dict[str, PodRate], snapshot: tuple[ClusterModel, Config]
) -> None:
    both = rates["both"]
    assert (both.hourly, both.equivalents, both.whole, both.share) == (
        Decimal("11.20"), Decimal(2), Decimal("11.20"), "dra")
    assert both.containers == (("main", Decimal("0.5")), ("side", Decimal("0.5")))
    series = {k[2]: v.hourly for k, v in cost_series(snapshot[0].pods.values(), *snapshot).items() if k[1] == "both"}
    assert series == {"main": Decimal("5.60"), "side": Decimal("5.60")}
    # The rate now agrees: one row of 11.20 for the pod.
    costs = [c for c in Inventory(*snapshot).pod_costs if (c.namespace, c.name) == (NS, "both")]
    assert [(c.type_id, c.hourly) for c in costs] == [("nvidia-h200-141gb", Decimal("11.20"))]


def test_a_device_the_slices_do_not_describe_is_of_its_nodes_type(rates: dict[str, PodRate]) -> None:
    assert (rates["unseen"].type_id, rates["unseen"].hourly, rates["unseen"].share) == (
        "nvidia-h200-141gb", Decimal("5.60"), "dra")


def test_the_rate_now_charges_a_shared_claim_once(snapshot: tuple[ClusterModel, Config]) -> None:
    costs = {(c.namespace, c.name): c.hourly for c in Inventory(*snapshot).pod_costs}
    assert costs[(NS, "relay-second")] == Decimal("5.60") and (NS, "relay-first") not in costs
    assert (NS, "past-early") not in costs and (NS, "past-late") not in costs  # finished: no rate now
