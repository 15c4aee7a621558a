"""`/metrics` in parts (webhook/server/metrics_parts.py) and the per-pod cost families sampled as read
(webhook/controllers/lazy_gauge.py): the same text, byte for byte, as prometheus_client renders from the samples
a `GaugeMetricFamily` holds."""

from __future__ import annotations

import random
from decimal import Decimal

from held_families import HeldFamilies
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from webhook.controllers.bound_pods import SERIES_LABELS, HourlyCostCollector, SeriesValues
from webhook.server.metrics_parts import latest_parts

ODD = ('quote"d', "back\\slash", "new\nline", "ünïcode", "", "plain")


def _series(count: int, seed: int) -> dict[tuple[str, ...], SeriesValues]:
    rng = random.Random(seed)
    out = {}
    for number in range(count):
        key = tuple(f"{label}-{number % 7}-{rng.choice(ODD)}" for label in SERIES_LABELS)
        out[key] = SeriesValues(Decimal(rng.randint(0, 9999)) / 100, Decimal(rng.randint(1, 8)) / 7,
                                Decimal(rng.randint(0, 99999)) / 1000)
    return out


def test_the_parts_are_the_registrys_text_byte_for_byte() -> None:
    collector = HourlyCostCollector()
    collector.replace(_series(1000, 36))
    registry = CollectorRegistry()
    registry.register(collector)
    Counter("kgwe_test_things", "Things, counted", ["kind"], registry=registry).labels("a").inc(3)
    Histogram("kgwe_test_seconds", "How long", registry=registry).observe(0.2)
    whole = generate_latest(registry)
    for per_part in (1, 7, 333, 1000, 5000):
        parts = latest_parts(registry, per_part=per_part)
        assert b"".join(parts) == whole
    assert len(latest_parts(registry, per_part=100)) > 10  # the cost families come in slices


def test_sampled_as_read_is_what_the_families_held() -> None:
    collector = HourlyCostCollector()
    collector.replace(_series(300, 7))
    lazy, held = CollectorRegistry(), CollectorRegistry()
    lazy.register(collector)
    held.register(HeldFamilies(collector))
    assert generate_latest(lazy) == generate_latest(held)
    for made, kept in zip(lazy.collect(), held.collect(), strict=True):
        assert made == kept and len(made.samples) == len(kept.samples) == 300
        assert made.samples[5] == kept.samples[5] and made.samples[10:20] == kept.samples[10:20]


def test_no_series_renders_the_families_empty() -> None:
    collector = HourlyCostCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    assert b"".join(latest_parts(registry)) == generate_latest(registry)
    assert b"# TYPE kgwe_pod_hourly_cost gauge" in generate_latest(registry)
