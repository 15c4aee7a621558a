"""The bound-pod controller: once a GPU pod is on a node, its cost annotations name that node's type.

At admission a pod may be allowed several accelerator types; after the scheduler binds it, this loop
rewrites `kgwe.io/accelerator-type` to the node's type and `kgwe.io/hourly-cost` to the price of its GPU
share on that type (`webhook.costs`), with a JSON merge patch, only where a value differs (costs compare
as numbers, so "18.00" and "18" are equal). It reads store snapshots only, never the API, and exports
the per-pod cost series Prometheus keeps as KGWE's cost history (`cost_series`, docs/costs.md):
`kgwe_pod_hourly_cost`, `kgwe_pod_gpu_allocation` and `kgwe_pod_whole_gpu_hourly_cost`, labelled
`namespace, pod, container, node` as OpenCost labels its allocations (so FinOps tools join on them) plus
`tenant, accelerator_type, share, workload_kind, workload, run_kind, run`; values as the pod's annotations
will read once its patches land.

Only the leader patches and exports, so replicas neither race each other nor double the metric.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from policies.gpu_demand import pod_gpu_demand
from policies.kernel.api_errors import api_exception
from policies.kernel.background import Task
from policies.kernel.published_families import multiprocess_directory, publish
from policies.vocabulary import keys
from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel, ClusterStore
from webhook.cluster.settled import Settled
from webhook.config import Config
from webhook.controllers.followed_pods import FollowedPods
from webhook.controllers.lazy_gauge import LazyGauge
from webhook.costs import ANNOTATION_HOURLY_COST, format_hourly_cost, parse_hourly_cost, pod_hourly_cost
from webhook.spend.memo import RateMemo
from webhook.spend.rates import PodRate, pod_rate, tenant_resolver

if TYPE_CHECKING:  # the client is imported where a cluster is read, not for a directory
    from kubernetes import client as k8s_client

log = logging.getLogger("kgwe.controllers.bound_pods")

ANNOTATION_ACCELERATOR_TYPE = keys.ACCELERATOR_TYPE
ANNOTATION_TENANT = keys.TENANT
FIELD_MANAGER = "kgwe-controller"

# The name of the per-pod cost families where a worker publishes them for every worker's scrape.
PUBLISHED = "pod-costs"
# namespace, name, JSON merge patch
PatchPod = Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True)
class PodPatch:
    namespace: str
    name: str
    uid: str
    resource_version: str
    annotations: dict[str, str | None]  # None removes the annotation

    @property
    def body(self) -> dict[str, Any]:
        return {"metadata": {"annotations": dict(self.annotations)}}


def kube_pod_patcher(api_client: k8s_client.ApiClient) -> PatchPod:
    """Patch pods through the API as field manager `kgwe-controller`."""
    from webhook.cluster.kube_json import KubeJson  # a cluster: its client is loaded already

    api = KubeJson(api_client)

    def patch(namespace: str, name: str, body: dict[str, Any]) -> None:
        api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            query=[("fieldManager", FIELD_MANAGER)],
            body=body,
            content_type="application/merge-patch+json",
            timeout=(10.0, 30.0),
        )

    return patch


def desired_patch(pod: dict[str, Any], model: ClusterModel, config: Config) -> PodPatch | None:
    """The annotation changes a bound GPU pod needs, or None when it needs none (or is not ours to touch)."""
    view = PodView(pod)
    node_name = view.node_name
    if not node_name or view.terminal or view.namespace in config.excluded_namespaces:
        return None
    facts = model.nodes.get(node_name)
    if facts is None or not facts.is_typed or not pod_gpu_demand(view).asks_gpu:
        return None
    type_id = facts.accelerator_type
    annotations = view.annotations
    changes: dict[str, str | None] = {}
    if annotations.get(ANNOTATION_ACCELERATOR_TYPE) != type_id:
        changes[ANNOTATION_ACCELERATOR_TYPE] = type_id
    cost = pod_hourly_cost(view, facts, type_id, model, config)
    current = annotations.get(ANNOTATION_HOURLY_COST)
    if cost is None:
        # No price for the type it runs on: a cost computed for another candidate type would mislead.
        if current is not None:
            changes[ANNOTATION_HOURLY_COST] = None
    else:
        desired = format_hourly_cost(cost)
        if parse_hourly_cost(current) != parse_hourly_cost(desired):
            changes[ANNOTATION_HOURLY_COST] = desired
    if not changes:
        return None
    return PodPatch(
        namespace=view.namespace,
        name=view.name,
        uid=view.uid,
        resource_version=view.resource_version,
        annotations=changes,
    )


SERIES_LABELS = ["namespace", "pod", "container", "node", "tenant", "accelerator_type", "share", "workload_kind",
                 "workload", "run_kind", "run"]
SeriesKey = tuple[str, ...]  # the values of SERIES_LABELS


@dataclass(frozen=True)
class SeriesValues:
    hourly: Decimal  # kgwe_pod_hourly_cost
    allocation: Decimal  # kgwe_pod_gpu_allocation (GPU-equivalents)
    whole: Decimal  # kgwe_pod_whole_gpu_hourly_cost


def cost_series(pods: Iterable[dict[str, Any]], model: ClusterModel, config: Config) -> dict[SeriesKey, SeriesValues]:
    """One series per GPU container of each priced GPU pod bound to a node and not finished (spec.nodeName
    set: it holds its GPUs from binding on; a pod that waits holds nothing and costs nothing), labelled as
    OpenCost labels its allocations (namespace, pod, container, node) plus tenant, type, share kind, workload
    and run. GPUs held through the pod's own ResourceClaims count too, a claim several pods name in one
    pod's series only. A pod's containers split its cost by the GPUs each asks or uses
    (webhook/spend/rates.py)."""
    tenant_of = tenant_resolver(model)
    return rate_series(rate for pod in pods if (rate := pod_rate(pod, model, config, tenant_of)) is not None)


def rate_series(rates: Iterable[PodRate]) -> dict[SeriesKey, SeriesValues]:
    """`cost_series` of the pods' rates."""
    out: dict[SeriesKey, SeriesValues] = {}
    for rate in rates:
        out.update(series_of(rate))
    return out


def series_of(rate: PodRate) -> tuple[tuple[SeriesKey, SeriesValues], ...]:
    """One pod's series: one per GPU container, none for a finished or unpriced pod."""
    if rate.finished or rate.hourly is None:
        return ()
    parts = rate.containers or (("", Decimal(1)),)
    run = rate.run
    return tuple(
        ((rate.namespace, rate.pod, container, rate.node, rate.tenant, rate.type_id, rate.share, rate.workload.kind,
          rate.workload.name, run.kind if run else "", run.name if run else ""),
         SeriesValues(rate.hourly * part, rate.equivalents * part, (rate.whole or rate.hourly) * part))
        for container, part in parts)


class HourlyCostCollector(Collector):
    """Exports the last computed series; label sets that disappeared are simply not exported again."""

    def __init__(self) -> None:
        self._series: dict[SeriesKey, SeriesValues] = {}

    def update(self, series: dict[SeriesKey, SeriesValues]) -> bool:
        """Export `series` from now on; whether they differ from the last."""
        changed = series != self._series
        self._series = dict(series)
        return changed

    def replace(self, series: dict[SeriesKey, SeriesValues]) -> None:
        """Export `series` from now on (the caller's to keep unchanged: a scrape may read it on another thread)."""
        self._series = series

    def collect(self) -> Iterator[Metric]:
        families = (
            ("kgwe_pod_hourly_cost", "Hourly cost of each GPU container of each GPU pod bound to a node "
                                     "(its kgwe.io/hourly-cost plus the GPUs of the ResourceClaims of its own "
                                     "it pays for, split by the GPUs each container asks or uses)",
             lambda v: v.hourly),
            ("kgwe_pod_gpu_allocation", "GPU-equivalents each GPU container holds (a MIG slice slices/7, an "
             "MPS share its fraction, a time-sliced replica 1/replicas)", lambda v: v.allocation),
            ("kgwe_pod_whole_gpu_hourly_cost", "Hourly cost the same devices would have as whole GPUs (shares' "
                                               "savings are this minus kgwe_pod_hourly_cost)", lambda v: v.whole),
        )
        rows = sorted(self._series.items())  # the three families read the same series
        for name, documentation, value in families:
            # Sampled as the scrape reads them (lazy_gauge.py): 210,000 samples at 10,000 GPU nodes are not held.
            yield LazyGauge(name, documentation, SERIES_LABELS, rows, value)

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class BoundPodController:
    """Every `interval_seconds`, patches bound pods whose annotations lag their node, and updates the gauge.

    With `patch_pod=None` (no API to write to, as with a YAML cluster directory) it only exports the gauge.
    """

    def __init__(
        self,
        store: ClusterStore,
        config: Config,
        patch_pod: PatchPod | None,
        *,
        interval_seconds: float = 5.0,
        is_leader: Callable[[], bool] = lambda: True,
        registry: CollectorRegistry | None = REGISTRY,
        rates: RateMemo | None = None,
    ) -> None:
        """`rates`: pod rates kept by another reader of the same store (the spend service's), shared rather than
        computed twice (at start, every pod's)."""
        self.store = store
        self.config = config
        self.patch_pod = patch_pod
        self.interval_seconds = interval_seconds
        self.is_leader = is_leader
        self.collector = HourlyCostCollector()
        self.registry = registry
        if registry is not None:
            registry.register(self.collector)
        # With several workers a scrape reads no worker's own registry: the leader publishes the series rendered
        # (policies/kernel/published_families.py), from this registry of the collector alone.
        self._rendering = CollectorRegistry(auto_describe=False)
        self._rendering.register(self.collector)
        # pod key -> (uid, version) we patched: until the watch shows our change, do not send it twice.
        self._patched: dict[str, tuple[str, str]] = {}
        self._settled = Settled()  # a pass is a function of the snapshot and the configuration
        # What each pod gave the last pass: a pass reads the pods that changed, not every pod.
        self._rates = rates if rates is not None else RateMemo()
        self._followed = FollowedPods(self._rates, desired_patch, series_of)
        # Leader-only: a follower neither patches nor exports (standby empties the gauge it exported as leader).
        self.task = Task(
            "bound-pods", self._reconcile_and_log, interval=interval_seconds, leader_only=True,
            standby=self._standby, is_leader=lambda: self.is_leader(),
            # One bad pass (a malformed object) must not end the controller.
            on_error=lambda _exc: log.exception("bound-pod reconcile failed"),
        )

    def _standby(self) -> None:
        if self.collector.update({}):
            publish(PUBLISHED, b"")
        self._settled.forget()
        self._followed.forget()  # a leader again exports every series anew

    def _export(self, series: dict[SeriesKey, SeriesValues]) -> None:
        self.collector.replace(series)
        if multiprocess_directory() is not None:
            publish(PUBLISHED, generate_latest(self._rendering) if series else b"")

    def reconcile_once(self) -> list[PodPatch]:
        """One pass over the current snapshot; returns the patches applied. Nothing to do (and nothing done)
        while the snapshot and the configuration are those of the last pass that left nothing to retry."""
        if not self.is_leader():
            self._standby()
            return []
        model = self.store.snapshot()
        config = self.config
        if self._settled.holds(model, config):
            return []
        followed = self._followed
        try:
            dirty = followed.begin(model, config)
            asked: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {
                key: (model.pods.get(key), None) for key in dirty}
            applied, failed = self._apply(model, asked)
            if followed.rate(model, config, asked):
                self._export(followed.exported())
        except BaseException:
            followed.forget()
            raise
        followed.done()
        self._settled.record(model, config, complete=not failed)
        return applied

    def _apply(self, model: ClusterModel,
               asked: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]]) -> tuple[list[PodPatch], bool]:
        """Send the patches the pods want (those already sent for the pod's version are not sent again) and note in
        `asked` the pods whose series read the patch laid over them; (the patches applied, whether one failed)."""
        failed = False
        applied: list[PodPatch] = []
        for key in [key for key in asked if asked[key][0] is None]:
            self._patched.pop(key, None)
        if self.patch_pod is None:
            return applied, failed
        followed = self._followed
        for key, patch in followed.wanting.items():
            pod = model.pods[key]
            identity = patch_identity(key, pod)
            if self._patched.get(key) != identity:
                try:
                    self.patch_pod(patch.namespace, patch.name, patch.body)
                except api_exception() as exc:
                    if exc.status != 404:  # a pod deleted meanwhile needs nothing
                        log.warning("patching pod %s/%s failed: %s %s", patch.namespace, patch.name, exc.status,
                                    exc.reason)
                        failed = True
                    continue
                except Exception:
                    log.exception("patching pod %s/%s failed", patch.namespace, patch.name)
                    failed = True
                    continue
                self._patched[key] = identity
                applied.append(patch)
            # Rated with the annotations it will have once the watch shows the patch.
            if key in asked or followed.wants_rating(key, pod, True):
                asked[key] = (pod, _with_annotations(pod, patch.annotations))
        return applied, failed

    def start(self) -> None:
        """Run the `bound-pods` task alone (under a supervisor, the supervisor starts `task`)."""
        self.task.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.task.stop(timeout)
        self.unregister()
        publish(PUBLISHED, b"")

    def unregister(self) -> None:
        """Take the gauge out of its registry (once the task has stopped: nothing updates it any more)."""
        if self.registry is not None:
            self.registry.unregister(self.collector)
            self.registry = None

    def _reconcile_and_log(self) -> None:
        patches = self.reconcile_once()
        if patches:
            log.info("updated cost annotations of %d bound pods", len(patches))


def patch_identity(key: str, pod: dict[str, Any]) -> tuple[str, str]:
    """(which pod, which version of it); objects from YAML files have neither uid nor resourceVersion."""
    view = PodView(pod)
    return view.uid or key, view.resource_version or f"id:{id(pod)}"


def _with_annotations(pod: dict[str, Any], changes: dict[str, str | None]) -> dict[str, Any]:
    view = PodView(pod)
    meta = dict(view.metadata)
    annotations = {**view.annotations, **changes}
    meta["annotations"] = {k: v for k, v in annotations.items() if v is not None}
    return {**pod, "metadata": meta}
