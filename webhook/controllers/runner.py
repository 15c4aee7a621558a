"""The controllers `kgwe serve` runs beside the webhooks, behind one leader election, as background tasks.

The runner drives them without knowing the wings: the wings' controllers (gangs, quotas, the DRA collector)
come from the assembly (webhook/assembly.py `wing_controllers`), each a task, what follows the configuration
and what wakes when this replica becomes leader."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry

from policies.kernel.background import Task
from policies.kernel.supervisor import Supervisor
from policies.quota.budget import BudgetState
from webhook.assembly import GangStore, WingController, wing_controllers
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.controllers.bound_pods import BoundPodController, kube_pod_patcher
from webhook.controllers.leader import LeaderElector, pod_namespace
from webhook.controllers.permissions import NATIVE_GANG_NEEDS, ControllerReadiness, Need
from webhook.read_seams import GANG_READS
from webhook.spend.memo import RateMemo

if TYPE_CHECKING:  # the client is imported where a cluster is read, not for a directory
    from kubernetes import client as k8s_client

MIG_APPLY_SECONDS = 60.0
# How often the held first passes look whether what they wait for is there.
FIRST_PASSES_LOOK_SECONDS = 0.05


class FirstPasses:
    """Whether this replica's controllers act yet. `kgwe serve` holds their first passes, each over every pod, until
    `ready()` (the read API's light pass answered, bounded: webhook/server/serving.py), so that pass does not share
    the GIL with five of them on the way to ready (issue 36); until then a controller acts as a follower does, and
    then each is woken. Open from the start without `ready`."""

    def __init__(self, ready: Callable[[], bool] | None = None) -> None:
        self._ready = ready
        self._open = ready is None
        self._wakes: list[Callable[[], None]] = []
        # On demand, run at start: its thread ends once the passes are let go (or the supervisor stops).
        self.task = Task("first-passes", self._wait, interval=None, run_at_start=True) if ready is not None else None

    def is_open(self) -> bool:
        return self._open

    def after(self, wake: Callable[[], None]) -> None:
        """`wake` is called when the passes are let go (a controller's next pass comes then, not at its tick)."""
        self._wakes.append(wake)

    def _wait(self) -> None:
        assert self._ready is not None and self.task is not None
        while not self._ready():
            if self.task.stopping:
                return
            time.sleep(FIRST_PASSES_LOOK_SECONDS)
        self._open = True
        for wake in self._wakes:
            wake()


@dataclass
class Controllers:
    """The election and the leader-only controllers, as tasks of `supervisor` (whose leader is `elector`).

    `kgwe serve` adds its other background tasks to `supervisor` and starts it with the server; `start`
    and `stop` run the controllers alone.
    """

    elector: LeaderElector
    bound_pods: BoundPodController
    # Every replica: the CRDs and RBAC the controllers need (reasons /readyz fails with).
    readiness: ControllerReadiness | None = None
    # The wings' controllers, from the assembly: gangs (ungates complete gangs), quotas (releases pods their
    # tenant's quota holds), dra-garbage (deletes KGWE's templates and ComputeDomains no pod uses any more).
    wings: list[WingController] = field(default_factory=list)
    # webhook.migplan: MIGStrategies in mode apply get their nodes' nvidia.com/mig.config set (idle nodes only).
    mig: Task | None = None
    # When the controllers above (and the server's auditor and status sync, given `acting`) start acting.
    first: FirstPasses = field(default_factory=FirstPasses)
    supervisor: Supervisor = field(init=False)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.tasks(), is_leader=self.elector.is_leader)

    def tasks(self) -> list[Task]:
        """The election first (stopped last: it releases the lease once the controllers have ended)."""
        tasks = [self.elector.task, *([self.first.task] if self.first.task is not None else []), self.bound_pods.task]
        if self.readiness is not None:
            tasks.append(self.readiness.task)
        tasks.extend(wing.task for wing in self.wings)
        if self.mig is not None:
            tasks.append(self.mig)
        return tasks

    def acting(self) -> bool:
        """This replica leads and its first passes are let go: what every leader-only controller asks."""
        return self.first.is_open() and self.elector.is_leader()

    def wing(self, name: str) -> WingController | None:
        """The wing controller of that name (gangs, quotas, dra-garbage); None when it does not run here."""
        return next((wing for wing in self.wings if wing.name == name), None)

    def follow_config(self, config: Config) -> None:
        """A reloaded configuration, for the controllers that read one."""
        self.bound_pods.config = config
        for wing in self.wings:
            wing.follow_config(config)

    def start(self) -> None:
        self.supervisor.start()

    def stop(self) -> None:
        """Stop the tasks (the lease is released last), then take the cost gauge out of its registry."""
        self.supervisor.stop()
        self.bound_pods.unregister()


def build_controllers(
    store: ClusterStore,
    config: Config,
    api_client: k8s_client.ApiClient | None,
    *,
    namespace: str | None = None,
    interval_seconds: float = 5.0,
    registry: CollectorRegistry | None = REGISTRY,
    gang_store: GangStore | None = None,
    budgets: Callable[[], Mapping[str, BudgetState]] | None = None,
    rates: RateMemo | None = None,
    first_passes_after: Callable[[], bool] | None = None,
) -> Controllers:
    """Controllers over `store`; with no API client (YAML mode) nothing is patched and this replica leads.
    `rates`: the spend service's remembered pod rates, which the bound-pod controller's cost series share.
    `first_passes_after`: the controllers act (as leader) only once it answers True (`FirstPasses`)."""
    # A replica that becomes leader releases what waits at once, from the API's state (no event may come).
    woken: list[Callable[[], None]] = []

    def led(leader: bool) -> None:
        for wake in woken if leader else ():
            wake()

    namespace = namespace or pod_namespace()
    elector = LeaderElector(api_client, namespace=namespace, on_change=led)
    first = FirstPasses(first_passes_after)

    def acting() -> bool:
        return first.is_open() and elector.is_leader()

    patcher = kube_pod_patcher(api_client) if api_client is not None else None
    bound = BoundPodController(
        store, config, patcher, interval_seconds=interval_seconds, is_leader=acting, registry=registry,
        rates=rates,
    )
    wings = wing_controllers(store, config, api_client, acting, interval_seconds=interval_seconds,
                             gang_store=gang_store, budgets=budgets)
    woken.extend(wing.on_leading for wing in wings)
    first.after(bound.task.wake)
    for wing in wings:
        first.after(wing.task.wake)
    readiness = None
    if api_client is not None:
        def native_needs() -> tuple[Need, ...]:
            return NATIVE_GANG_NEEDS if GANG_READS.value.native_gangs(store.snapshot(), config.gangs) else ()

        readiness = ControllerReadiness(api_client, namespace, extra_needs=native_needs)
    mig = None
    if api_client is not None:
        from webhook.cluster.kube_json import KubeJson
        from webhook.migplan.apply import MigApplier

        applier = MigApplier(store, KubeJson(api_client), acting, manager=config.mig_manager)
        # A minute is far below any sensible rebalanceInterval; each strategy's interval gates its own changes.
        mig = Task("mig-apply", applier.run_pass, interval=MIG_APPLY_SECONDS, leader_only=True, is_leader=acting)
    return Controllers(elector, bound, readiness, wings, mig, first)
