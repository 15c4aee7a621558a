"""What each GPU pod costs per hour, who pays, what it belongs to and when it ran (pure, from one snapshot).

One `PodRate` per pod bound to a node that holds GPUs: the rate of the GPUs it asks as resources (KGWE's DRA
claims included) is the pod's `kgwe.io/hourly-cost` (what it was charged), else the same computation from
the pricing configuration (webhook/costs.py); the GPUs its own allocated ResourceClaims hold add each
device's worth times its type's price, once per claim however many pods name it (webhook/dra/holders.py
says which pod pays). `whole` is what the same devices would cost as whole GPUs (a slice, a share or a
replica each a GPU), so a share's saving is `whole - hourly`. The exporter
(webhook/controllers/bound_pods.py), the directory-mode ledger and the budgets' current rate all read it,
so the three never disagree about a pod.

A pod costs from `status.startTime` (the kubelet took it; else its creation) until its containers'
last `finishedAt` once it is finished (else its start: a finished pod with no record of its end is not
charged beyond it); a running pod costs until now. A pod not bound to a node holds no GPU and costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.gpu_demand import container_gpu_amounts, pod_gpu_demand
from policies.quota.model import resolve_tenant
from policies.vocabulary import keys
from policies.vocabulary.objects import PodView
from webhook.cluster.claim_charging import CLAIM_CHARGING, ClaimHold, HeldGpu
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.shared_parts import amount, constant
from webhook.config import Config
from webhook.costs import parse_hourly_cost, pod_gpu_equivalents, pod_hourly_cost, pod_share, price_per_gpu_hour
from webhook.spend.window import parse_stamp
from webhook.workload_owners import workload_of

ZERO = Decimal(0)
# The kinds whose pods make one finished run (SPEC section 12); a CronJob's runs are its Jobs.
RUN_KINDS = ("Job", "JobSet", "PyTorchJob", "RayJob")


@dataclass(frozen=True, slots=True)
class Owner:
    kind: str
    name: str

    @property
    def text(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodRate:
    namespace: str
    pod: str
    uid: str
    node: str
    tenant: str
    type_id: str
    share: str  # whole | mig | mps | time-slicing | dra
    containers: tuple[tuple[str, Decimal], ...]  # (GPU container, its part of the pod: parts add up to 1)
    workload: Owner
    run: Owner | None  # the Job, JobSet, PyTorchJob or RayJob it ran for
    hourly: Decimal | None  # None: no price for its type
    equivalents: Decimal  # GPU-equivalents (a GPU-hour is one equivalent for one hour)
    whole: Decimal | None  # the hourly cost of as many whole GPUs as it holds devices
    start: float | None
    end: float | None  # None: still running
    finished: bool

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.pod)

    def seconds_in(self, start: float, end: float, now: float) -> float:
        """How long it ran within `[start, end)`, counting a running pod up to `now`."""
        if self.start is None:
            return 0.0
        stop = self.end if self.end is not None else now
        return max(0.0, min(stop, end) - max(self.start, start))


def tenant_resolver(model: ClusterModel) -> Callable[[str], str]:
    """The tenant of a namespace for pods without `kgwe.io/tenant` (as the inventory resolves it), remembered."""
    tenants: dict[str, str] = {}
    quotas = list(model.tenant_quotas.values())

    def tenant_of(namespace: str) -> str:
        found = tenants.get(namespace)
        if found is None:
            found = tenants[namespace] = resolve_tenant(namespace, model.namespace_labels(namespace), [], quotas)[0]
        return found

    return tenant_of


def pod_rates(model: ClusterModel, config: Config) -> Iterator[PodRate]:
    """A rate for every GPU pod bound to a node (running or finished) in the snapshot."""
    tenant_of = tenant_resolver(model)
    for raw in model.pods.values():
        rate = pod_rate(raw, model, config, tenant_of)
        if rate is not None:
            yield rate


def pod_rate(raw: dict[str, Any], model: ClusterModel, config: Config,
             tenant_of: Callable[[str], str] | None = None) -> PodRate | None:
    view = PodView(raw)
    if not view.node_name or view.namespace in config.excluded_namespaces:
        return None
    demand = pod_gpu_demand(view)
    held = CLAIM_CHARGING.value.claim_holders(model).held(view)  # the DRA wing's part
    if not demand.asks_gpu and not held:
        return None
    notes = view.annotations
    facts = model.nodes.get(view.node_name)
    typed = facts if facts is not None and facts.is_typed else None
    candidates = [t for t in notes.get(keys.ACCELERATOR_TYPE, "").split(",") if t]
    type_id = typed.accelerator_type if typed is not None else (candidates[0] if candidates else "unknown")
    parts: list[_Part] = []
    share = "dra"
    if demand.asks_gpu:
        part, share = _demand_part(view, typed, type_id, model, config)
        parts.append(part)
    if held:
        gpus = [gpu for hold in held for gpu in hold.gpus]
        parts.append(_claimed_part(view, gpus, typed, model, config))
        if not demand.asks_gpu:
            kinds = {gpu.type_id for gpu in gpus if gpu.type_id}
            type_id = typed.accelerator_type if typed is not None else (kinds.pop() if len(kinds) == 1 else "unknown")
            share = "mig" if all(gpu.mig for gpu in gpus) else "dra"
        elif share == "whole":
            share = "dra"  # GPUs of its own claims beside its whole ones
    hourly = _total([p.hourly for p in parts])
    whole = _total([p.whole for p in parts])
    tenant = notes.get(keys.TENANT) or (tenant_of(view.namespace) if tenant_of else view.namespace)
    start, end = lifetime(view)
    return PodRate(
        namespace=view.namespace, pod=view.name, uid=view.uid, node=view.node_name, tenant=tenant,
        # Amounts and parts held once across pods (webhook/cluster/shared_parts.py).
        type_id=type_id, share=share, containers=constant(container_parts(raw, held)), workload=workload(view),
        run=run_of(view), hourly=amount(hourly), equivalents=amount(sum((p.equivalents for p in parts), ZERO)),
        whole=amount(whole),
        start=start, end=end, finished=view.terminal,
    )


@dataclass(frozen=True)
class _Part:
    """What one way of holding GPUs (the pod's demand, or its own claims) costs per hour."""

    hourly: Decimal | None
    equivalents: Decimal
    whole: Decimal | None


def _total(values: list[Decimal | None]) -> Decimal | None:
    """The sum, or None when a part has no price (the pod counts as unpriced, never as cheaper)."""
    return None if any(v is None for v in values) else sum((v for v in values if v is not None), ZERO)


def _demand_part(view: PodView, typed: NodeFacts | None, type_id: str, model: ClusterModel,
                 config: Config) -> tuple[_Part, str]:
    """The GPUs the pod asks as resources (KGWE's DRA claims included): its `kgwe.io/hourly-cost` (what it
    was charged), else the same computation from the pricing configuration; and its share kind."""
    stated = parse_hourly_cost(view.annotations.get(keys.HOURLY_COST))
    if stated is not None:
        hourly: Decimal | None = stated
    else:
        hourly = pod_hourly_cost(view, typed, type_id, model, config) if type_id != "unknown" else None
    equivalents = pod_gpu_equivalents(view, typed, type_id, model) if type_id != "unknown" else ZERO
    share, devices = pod_share(view, typed, model)
    price = price_per_gpu_hour(view, type_id, model, config) if type_id != "unknown" else None
    whole = price * devices if price is not None else None
    if whole is not None and hourly is not None and whole < hourly:
        whole = hourly  # a price stated on the pod above today's price: no negative saving
    return _Part(hourly, equivalents, whole), share


def _claimed_part(view: PodView, gpus: list[HeldGpu], typed: NodeFacts | None, model: ClusterModel,
                  config: Config) -> _Part:
    """The GPU devices the pod's own allocated claims hold (the claims it pays for, webhook/dra/holders.py):
    each device its worth (a MIG device its compute slices / 7) times its type's price, as quotas count
    them; a device of no known type is of the node's type, else unpriced. As whole GPUs: a GPU each."""
    hourly: Decimal | None = ZERO
    whole: Decimal | None = ZERO
    for gpu in gpus:
        type_id = gpu.type_id or (typed.accelerator_type if typed is not None else "")
        price = price_per_gpu_hour(view, type_id, model, config) if type_id else None
        hourly = hourly + gpu.equivalents * price if hourly is not None and price is not None else None
        whole = whole + price if whole is not None and price is not None else None
    return _Part(hourly, sum((gpu.equivalents for gpu in gpus), ZERO), whole)


def lifetime(view: PodView) -> tuple[float | None, float | None]:
    """(start, end) in unix seconds; end None while the pod runs."""
    status = view.status
    start = parse_stamp(status.get("startTime")) or parse_stamp(view.creation_timestamp)
    if not view.terminal:
        return start, None
    ends = [
        parse_stamp(((item.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for item in status.get("containerStatuses") or [] if isinstance(item, Mapping)
    ]
    known = [e for e in ends if e is not None]
    end = max(known) if known else start
    return start, max(end, start) if end is not None and start is not None else end


def container_parts(raw: dict[str, Any], held: Sequence[ClaimHold] = ()) -> tuple[tuple[str, Decimal], ...]:
    """The pod's GPU containers and the part of its GPUs each asks or uses (by device count), adding up to
    1: a claim's devices go evenly to the containers that name it (none named: to the pod, container "")."""
    amounts = {name: sum(asked.values(), ZERO) for name, asked in container_gpu_amounts(raw).items()}
    for hold in held:
        users = hold.containers or ("",)
        for name in users:
            amounts[name] = amounts.get(name, ZERO) + Decimal(len(hold.gpus)) / len(users)
    total = sum(amounts.values(), ZERO)
    if total <= 0:
        return ()
    return tuple((name, amount / total) for name, amount in sorted(amounts.items()))


def workload(view: PodView) -> Owner:
    """The workload the pod's cost is summed under: its run, else its owner (webhook/workload_owners.py), template
    parts pooled."""
    run = run_of(view)
    if run is not None and run.kind != "Job":
        return run
    found = workload_of(view.namespace, view.name, view.raw)
    return Owner(found.kind, found.name)


def run_of(view: PodView) -> Owner | None:
    """The run the pod belongs to, from the labels and owners the controllers write."""
    labels = view.labels
    if labels.get("ray.io/originated-from-crd") == "RayJob" and labels.get("ray.io/originated-from-cr-name"):
        return Owner("RayJob", labels["ray.io/originated-from-cr-name"])
    if labels.get("jobset.sigs.k8s.io/jobset-name"):
        return Owner("JobSet", labels["jobset.sigs.k8s.io/jobset-name"])
    if labels.get("training.kubeflow.org/job-name"):
        return Owner("PyTorchJob", labels["training.kubeflow.org/job-name"])
    owner = view.controller_owner
    if owner is not None and owner.get("kind") == "Job" and owner.get("name"):
        return Owner("Job", str(owner["name"]))
    return None


def current_hourly(rates: list[PodRate]) -> dict[str, Decimal]:
    """The hourly rate of each tenant's pods running now (finished pods cost nothing more)."""
    out: dict[str, Decimal] = {}
    for rate in rates:
        if not rate.finished and rate.hourly is not None:
            out[rate.tenant] = out.get(rate.tenant, ZERO) + rate.hourly
    return out
