"""The gangs' members kept across snapshots (webhook/gangs/members.py) against a walk of every pod of the same
snapshot, after every one of a seeded random sequence of changes through the real store: pods added, replaced with
another gang label, size, phase or deletionTimestamp, bound, deleted and stored again, relists in another order;
older snapshots asked between newer ones. Equal means in the same order too (gangs by their first member, members in
the store's order): the release order and the records kept depend on it. Answers handed out earlier must not move."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from cluster_dirs import EXAMPLE_CONFIG, gpu_pod

from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.cluster.pod_changes import PodList
from webhook.config import load_config
from webhook.gang_spec import A_GANG_SIZE, LABEL_GANG, membership
from webhook.gangs.members import GangPods, KeptGangPods

NAMESPACES = ("team-a", "team-b")
GANGS = ("llm", "vision", "audio", "rl")

Shape = list[tuple[str, int, list[int]]]


def walked(model: ClusterModel) -> dict[str, GangPods]:
    """What the kept answer must equal: every pod read, in the snapshot's order."""
    out: dict[str, GangPods] = {}
    for pod in model.pods.values():
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        member = membership(pod)
        if member is None:
            continue
        group = out.setdefault(member.key, GangPods(member.size))
        group.size = max(group.size, member.size)
        group.pods.append(pod)
    return out


def shape(answer: dict[str, GangPods]) -> Shape:
    """The answer by identity: each gang, its size, its pods (the store's own objects)."""
    return [(key, group.size, [id(pod) for pod in group.pods]) for key, group in answer.items()]


def _pod(rng: random.Random, n: int) -> dict[str, Any]:
    node = rng.choice(("dgx-h100-01", None, None))
    pod = gpu_pod(f"p{n}", rng.choice(NAMESPACES), gpus=rng.randint(1, 2), node=node,
                  phase="Running" if node else "Pending")
    if rng.random() < 0.7:
        _regang(rng, pod)
    return pod


def _regang(rng: random.Random, pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    meta.setdefault("labels", {})[LABEL_GANG] = rng.choice(GANGS)
    meta.setdefault("annotations", {})[A_GANG_SIZE] = rng.choice(("1", "2", "3", "4", "0", "bad"))


def _edit(rng: random.Random, pod: dict[str, Any]) -> None:
    made = rng.random()
    if made < 0.1:  # into a gang in place, or another one: the walk answers
        _regang(rng, pod)
    elif made < 0.4:
        pod["metadata"].get("labels", {}).pop(LABEL_GANG, None)
    elif made < 0.55:
        pod["metadata"].setdefault("annotations", {})[A_GANG_SIZE] = str(rng.randint(1, 5))
    elif made < 0.7:
        pod.setdefault("status", {})["phase"] = rng.choice(("Succeeded", "Failed", "Running"))
    elif made < 0.8:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T22:00:00Z"
    else:
        pod["spec"]["nodeName"] = "dgx-h100-02"


def _change(rng: random.Random, store: ClusterStore, model: ClusterModel, n: int) -> None:
    pods = list(model.pods.values())
    for _ in range(rng.choice((1, 1, 1, 2, 5))):  # some snapshots see several changes at once
        choice = rng.random()
        if choice < 0.3 or not pods:
            store.upsert(_pod(rng, n * 10 + _))
        elif choice < 0.45:
            store.delete(rng.choice(pods))
        elif choice < 0.85:
            made = copy.deepcopy(rng.choice(pods))
            _edit(rng, made)
            store.upsert(made)
        elif choice < 0.92:  # deleted and stored again: it goes to the end
            pod = rng.choice(pods)
            store.delete(pod)
            store.upsert(copy.deepcopy(pod))
        else:  # a relist, in another order
            shuffled = [copy.deepcopy(p) if rng.random() < 0.2 else p for p in pods]
            rng.shuffle(shuffled)
            store.replace_kind("Pod", shuffled)


class CountedWalks(KeptGangPods):
    """The kept members, counting the walks of every pod (a relist, a pod that became a member in place)."""

    walks = 0

    def _walk(self, now: PodList) -> None:
        self.walks += 1
        super()._walk(now)


@pytest.mark.parametrize("seed", [36, 37, 38, 39])
def test_the_kept_members_equal_a_walk_of_every_pod_after_every_change(seed: int) -> None:
    store = ClusterStore(load_config(EXAMPLE_CONFIG).accelerator_table(), min_rebuild_interval=0.0)
    rng = random.Random(seed)
    for n in range(40):
        store.upsert(_pod(rng, 10_000 + n))
    kept = CountedWalks()
    models: list[ClusterModel] = []
    handed: list[tuple[dict[str, GangPods], Shape]] = []
    older_rng = random.Random(seed + 1000)  # its own: the changes stay those of `rng`
    for n in range(400):
        model = store.snapshot(force=True)
        answer = kept.members(model)
        assert shape(answer) == shape(walked(model)), f"seed {seed}, change {n}"
        handed.append((answer, shape(answer)))
        models.append(model)
        if older_rng.random() < 0.15:  # a request still holding an older snapshot, then the newest again
            older = older_rng.choice(models[-6:])
            assert shape(kept.members(older)) == shape(walked(older)), f"older, seed {seed}, change {n}"
            assert shape(kept.members(model)) == shape(walked(model)), f"back, seed {seed}, change {n}"
        _change(rng, store, model, n)
    # Nothing handed out moved when the kept state moved on.
    assert all(shape(answer) == was for answer, was in handed)
    # The sequence had gangs coming and going in several orders, and moved them as well as walked (relists, pods
    # stored again and older snapshots are walked).
    assert len({key for answer, _ in handed for key in answer}) >= 6
    assert len({tuple(key for key, _, _ in was) for _, was in handed}) > 20
    assert 0 < kept.walks < len(handed) * 0.6, kept.walks


def test_an_unchanged_snapshot_hands_out_the_same_answer_and_a_change_moves_only_its_gang() -> None:
    store = ClusterStore(load_config(EXAMPLE_CONFIG).accelerator_table(), min_rebuild_interval=0.0)
    rng = random.Random(5)
    for n in range(30):
        pod = _pod(rng, n)
        _regang(rng, pod)
        pod["metadata"]["annotations"][A_GANG_SIZE] = "3"
        store.upsert(pod)
    kept = CountedWalks()
    first = kept.members(store.snapshot(force=True))
    store.upsert(gpu_pod("unrelated", "team-a", gpus=1))  # no gang: the answer is the same dict
    assert kept.members(store.snapshot(force=True)) is first
    member = next(iter(first.values())).pods[-1]
    made = copy.deepcopy(member)
    made["metadata"]["annotations"][A_GANG_SIZE] = "4"
    store.upsert(made)
    moved = kept.members(store.snapshot(force=True))
    gang = membership(made).key  # type: ignore[union-attr]
    assert moved[gang].size == 4 and moved[gang].pods[-1] is made and first[gang].pods[-1] is member
    assert all(moved[key] is group for key, group in first.items() if key != gang)
    store.delete(next(iter(first.values())).pods[0])  # a gang's first member leaves
    store.upsert(_pod(rng, 99))
    assert shape(kept.members(store.snapshot(force=True))) == shape(walked(store.snapshot()))
    assert kept.walks == 1  # the first answer only
