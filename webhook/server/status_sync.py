"""Status that `kgwe serve` keeps current in a cluster: `HardwareProfile.status.available` (leader only)
and each GPUPolicy's `Ready` condition (written by the policy sync of every replica; the same answer)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from policies.kernel.background import Task
from webhook.cluster.settled import Settled
from webhook.inventory.cache import InventoryCache
from webhook.inventory.capacity import Inventory
from webhook.inventory.profiles import hardware_profiles_view
from webhook.runtime import Runtime

log = logging.getLogger(__name__)
GROUP, VERSION = "kgwe.io", "v1alpha1"
StatusPatch = Callable[[str, dict[str, Any]], None]


# The inventory a sync reads, or None while there is none yet (the next run tries again).
InventorySource = Callable[[], Inventory | None]


def built_now(runtime: Runtime) -> InventorySource:
    """An inventory built for each sync from the current snapshot (every pod read): for a process that keeps
    none warm. A server shares its read API's (`kept_by`)."""
    return lambda: Inventory(runtime.store.snapshot(), runtime.config)


def kept_by(cache: InventoryCache) -> InventorySource:
    """The last inventory `cache` built, never waiting for a build: the server's read API keeps it warm, each
    build computing only the pods that changed, where an inventory of its own read every pod of the cluster
    (10 CPU-s at 150,000 pods, every change, on the GIL admission needs; issue 36)."""

    def ready() -> Inventory | None:
        state = cache.ready_state()
        return state[0] if state is not None else None

    return ready


def profile_statuses(inventory: Inventory) -> dict[str, list[dict[str, Any]]]:
    """name -> `status.available`: free and total GPUs (or slices) per type, whole numbers as the CRD types them."""
    view = hardware_profiles_view(inventory)
    out: dict[str, list[dict[str, Any]]] = {}
    for profile in view["profiles"]:
        out[profile["name"]] = [
            {"acceleratorType": row["id"], "gpus": max(0, math.floor(row["available"])),
             "total": max(0, math.floor(row["total"]))}
            for row in profile["acceleratorTypes"]
        ]
    return out


class ProfileStatusSync:
    """Every `interval` seconds, on the leader: write `status.available` of the HardwareProfiles that changed."""

    def __init__(
        self, runtime: Runtime, patch_status: StatusPatch, is_leader: Callable[[], bool], interval: float = 15.0,
        cache: InventoryCache | None = None,
    ) -> None:
        """`cache`: the inventory the server's read API keeps warm, read instead of one built per sync."""
        self.runtime = runtime
        self.inventory = kept_by(cache) if cache is not None else built_now(runtime)
        self.patch_status = patch_status
        self.is_leader = is_leader
        self.interval = interval
        self._settled = Settled()  # the statuses are a function of the snapshot and the configuration
        self.task = Task(
            "profile-status", self.sync_once, interval=interval, leader_only=True, is_leader=lambda: self.is_leader(),
            on_error=lambda _exc: log.exception("HardwareProfile status sync failed; the next run retries"),
        )

    def sync_once(self) -> list[str]:
        inventory = self.inventory()
        if inventory is None:
            return []
        # The statuses are those of the snapshot and configuration the inventory was built from.
        model, config = inventory.model, inventory.config
        if self._settled.holds(model, config):
            return []
        failed = False
        written = []
        for name, available in profile_statuses(inventory).items():
            current = (model.hardware_profiles.get(name) or {}).get("status") or {}
            if current.get("available") == available:
                continue
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            try:
                self.patch_status(name, {"available": available, "lastUpdated": stamp})
                written.append(name)
            except Exception as exc:  # one profile's failure must not stop the others
                log.warning("HardwareProfile %s: status not written: %s", name, exc)
                failed = True
        self._settled.record(model, config, complete=not failed)
        return written


def custom_status_patcher(api_client: Any, plural: str) -> StatusPatch:
    """A merge patch of `status` on a cluster-scoped kgwe.io object, via its status subresource."""
    from kubernetes import client as k8s

    api = k8s.CustomObjectsApi(api_client)

    def patch(name: str, status: dict[str, Any]) -> None:
        api.patch_cluster_custom_object_status(GROUP, VERSION, plural, name, {"status": status})

    return patch


def gpu_policy_condition_writer(api_client: Any) -> Callable[[str, dict[str, Any]], None]:
    patch = custom_status_patcher(api_client, "gpupolicies")

    def write(name: str, condition: dict[str, Any]) -> None:
        patch(name, {"conditions": [condition]})

    return write
