"""Admission's quota picture (webhook/quotas/snapshot_picture.py): which pods it reads again between two
snapshots, against a plain key-by-key comparison, over seeded random changes of the kinds the store makes
(pods replaced, removed, added at the end, a relist in another order). Its pictures are compared with the
full computation in tests/quotas/test_incremental_picture.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from changing_cluster import random_pod, store_with_pods_without_claims

from webhook.cluster.pod_changes import PodList, changed_pods
from webhook.quotas.snapshot_picture import SnapshotPictures
from webhook.quotas.waiters import quota_picture


def _by_key(before: dict[str, object], now: dict[str, object]) -> set[str]:
    return {k for k in before.keys() | now.keys() if before.get(k) is not now.get(k)}


def _next(rng: random.Random, pods: dict[str, object], n: int) -> dict[str, object]:
    """The store's pods after a few changes: kept in the order first stored, new ones at the end."""
    now = dict(pods)
    for step in range(rng.randint(0, 6)):
        choice = rng.random()
        if choice < 0.35 and now:
            now[rng.choice(list(now))] = object()
        elif choice < 0.6 and now:
            del now[rng.choice(list(now))]
        elif choice < 0.95:
            now[f"ns/pod-{n}-{step}"] = object()
        else:
            keys = list(now)
            rng.shuffle(keys)
            now = {k: now[k] for k in keys}
    return now


@pytest.mark.parametrize("seed", range(5))
def test_the_pods_read_again_are_exactly_those_that_changed(seed: int) -> None:
    rng = random.Random(seed)
    pods: dict[str, object] = {f"ns/pod-{i}": object() for i in range(rng.randint(0, 30))}
    history = [pods]
    for n in range(300):
        before = rng.choice(history[-4:])  # an older snapshot too, as a request may hold
        now = _next(rng, history[-1], n)
        history.append(now)
        assert changed_pods(PodList(before), PodList(now)) == _by_key(before, now), f"seed {seed}, step {n}"
        assert changed_pods(PodList(now), PodList(before)) == _by_key(now, before), f"seed {seed}, step {n}"


def test_a_new_snapshot_reads_only_the_pods_that_changed(tmp_path: Path) -> None:
    rng = random.Random(5)
    store = store_with_pods_without_claims(tmp_path, rng)
    pictures = SnapshotPictures()
    pictures.picture(store.snapshot(force=True))
    before = dict(pictures._index._reads)
    store.upsert(random_pod(rng, 99))
    model = store.snapshot(force=True)
    assert pictures.picture(model) == quota_picture(model)
    moved = {key for key, read in pictures._index._reads.items() if before.get(key) is not read}
    assert moved == set(model.pods) - set(before)
