"""The costs computation as issue 36 made it (each pod's rate remembered per pod object, bucket sums from each
pod's lifetime interval, one pass over the spends, the API's windows kept warm as JSON) against the
straightforward one (every pod's rate computed again, every pod x every bucket, each level summed on its own),
on generated pods and windows (seeded): the same figures to the cent."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from spend_cluster import HOUR, MINUTE, NODES, SERVE, _pod, pick_now, write_cluster

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.inventory.capacity import Inventory
from webhook.inventory.chargeback import costs_view
from webhook.runtime import Runtime
from webhook.server.api_routes import api_router, joined
from webhook.spend.ledger import _seconds, bucket_spend, directory_spend
from webhook.spend.memo import RateMemo
from webhook.spend.rates import Owner, PodRate, pod_rates
from webhook.spend.report import money
from webhook.spend.service import SpendService
from webhook.spend.warm import WarmWindows
from webhook.spend.window import DAY, Window, parse_stamp
from webhook.usage.prometheus import PrometheusUnavailable

NOW = pick_now()
ZERO = Decimal(0)
SEED = 36


def straightforward_buckets(rates: Iterable[PodRate], buckets: list[tuple[float, float]],
                            now: float) -> dict[str, list[Decimal]]:
    """Every pod x every bucket, as ledger.py computed the chart before."""
    out: dict[str, list[Decimal]] = {}
    for rate in rates:
        if rate.hourly is None:
            continue
        row = out.setdefault(rate.tenant, [ZERO] * len(buckets))
        for index, (start, end) in enumerate(buckets):
            ran = rate.seconds_in(start, end, now)
            if ran > 0:
                row[index] += rate.hourly * _seconds(ran)
    return out


def _cents(buckets: dict[str, list[Decimal]]) -> dict[str, list[str]]:
    return {tenant: [money(v) for v in values] for tenant, values in buckets.items()}


def _random_rates(rng: random.Random, around: Window, count: int) -> list[PodRate]:
    prices = [None, Decimal("4.50"), Decimal("0.28"), Decimal(3) / 7 * Decimal("2.80"), Decimal("11.20")]
    rates = []
    for index in range(count):
        hourly = rng.choice(prices) if index % 3 else Decimal(rng.randint(1, 5000)) / 100
        start = None if rng.random() < 0.03 else float(round(around.start + rng.uniform(-5 * DAY, around.seconds
                                                                                            + DAY)))
        running = rng.random() < 0.4
        end = None if running or start is None else start + rng.choice(
            [0, 1, 59, 3600, 86400, rng.randint(0, 40 * DAY)])
        rates.append(PodRate(
            namespace=f"ns-{index % 7}", pod=f"p-{index}", uid=f"u-{index}", node="n", tenant=f"t-{index % 5}",
            type_id="x", share="whole", containers=(), workload=Owner("Pod", f"p-{index}"), run=None,
            hourly=hourly, equivalents=Decimal(1), whole=hourly, start=start, end=end, finished=end is not None))
    return rates


@pytest.mark.parametrize("seconds", [3600, 7237, 2 * DAY, 2 * DAY + 1, 7 * DAY, 30 * DAY, 30 * DAY + 3 * HOUR + 7])
@pytest.mark.parametrize("step", [60.0, 300.0])
def test_bucket_sums_from_lifetimes_match_pod_by_bucket_to_the_cent(seconds: int, step: float) -> None:
    rng = random.Random(f"{SEED}-{seconds}-{step}")
    now = NOW + rng.randint(0, int(step) - 1)
    window = Window.ending(now, seconds, step, "w")
    rates = _random_rates(rng, window, 400)
    buckets = window.buckets()
    assert _cents(bucket_spend(rates, buckets, now)) == _cents(straightforward_buckets(rates, buckets, now))


def _generated_pods(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Pods of every share kind on the test cluster's nodes, with random lifetimes around NOW."""
    shapes: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("h100-a", {"nvidia.com/gpu": "1"}, {}), ("h100-a", {"nvidia.com/gpu": "2"}, {}),
        ("a100-mig", {"nvidia.com/mig-3g.40gb": "1"}, {}),
        ("l4-mps", {"nvidia.com/gpu": "1"}, {"kgwe.io/gpu-fraction": "0.35"}),
        ("l4-ts", {"nvidia.com/gpu": "1"}, {}),
        ("h100-a", {"nvidia.com/gpu": "1"}, {"kgwe.io/hourly-cost": "3.333"}),
    ]
    assert {node["metadata"]["name"] for node in NODES} >= {shape[0] for shape in shapes}
    pods = []
    for index in range(count):
        node, limits, notes = rng.choice(shapes)
        start = NOW - rng.randint(0, 35 * DAY)
        end = None if rng.random() < 0.4 else min(NOW, start + rng.randint(0, 10 * DAY))
        owner = rng.choice([None, ("Job", f"job-{index % 11}"), ("ReplicaSet", f"web-{index % 5}-5d8f9")])
        pods.append(_pod(rng.choice(["team-a", "team-b", "inference"]), f"gen-{index}", node, limits, start, end,
                         annotations=dict(notes), owner=owner))
    return pods


def _generated_runtime(root: Path) -> Runtime:
    directory, config_file = write_cluster(root, NOW)
    pods = _generated_pods(random.Random(SEED), 300)
    (directory / "generated.yaml").write_text(yaml.safe_dump_all(pods, sort_keys=False), encoding="utf-8")
    return build_runtime(load_config(config_file), directory)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    return _generated_runtime(tmp_path_factory.mktemp("scale-spend"))


def _sums(spends: Iterable[Any], key: Any) -> dict[Any, str]:
    out: dict[Any, Decimal] = {}
    for spend in spends:
        out[key(spend)] = out.get(key(spend), ZERO) + spend.cost_seconds
    return {k: money(v) for k, v in out.items()}


@pytest.mark.parametrize("window_text", ["1h", "13h", "48h", "7d", "30d"])
def test_the_window_document_matches_the_straightforward_sums_to_the_cent(generated: Runtime,
                                                                          window_text: str) -> None:
    service = SpendService(lambda: generated.config, generated.store.snapshot, clock=lambda: NOW)
    doc = service.window_costs(window_text)
    model, config = generated.store.snapshot(), generated.config
    rates = list(pod_rates(model, config))
    window = Window(_unix(doc.window.start), _unix(doc.window.end), window_text)
    spends = directory_spend(rates, window.start, window.end, NOW)
    assert {row.tenant: row.cost for row in doc.tenants} == _sums(spends, lambda s: s.tenant)
    assert {(row.namespace, row.tenant): row.cost for row in doc.namespaces} == _sums(
        spends, lambda s: (s.namespace, s.tenant))
    assert {(row.namespace, row.kind, row.name): row.cost for row in doc.workloads} == _sums(
        spends, lambda s: (s.namespace, s.workload.kind, s.workload.name))
    assert {(row.namespace, row.pod): row.cost for row in doc.pod_costs} == _sums(
        spends, lambda s: (s.namespace, s.pod))
    assert doc.totals.cost == money(sum((s.cost_seconds for s in spends), ZERO))
    chart = {series.tenant: series.costs for series in doc.spend_over_time.tenants}
    assert chart == _cents(straightforward_buckets(rates, window.buckets(), NOW))
    costs = [Decimal(row.cost) for row in doc.pod_costs]
    assert costs == sorted(costs, reverse=True)


def _unix(text: str) -> float:
    found = parse_stamp(text)
    assert found is not None
    return found


def test_remembered_rates_are_the_rates_computed_again_after_each_change(tmp_path: Path) -> None:
    generated = _generated_runtime(tmp_path)  # its own: this test changes the cluster
    store = generated.store
    memo = RateMemo()

    def same() -> None:
        model = store.snapshot(force=True)
        assert memo.rates(model, generated.config) == list(pod_rates(model, generated.config))

    same()
    assert memo.computed == len(store.snapshot().pods)
    same()  # nothing changed: only the pods that name ResourceClaims are computed again
    claim_pods = memo.computed
    assert claim_pods < 10
    pod = next(p for p in store.objects("Pod") if p["metadata"]["name"] == "gen-3")
    changed = {**pod, "metadata": {**pod["metadata"], "annotations": {"kgwe.io/hourly-cost": "7.25"}}}
    store.upsert(changed)
    same()
    assert memo.computed == claim_pods + 1
    store.delete(changed)
    same()
    # The payer of a claim two pods name goes: the other pays for it now (its own object did not change).
    payer = next(p for p in store.objects("Pod") if p["metadata"]["name"] == SERVE[0])
    store.delete(payer)
    same()
    assert next(r for r in memo.rates(store.snapshot(), generated.config) if r.pod == SERVE[1]).hourly == Decimal(
        "5.60")
    # A namespace moves to another tenant (its label): every pod's tenant is resolved again.
    namespace = next(n for n in store.objects("Namespace") if n["metadata"]["name"] == "inference")
    store.upsert({**namespace, "metadata": {**namespace["metadata"],
                                            "labels": {**namespace["metadata"]["labels"], "kgwe.io/tenant": "ml"}}})
    same()
    assert "ml" in {r.tenant for r in memo.rates(store.snapshot(), generated.config)}
    # A node's facts change: its pods are computed again.
    node = next(n for n in store.objects("Node") if n["metadata"]["name"] == "l4-ts")
    store.upsert({**node, "metadata": {**node["metadata"], "labels": {**node["metadata"]["labels"],
                                                                      "nvidia.com/gpu.replicas": "2"}}})
    same()
    # Another configuration (prices): every pod is computed again.
    raw = generated.config.model_dump(by_alias=True)
    raw["pricing"]["perGPUHour"]["nvidia-h100-80gb"] = "6.00"
    other = type(generated.config).model_validate(raw)
    model = store.snapshot()
    assert memo.rates(model, other) == list(pod_rates(model, other))
    assert memo.computed == len(model.pods)


def test_the_api_answers_the_warm_window_as_the_service_computes_it(tmp_path: Path) -> None:
    directory, config_file = write_cluster(tmp_path, NOW)
    runtime = build_runtime(load_config(config_file), directory)
    service = SpendService(lambda: runtime.config, runtime.store.snapshot, clock=lambda: NOW)
    app = FastAPI()
    app.include_router(api_router(runtime, spend_service=service))
    with TestClient(app) as client:
        for window in ("7d", "30d", "48h"):  # two the Costs page offers (kept warm), one it does not
            first = client.get(f"/api/v1/costs?window={window}")
            again = client.get(f"/api/v1/costs?window={window}")
            assert first.status_code == again.status_code == 200
            expected = SpendService(lambda: runtime.config, runtime.store.snapshot,
                                    clock=lambda: NOW).window_costs(window).model_dump(mode="json")
            now = costs_view(Inventory(runtime.store.snapshot(), runtime.config))
            for answer in (first.json(), again.json()):
                assert {k: answer[k] for k in expected} == expected
                assert set(answer) == set(now) | set(expected)
                assert answer["hourlyCost"] == now["hourlyCost"]
        assert client.get("/api/v1/costs?window=forever").status_code == 400


def test_joined_documents_are_the_merged_object() -> None:
    now = {"generatedAt": "x", "pods": [{"a": 1}]}
    window = {"window": {"from": "a"}, "podCosts": []}
    assert orjson.loads(joined(orjson.dumps(now), orjson.dumps(window))) == {**now, **window}
    assert orjson.loads(joined(b"{}", orjson.dumps(window))) == window
    assert orjson.loads(joined(orjson.dumps(now), b"{}")) == now


def test_a_pod_whose_life_spans_the_window_costs_every_bucket_once() -> None:
    window = Window.ending(NOW, 3 * DAY, 60.0, "3d")
    rate = PodRate(namespace="a", pod="p", uid="u", node="n", tenant="t", type_id="x", share="whole", containers=(),
                   workload=Owner("Pod", "p"), run=None, hourly=Decimal("2.50"), equivalents=Decimal(1),
                   whole=None, start=window.start - HOUR, end=None, finished=False)
    late = replace(rate, pod="q", start=window.end - 30 * MINUTE)
    assert _cents(bucket_spend([rate, late], window.buckets(), NOW)) == {
        "t": ["60.00", "60.00", "61.25"]}


def test_warm_windows_are_computed_once_and_again_only_when_read_stale(tmp_path: Path) -> None:
    directory, config_file = write_cluster(tmp_path, NOW)
    runtime = build_runtime(load_config(config_file), directory)
    config = runtime.config
    cache_seconds = config.costs.cache_seconds
    service = SpendService(lambda: config, runtime.store.snapshot, clock=lambda: NOW)
    moment = [0.0]
    warm = WarmWindows(service, lambda: config, windows=("7d", "30d"), clock=lambda: moment[0])
    warm._pass()  # not started: its passes run here. The 30-day window, before anyone asks
    assert warm.builds == 1
    thirty = warm.answer("30d")
    assert orjson.loads(thirty.body) == service.window_costs("30d").model_dump(mode="json")
    assert thirty.namespaces == {"team-a", "team-b", "inference"}
    seven = warm.answer("7d")  # asked first: computed for the request
    assert warm.builds == 2 and warm.answer("48h").body != seven.body and warm.builds == 2  # 48h: not kept
    moment[0] += cache_seconds
    assert warm.answer("7d") is seven  # stale: still the answer, while the task computes the next
    warm._pass()
    warm._pass()
    assert warm.builds == 4  # 30d and 7d: each read since it was computed, one a pass
    assert warm.answer("7d") is not seven
    warm._pass()
    assert warm.builds == 4  # 7d read just now, not stale yet; 30d not read since
    moment[0] += cache_seconds
    warm._pass()
    assert warm.builds == 5  # 7d was read since it was computed, and is stale now
    warm._pass()
    assert warm.builds == 5  # nothing read since: nothing computed
    moment[0] += warm.idle_seconds + 1
    warm._pass()
    warm._pass()
    assert warm.builds == 5  # nobody asked for a while: let go, not computed
    warm.answer("30d")
    assert warm.builds == 6  # computed for the request that came after


def test_a_window_that_failed_is_tried_again_only_once_asked(tmp_path: Path) -> None:
    directory, config_file = write_cluster(tmp_path, NOW)
    runtime = build_runtime(load_config(config_file), directory)
    raw = runtime.config.model_dump(by_alias=True)
    raw["usage"]["prometheus"]["url"] = "http://127.0.0.1:1"  # nothing listens: Prometheus is away
    config = type(runtime.config).model_validate(raw)
    service = SpendService(lambda: config, runtime.store.snapshot, clock=lambda: NOW)
    moment = [0.0]
    warm = WarmWindows(service, lambda: config, windows=("30d",), clock=lambda: moment[0])
    with pytest.raises(PrometheusUnavailable):
        warm._pass()
    moment[0] += 1
    warm._pass()  # not tried again on its own (it would be every second, while Prometheus is away)
    with pytest.raises(PrometheusUnavailable):
        warm.answer("30d")  # a request computes it (nothing kept) and is told why it failed
    with pytest.raises(PrometheusUnavailable):
        warm._pass()  # asked after the failure: tried again
    assert warm.builds == 0
