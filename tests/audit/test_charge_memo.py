"""The audit's remembered charges (webhook/audit/charges.py) against a fresh `usage_charges` over a cluster that
changes under them: pods created, changed, bound, finished and deleted, nodes relabelled (sharing mode,
replicas), namespaces relabelled and HardwareProfiles changed, each step through the real store."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

from cluster_dirs import EXAMPLE_CONFIG, copy_example_cluster, gpu_pod

from webhook.assembly import build_runtime
from webhook.audit.charges import ChargeMemo
from webhook.config import load_config
from webhook.quotas.charging import usage_charges

NAMESPACES = ("ml-research", "team-a", "inference")
NODES = ("dgx-h100-01", "dgx-h100-02", "l4-mps-01", "l4-mps-02", "gone-node")
DEVICE_RESOURCE = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
KINDS = {"nvidia-h100-80gb": "dgx-h100-01", "nvidia-l4": "l4-mps-01"}


def _changed(obj: dict[str, Any], edit: Any) -> dict[str, Any]:
    """A new object, as the watch delivers a change (the store never changes one in place)."""
    made = copy.deepcopy(obj)
    edit(made)
    version = int(made["metadata"].get("resourceVersion") or "0")
    made["metadata"]["resourceVersion"] = str(version + 1)
    return made


def _random_pod(rng: random.Random, n: int) -> dict[str, Any]:
    annotations = {"kgwe.io/accelerator-type": rng.choice(list(KINDS)), "kgwe.io/tenant": rng.choice(NAMESPACES)}
    if rng.random() < 0.3:
        annotations["kgwe.io/sharing"] = rng.choice(("mps", "time-slicing", "exclusive"))
    if rng.random() < 0.3:
        annotations["kgwe.io/profile"] = rng.choice(("premium-h100", "shared-l4", "absent"))
    if rng.random() < 0.3:
        annotations["kgwe.io/gpu-memory"] = rng.choice(("1Mi", "20Gi", "bad"))
    node = rng.choice((*NODES, None))
    made = gpu_pod(f"p{n}", rng.choice(NAMESPACES), gpus=rng.randint(1, 4), node=node,
                   phase="Running" if node else "Pending", annotations=annotations,
                   resource=rng.choice(("nvidia.com/gpu",) * 4 + (DEVICE_RESOURCE,)))
    if rng.random() < 0.15:  # asks devices through a claim of its own
        made["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-gpus"}]
    return made


def _step(rng: random.Random, store: Any, model: Any, n: int) -> None:
    pods = list(model.pods.values())
    choice = rng.random()
    if choice < 0.3 or not pods:
        store.upsert(_random_pod(rng, n))
    elif choice < 0.45:
        store.delete(rng.choice(pods))
    elif choice < 0.6:
        pod = rng.choice(pods)
        store.upsert(_changed(pod, lambda p: p["spec"].__setitem__("nodeName", rng.choice(NODES))))
    elif choice < 0.7:
        store.upsert(_changed(rng.choice(pods), lambda p: p.setdefault("status", {}).__setitem__("phase", "Succeeded")))
    elif choice < 0.8:
        node = rng.choice(list(model.node_objects.values()))
        labels = {"nvidia.com/gpu.sharing-strategy": rng.choice(("mps", "time-slicing", "none")),
                  "nvidia.com/gpu.replicas": str(rng.randint(1, 8))}
        store.upsert(_changed(node, lambda o: o["metadata"].setdefault("labels", {}).update(labels)))
    elif choice < 0.9:
        namespace = rng.choice(list(model.namespaces.values()))
        store.upsert(_changed(namespace, lambda o: o["metadata"].setdefault("labels", {}).__setitem__(
            "kgwe.io/step", str(n))))
    else:
        profile = rng.choice(list(model.hardware_profiles.values()))
        mode = rng.choice(("mps", "exclusive", "time-slicing"))
        store.upsert(_changed(profile, lambda o: o["spec"].__setitem__("sharing", {"mode": mode, "gpuFraction": 0.5})))


def test_remembered_charges_equal_a_fresh_computation_over_a_changing_cluster(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    store = runtime.store
    store.min_rebuild_interval = 0
    memo = ChargeMemo()
    rng = random.Random(36)
    for n in range(40):
        store.upsert(_random_pod(rng, 1000 + n))
    looked_up = 0
    for n in range(300):
        model = store.snapshot(force=True)
        assert memo.usage_charges(model) == usage_charges(model), f"step {n}"
        looked_up += sum(1 for _ in model.pods) - memo.computed
        _step(rng, store, model, n)
    before = store.snapshot(force=True)
    memo.usage_charges(before)
    cpu_only = gpu_pod("cpu-only", "team-a", node="dgx-h100-01")
    cpu_only["spec"]["containers"][0]["resources"] = {}
    store.upsert(cpu_only)
    after = store.snapshot(force=True)
    assert memo.usage_charges(after) == usage_charges(after)
    # One new pod, and the facts of nodes rebuilt on every snapshot (a topology document's age counts): only
    # those are charged again.
    rebuilt = {name for name, facts in after.nodes.items() if before.nodes.get(name) is not facts}
    assert memo.computed == 1 + sum(1 for p in after.pods.values() if p["spec"].get("nodeName") in rebuilt
                                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    assert looked_up > 0
