"""The one place that assembles a `Runtime` with its cluster source, for `kgwe serve`, `kgwe review` and
the reports (`kgwe nodes`, `kgwe gangs`, ...).

Four ways, one module, so the commands cannot drift apart:

- `from_directory(config, dir)`: the YAML files read once (`kgwe review`, reports with `--cluster`);
- `from_directory(config, dir, watch=True)`: the files watched and re-read (`kgwe serve --cluster`); a
  directory keeps no shared state (no gang records: its views plan them from its pods on every call);
- `from_api(config, api, serving=True)`: the API watched for as long as the server runs, and the
  collaborators that reach the API on the request path (SubjectAccessReviews, DRA claim templates) on a
  client that never retries past the admission deadline;
- `from_api(config, api, serving=False)`: the API listed once for a report, the watch stopped after.

Every way builds the runtime with `build_runtime` (below) after the cluster store is filled, so
the cluster's GPUPolicy objects are compiled with the built-in policies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from policies.kernel.background import Task
from policies.quota.budget import BudgetState
from policies.rbac.evaluator import Authorizer
from policies.runtime.policy_runtime import PolicyRuntime
from webhook.cluster.model import ClusterStore
from webhook.cluster.workloads import WORKLOAD_KINDS
from webhook.config import Config
from webhook.dra.gate import ClaimGate
from webhook.dra.kind import ClaimKind
from webhook.dra.templates import ClaimTemplateHook
from webhook.gangs.admission import GangGate, GangHook
from webhook.gangs.ledger import GangStore as GangStore  # the gang records `kgwe serve` hands the controllers
from webhook.gangs.plan import plan_sized_gang
from webhook.quotas.gate import QuotaGate
from webhook.rbac.gate import RbacGate
from webhook.runtime import Runtime
from webhook.spend.service import BudgetBook, SpendService
from webhook.workload_kinds import BUILTIN_KINDS
from webhook.workloads.hook import RequesterHook
from webhook.workloads.kind import WorkloadKind

log = logging.getLogger("kgwe.assembly")

# How long the first list of the cluster's objects may take before a server serves (not ready) anyway,
# and before a report gives up.
INITIAL_LIST_SECONDS = 60


class ClusterNotListed(RuntimeError):
    """A report's cluster objects were not all listed in time (the API is slow or unreachable)."""


@dataclass
class Assembly:
    """A runtime and the parts that run beside it."""

    runtime: Runtime
    api_client: Any | None  # kubernetes ApiClient when the cluster is read from the API; else None
    stop_source: Callable[[], None]  # stops the directory watch or the API watch (a no-op when none runs)
    # The running source's background tasks (policies/kernel/background.py), for a supervisor to report and stop.
    source_tasks: list[Task] = field(default_factory=list)


def workload_kind_names(config: Config) -> list[str]:
    """The kinds the store keeps as workloads: the built-in table plus the configuration's kinds."""
    return [*WORKLOAD_KINDS, *(k.kind for k in config.workloads.kinds)]


def workload_kinds(config: Config) -> list[tuple[str, str, str]]:
    """(kind, apiVersion, resource) of every workload kind the model keeps from the API (none when workload
    admission is off): the built-in table, an admin's entry replacing a built-in one of the same group."""
    if not config.workloads.enabled:
        return []
    specs = {(k.group, k.kind): (k.kind, k.api_version, k.resource) for k in BUILTIN_KINDS}
    for k in config.workloads.kinds:
        specs[(k.group, k.kind)] = (k.kind, f"{k.group}/{k.version}" if k.group else k.version, k.resource)
    return list(specs.values())


def _nothing() -> None:
    return None


def _ignore(_config: Config) -> None:
    return None


@dataclass
class WingController:
    """A wing's background controller as the controllers' runner drives it (webhook/controllers/runner.py):
    its task (leader-only), what follows a reloaded configuration, what a replica that becomes leader wakes."""

    name: str  # gangs | quotas | dra-garbage
    task: Task
    controller: Any  # the wing's controller itself (GangController, QuotaController, ClaimGarbageCollector)
    follow_config: Callable[[Config], None] = _ignore
    on_leading: Callable[[], None] = _nothing


def wing_controllers(
    store: ClusterStore,
    config: Config,
    api_client: Any | None,
    is_leader: Callable[[], bool],
    *,
    interval_seconds: float = 5.0,
    gang_store: GangStore | None = None,
    budgets: Callable[[], Mapping[str, BudgetState]] | None = None,
) -> list[WingController]:
    """The wings' controllers over `store`, in the order they start: the gang controller (with a gang store:
    the records live in the API), the quota controller, the DRA claim-template collector (in a cluster, unless
    `dra.removeUnused` is off). With no API client nothing is written."""
    from webhook.gangs.controller import GangController, kube_native_writer, kube_pod_writer
    from webhook.quotas.controller import QuotaController
    from webhook.quotas.writer import kube_quota_writer

    found: list[WingController] = []
    if gang_store is not None:
        gangs = GangController(
            store, gang_store, config, kube_pod_writer(api_client) if api_client is not None else None,
            interval_seconds=interval_seconds, is_leader=is_leader,
            native=kube_native_writer(api_client) if api_client is not None else None,
        )
        store.add_listener(gangs.woken_by)
        found.append(WingController("gangs", gangs.task, gangs, follow_config=partial(setattr, gangs, "config")))
    quotas = QuotaController(store, config, kube_quota_writer(api_client) if api_client is not None else None,
                             is_leader=is_leader, budgets=budgets)
    # A replica that becomes leader releases what waits at once, from the API's state (no event may come).
    found.append(WingController("quotas", quotas.task, quotas, follow_config=partial(setattr, quotas, "config"),
                                on_leading=quotas.wake))
    if api_client is not None and config.dra.remove_unused:
        from webhook.cluster.kube_json import KubeJson
        from webhook.dra.garbage import ClaimGarbageCollector

        garbage = ClaimGarbageCollector(store, KubeJson(api_client), grace_seconds=config.dra.unused_grace_seconds,
                                        is_leader=is_leader)
        found.append(WingController("dra-garbage", garbage.task, garbage))
    return found


def register_wings(runtime: Runtime) -> None:
    """The wings' kinds, gates and hooks on the runtime's admission (webhook/admission/seams.py), in the order
    they run. A new gate or workload kind is one file in its wing and one line here (docs/architecture.md)."""
    seams = runtime.admission.seams
    workloads = WorkloadKind(runtime, plan_sized_gang)
    quota = QuotaGate(runtime)
    seams.kinds.extend([workloads, ClaimKind(runtime)])
    seams.before.append(RequesterHook(workloads))
    # The claims gate first: a pod that asks GPUs both ways is refused before its quota is judged.
    seams.gates.extend([ClaimGate(runtime, quota), RbacGate(runtime), quota, GangGate()])
    seams.after.extend([GangHook(runtime), ClaimTemplateHook(runtime)])


def build_runtime(
    config: Config,
    cluster_dir: str | Path | None,
    *,
    store: ClusterStore | None = None,
    authorizer: Authorizer | None = None,
    load_policies: bool = True,
    one_shot: bool = False,
) -> Runtime:
    """Assemble a runtime with every wing registered. With `cluster_dir` the YAML directory is loaded now;
    otherwise the caller attaches an API source to `runtime.store` (see `kgwe serve`). `one_shot`: the runtime
    answers a handful of requests and exits (`kgwe review`, `explain`, reports), so its Rego is served by
    regorus' interpreter: compiling the policy set for the VM costs more CPU than a few answers save."""
    store = store or new_store(config)
    if cluster_dir is not None:
        from webhook.cluster.yaml_source import YamlDirectorySource

        YamlDirectorySource(cluster_dir, store).load()
    runtime = Runtime(config=config, store=store, authorizer=authorizer)
    runtime.budgets = BudgetBook(SpendService(lambda: runtime.config, store.snapshot), lambda: runtime.config)
    register_wings(runtime)
    if load_policies:
        runtime.policies = _load_policies(config, store, one_shot=one_shot)
    return runtime


def _load_policies(config: Config, store: ClusterStore, *, one_shot: bool) -> PolicyRuntime:
    from policies.runtime.policy_runtime import build_runtime as build_policy_runtime

    policy_runtime = build_policy_runtime(
        rego_engine=config.policies.rego_engine,
        opa_url=config.policies.opa_url,
        failure_mode=config.policies.failure_mode,
        # `off` in the configuration or in KGWE_REGO_VM turns the compiled VM off; it answers as the
        # interpreter does (tests/policies/test_rego_rvm.py), so a one-shot runtime skips its compile.
        rego_vm="off" if one_shot or config.policies.rego_vm == "off" else None,
    )
    report = policy_runtime.reload(
        builtin=config.policies.builtin,
        directories=list(config.policies.directories),
        gpu_policies=list(store.snapshot().gpu_policies.values()),
    )
    for name, error in report.errors.items():
        log.error("policy %s refused: %s", name, error)
    return policy_runtime


def new_store(config: Config) -> ClusterStore:
    """An empty cluster store configured as `config` says (type table, staleness, GPU taint keys)."""
    return ClusterStore(
        config.accelerator_table(), config.topology_staleness_seconds, config.gpu_taint_keys,
        workload_kinds=workload_kind_names(config),
    )


def from_directory(
    config: Config,
    directory: str | Path,
    *,
    watch: bool = False,
    poll_seconds: float = 2.0,
) -> Assembly:
    """A runtime over a YAML directory: read now, and re-read on change with `watch` (every `poll_seconds`).

    Raises OSError or `webhook.cluster.yaml_source.ClusterDirectoryError` when the directory cannot be read.
    """
    from webhook.cluster.yaml_source import YamlDirectorySource

    store = new_store(config)
    source = YamlDirectorySource(directory, store, poll_seconds)
    if watch:
        source.start()
    else:
        source.load()
    # Read once (not watched): a command that answers and exits.
    runtime = build_runtime(config, None, store=store, one_shot=not watch)
    return Assembly(runtime, None, source.stop if watch else _nothing, [source.task] if watch else [])


def from_api(config: Config, api: Any, *, serving: bool) -> Assembly:
    """A runtime over the Kubernetes API reached through `api` (a kubernetes ApiClient).

    `serving`: the watch keeps running (stop it with `stop_source`), and RBAC and DRA claim templates
    go to the API; a first list slower than INITIAL_LIST_SECONDS is logged and the server serves, not
    ready until it completes. Otherwise (a report) the objects are listed once, the watch is stopped,
    and a list that does not complete in time raises `ClusterNotListed`.
    """
    from webhook.cluster.kube_source import KubeClusterSource
    from webhook.cluster.watched_kinds import workload_watches
    from webhook.gangs.native import GROUP_VERSION as WORKLOAD_API

    store = new_store(config)
    # The Workload API of native gang scheduling is looked up in API discovery (webhook/gangs/native.py).
    source = KubeClusterSource(store, api, workloads=workload_watches(workload_kinds(config)), discover=(WORKLOAD_API,))
    source.start()
    if not serving:
        try:
            if not source.wait_loaded(INITIAL_LIST_SECONDS):
                raise ClusterNotListed(f"the cluster's objects were not all listed within {INITIAL_LIST_SECONDS}s")
            # Readiness does not wait for the workload kinds; a report (kgwe audit) shows them, so it does.
            if not source.wait_all_listed(INITIAL_LIST_SECONDS):
                raise ClusterNotListed(f"the cluster's workloads were not all listed within {INITIAL_LIST_SECONDS}s")
        finally:
            source.stop()
        return Assembly(build_runtime(config, None, store=store), api, _nothing)

    from kubernetes import client as k8s

    from policies.kernel.kube_client import deadline_api_client
    from policies.rbac.review import SubjectAccessReviewer
    from webhook.cluster.kube_json import KubeJson
    from webhook.dra.claim_reader import KubeClaimReader
    from webhook.dra.templates import KubeTemplateWriter

    # Policies are compiled from the GPUPolicies listed here; readiness waits for the list anyway.
    if not source.wait_loaded(INITIAL_LIST_SECONDS):
        log.warning("cluster objects not all listed after %ds; serving, not ready until they are", INITIAL_LIST_SECONDS)
    # Calls on the request path get a client that never retries past the admission deadline.
    bounded = deadline_api_client(api.configuration)
    runtime = build_runtime(
        config,
        None,
        store=store,
        authorizer=SubjectAccessReviewer(k8s.AuthorizationV1Api(bounded), cache_seconds=config.rbac.cache_seconds),
    )
    runtime.claim_templates = KubeTemplateWriter(KubeJson(bounded))
    runtime.claim_reader = KubeClaimReader(KubeJson(bounded))
    return Assembly(runtime, api, source.stop, list(source.tasks))


def register_model_wings() -> None:
    """Fill the core's ordered seams with the wings' steps, at their names (webhook/ordered_seam.py), and
    the read side's slots (`register_read_wings`). Run when this module is imported, before anything is
    built; running it again changes nothing."""
    from webhook.cluster.claim_charging import CLAIM_CHARGING
    from webhook.cluster.fact_readers import FACT_READERS
    from webhook.dra import charges as dra_charges
    from webhook.dra import facts as dra_facts
    from webhook.dra import mutator as dra_mutator
    from webhook.dra import plan as dra_plan
    from webhook.gangs import plan as gang_plan
    from webhook.mutation.steps import GPU_RESOURCE_WRITERS
    from webhook.placement.dra_planner import DRA_PLANNER
    from webhook.placement.plan import PLAN_STEPS

    FACT_READERS.fill(dra_facts.FACT_READERS)
    PLAN_STEPS.fill({**gang_plan.PLAN_STEPS, **dra_plan.PLAN_STEPS})
    DRA_PLANNER.fill(dra_plan)
    GPU_RESOURCE_WRITERS.fill(dra_mutator.GPU_RESOURCE_WRITERS)
    CLAIM_CHARGING.fill(dra_charges)
    register_read_wings()


def register_read_wings() -> None:
    """Fill the read side's slots (webhook/read_seams.py) with the wings' reads: why a pod waits for quota or
    for its gang, the kind table and pod counts of workloads, the gangs and Kueue documents. `kgwe explain`,
    `kgwe review`, the audit, the inventory and the reports ask these instead of importing a wing."""
    from webhook.gangs import reads as gang_reads
    from webhook.quotas import reads as quota_reads
    from webhook.read_seams import GANG_READS, QUOTA_READS, WORKLOAD_READS
    from webhook.workloads import reads as workload_reads

    QUOTA_READS.fill(quota_reads)
    GANG_READS.fill(gang_reads)
    WORKLOAD_READS.fill(workload_reads)


register_model_wings()
