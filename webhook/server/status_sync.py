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
from webhook.inventory.capacity import Inventory
from webhook.inventory.profiles import hardware_profiles_view
from webhook.runtime import Runtime

log = logging.getLogger(__name__)
GROUP, VERSION = "kgwe.io", "v1alpha1"
StatusPatch = Callable[[str, dict[str, Any]], None]


def profile_statuses(runtime: Runtime) -> dict[str, list[dict[str, Any]]]:
    """name -> `status.available`: free and total GPUs (or slices) per type, whole numbers as the CRD types them."""
    model = runtime.store.snapshot()
    view = hardware_profiles_view(Inventory(model, runtime.config))
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
        self, runtime: Runtime, patch_status: StatusPatch, is_leader: Callable[[], bool], interval: float = 15.0
    ) -> None:
        self.runtime = runtime
        self.patch_status = patch_status
        self.is_leader = is_leader
        self.interval = interval
        self._settled = Settled()  # the statuses are a function of the snapshot and the configuration
        self.task = Task(
            "profile-status", self.sync_once, interval=interval, leader_only=True, is_leader=lambda: self.is_leader(),
            on_error=lambda _exc: log.exception("HardwareProfile status sync failed; the next run retries"),
        )

    def sync_once(self) -> list[str]:
        model = self.runtime.store.snapshot()
        config = self.runtime.config
        if self._settled.holds(model, config):
            return []
        failed = False
        written = []
        for name, available in profile_statuses(self.runtime).items():
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
