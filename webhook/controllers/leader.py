"""Leader election on a coordination.k8s.io/v1 Lease, so one `kgwe serve` replica runs the writing controllers.

The protocol is client-go's: a replica holds the lease while it renews it; a lease whose holder has not
renewed for `lease_seconds` (measured on this replica's clock from when it last saw the record change,
so clocks need not agree) may be taken over; every write carries the resourceVersion read, so two
replicas cannot both win. A leader that cannot renew for `renew_deadline_seconds` (shorter than the
lease) stops calling itself leader before anyone else may take over. Releasing on shutdown empties the
holder so a successor does not wait out the lease.

Without an API client (YAML mode) there is nobody to compete with: `is_leader()` is always true.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies.kernel.background import Task
from policies.kernel.records import Codec, Conflict, ObjectPlace, RecordStore, Unavailable

if TYPE_CHECKING:  # the client is imported where a cluster is read, not for a directory
    from kubernetes import client as k8s_client

log = logging.getLogger("kgwe.controllers.leader")

DEFAULT_LEASE_NAME = "kgwe-controllers"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_identity() -> str:
    # The pod name (HOSTNAME) keeps the lease readable; the suffix keeps two processes on one host apart.
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def pod_namespace(default: str = "kgwe-system") -> str:
    """The namespace this pod runs in: $POD_NAMESPACE (downward API), else the service account's, else `default`."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or default
    except OSError:
        return default


def micro_time(moment: datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with exactly six fractional digits, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease_spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _with_spec(spec: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"] = spec
    return obj


LEASE_CODEC: Codec[dict[str, Any]] = Codec(_lease_spec, _with_spec)


class LeaderElector:
    def __init__(
        self,
        api_client: k8s_client.ApiClient | None,
        *,
        namespace: str = "kgwe-system",
        name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        lease_seconds: float = 15.0,
        renew_deadline_seconds: float = 10.0,
        retry_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not 0 < renew_deadline_seconds < lease_seconds:
            raise ValueError("renew_deadline_seconds must be positive and shorter than lease_seconds")
        self.namespace = namespace
        self.name = name
        # The Lease is a record of the kernel's store: every write carries the resourceVersion read.
        place = ObjectPlace(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", name,
                            "coordination.k8s.io/v1", "Lease", namespace)
        self.lease = None
        if api_client is not None:
            from webhook.cluster.kube_json import KubeJson  # a cluster: its client is loaded already

            self.lease = RecordStore(KubeJson(api_client), place, LEASE_CODEC)
        self.identity = identity or default_identity()
        self.lease_seconds = lease_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.clock = clock
        self.on_change = on_change
        self._leader_until = 0.0  # clock() before which we may act as leader
        self._observed: tuple[Any, ...] | None = None  # the holder record last seen
        self._observed_at = 0.0
        self._was_leader = False
        # One round every retry_seconds, the first at start; stopping releases the lease. Without an API
        # server there is nothing to renew: one round at start announces the lead this replica always has.
        self.task = Task("leader-election", self.run_round, interval=retry_seconds if self.lease is not None else None,
                         run_at_start=True, on_stop=self.release)
        self.retry_seconds = retry_seconds

    @property
    def retry_seconds(self) -> float:
        """Seconds between two rounds (the task's interval; a change applies from the next round)."""
        return self._retry_seconds

    @retry_seconds.setter
    def retry_seconds(self, seconds: float) -> None:
        self._retry_seconds = seconds
        if self.lease is not None:
            self.task.interval = seconds

    def is_leader(self) -> bool:
        if self.lease is None:
            return True
        return self.clock() < self._leader_until

    # -- one round ------------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """Acquire the lease, or renew it if ours; True when this replica holds it afterwards."""
        if self.lease is None:
            return True
        now = self.clock()
        lease = self.lease.read()
        if not lease.version:
            return self._write("", self._spec(None), now)
        spec = lease.value
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"), lease.version)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder and holder != self.identity and now < self._observed_at + duration:
            self._leader_until = 0.0
            return False
        return self._write(lease.version, self._spec(spec if holder == self.identity else None, prior=spec), now)

    def _spec(self, own: dict[str, Any] | None, prior: dict[str, Any] | None = None) -> dict[str, Any]:
        stamp = micro_time(datetime.now(UTC))
        transitions = int((prior or {}).get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "acquireTime": (own or {}).get("acquireTime") or stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions if own is not None or prior is None else transitions + 1,
        }

    def _write(self, version: str, spec: dict[str, Any], started: float) -> bool:
        """Write the Lease at `version` ("": create it); True when this replica holds it afterwards."""
        assert self.lease is not None
        try:
            self.lease.write(spec, version)
        except Conflict:  # another replica wrote first (or deleted it): not ours this round
            self._leader_until = 0.0
            return False
        self._leader_until = started + self.renew_deadline_seconds
        return True

    def release(self) -> None:
        """Give the lease up now (only if we hold it) so a successor need not wait for it to expire."""
        if self.lease is None or not self.is_leader():
            return
        self._leader_until = 0.0
        try:
            lease = self.lease.read()
            if not lease.version or lease.value.get("holderIdentity") != self.identity:
                return
            spec = {**lease.value, "holderIdentity": "", "leaseDurationSeconds": 1,
                    "renewTime": micro_time(datetime.now(UTC))}
            self.lease.write(spec, lease.version)
        except (Conflict, Unavailable) as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        finally:
            self._notify()

    # -- the task ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Run the election alone (under a supervisor, the supervisor starts `task`)."""
        self.task.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the election and release the lease (the task's stop hook)."""
        self.task.stop(timeout)

    def run_round(self) -> None:
        """One round of the `leader-election` task: acquire or renew, then tell `on_change` of a change."""
        try:
            self.try_acquire_or_renew()
        except Unavailable as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
        self._notify()

    def _notify(self) -> None:
        leader = self.is_leader()
        if leader != self._was_leader:
            self._was_leader = leader
            # Without an API server there is no Lease and nobody to compete with: every process leads, which
            # is not news worth a line per worker.
            log.log(logging.INFO if self.lease is not None else logging.DEBUG, "%s %s leader (lease %s/%s)",
                    self.identity, "is now" if leader else "is no longer", self.namespace, self.name)
            if self.on_change is not None:
                self.on_change(leader)
