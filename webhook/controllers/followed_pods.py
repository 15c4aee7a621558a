"""What the bound-pod controller keeps between passes, moved by the pods that changed (issue 36).

Each pod's desired patch (bound_pods.py `desired_patch`) and cost series (from the spend wing's rate,
webhook/spend/memo.py `RateMemo`) read the pod, the facts of the node it is bound to and a context (the
accelerator table, HardwareProfiles, Namespaces, DeviceClasses: `ChargeEpochs`; the TenantQuotas, which move a
namespace's tenant; the configuration). The store never changes an object in place, so a pass reads again only
the pods whose object differs from the last pass's (webhook/cluster/pod_changes.py, compared in C), those bound
to a node whose facts differ, and those whose rate reads more than their own node: a pod on no known or no typed
node (priced by every type's sharing mode: again whenever any node's facts move) and a pod naming ResourceClaims
(whether it pays for them is the other pods' and the claims' to say: again each pass). A context that moves
reads every pod again. At 150,000 pods a pass that walked every pod to look each up was about 0.85 CPU-s; what
is left per pass is the comparison and the pods that changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from policies.vocabulary.objects import PodView
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts
from webhook.cluster.pod_changes import PodList, changed_pods
from webhook.cluster.read_epochs import ChargeEpochs
from webhook.config import Config
from webhook.spend.memo import RateMemo, names_claims
from webhook.spend.rates import PodRate

SeriesKey = tuple[str, ...]  # the values of the series' labels
Series = tuple[tuple[SeriesKey, object], ...]  # one pod's series and their values
Desired = Callable[[dict[str, Any], ClusterModel, Config], Any]  # a pod's desired patch, or None


class FollowedPods:
    """Per pod key: its desired patch, the object its series were read from and those series; with them every
    series of the pass (`series`) and the pods that want a patch (`wanting`). Not locked: the controller's."""

    def __init__(self, rates: RateMemo, desired: Desired, series_of: Callable[[PodRate], Series]) -> None:
        """`desired`: a pod's desired patch (bound_pods.py `desired_patch`); `series_of`: a rate's series."""
        self._rates = rates
        self._desired = desired
        self._series_of = series_of
        self._epochs = ChargeEpochs()
        self.forget()

    def forget(self) -> None:
        """Keep nothing: the next pass reads every pod (a pass that failed partway, or a leader that stood by)."""
        self._pods: PodList | None = None  # the pods of the last pass, once it completed
        self._context: tuple[int, Config, tuple[int, ...]] | None = None  # the config kept: its id is its own
        self._nodes: Mapping[str, NodeFacts] = {}
        self._nodes_epoch = -1
        self._patches: dict[str, tuple[dict[str, Any], NodeFacts | None, Any]] = {}
        self.wanting: dict[str, Any] = {}  # the desired patches that are not None, by pod key
        self._on_node: dict[str, set[str]] = {}  # the keys of the pods bound to each node name
        self._unplaced: set[str] = set()  # bound to no known or no typed node: priced by every node's facts
        self._claimants: set[str] = set()  # naming ResourceClaims: rated again each pass
        # Per key with series or the controller's patch laid over it: the pod, whether the patch lay over it, its
        # series, the object rated.
        self._rated: dict[str, tuple[dict[str, Any], bool, Series, dict[str, Any]]] = {}
        self._gone: list[dict[str, Any]] = []  # pod objects replaced or removed by this pass: out of the rates
        self.series: dict[SeriesKey, Any] = {}
        self._shared = False  # `series` is the collector's: copied before it moves
        self.computed = 0  # desired patches computed by the last pass
        self._fresh = True  # every series is read anew: exported even if none moved

    def begin(self, model: ClusterModel, config: Config) -> list[str]:
        """Move the desired patches on to `model`; the keys whose series may differ from the last pass's (every
        pod's in a new context), in the snapshot's order when every pod is read."""
        nodes_epoch, context_epoch = self._epochs.advance(model)
        context = (context_epoch, config, tuple(map(id, model.tenant_quotas.values())))
        before, now = self._pods, PodList(model.pods)
        same = before is not None and self._context is not None and self._context[0] == context[0] \
            and self._context[1] is config and self._context[2] == context[2]
        if not same:
            # Read again from every pod; the rates of the pods replaced since the last pass leave the shared memo.
            left = [entry[0] for key, entry in self._patches.items() if model.pods.get(key) is not entry[0]]
            self.forget()
            self._gone = left
            dirty: Iterable[str] = now.keys
        else:
            assert before is not None
            moved = changed_pods(before, now)
            if nodes_epoch != self._nodes_epoch:
                moved |= self._unplaced
                for name in _changed_nodes(self._nodes, model.nodes):
                    moved |= self._on_node.get(name, set())
            moved |= self._claimants
            dirty = moved
        self._pods = None  # until the pass completes (`done`): one that fails is read again from every pod
        self._context, self._nodes, self._nodes_epoch = context, model.nodes, nodes_epoch
        computed = 0
        keys = list(dirty)
        gone: list[dict[str, Any]] = self._gone
        for key in keys:
            pod = model.pods.get(key)
            self._unindex(key, gone, pod)
            if pod is None:
                self._patches.pop(key, None)
                self.wanting.pop(key, None)
                continue
            node_name = PodView(pod).node_name
            node = model.nodes.get(node_name) if node_name else None
            if node_name:
                self._on_node.setdefault(node_name, set()).add(key)
                if node is None or not node.is_typed:
                    self._unplaced.add(key)
            if names_claims(pod):
                self._claimants.add(key)
            entry = self._patches.get(key)
            if entry is None or entry[0] is not pod or entry[1] is not node:
                entry = self._patches[key] = (pod, node, self._desired(pod, model, config))
                computed += 1
            if entry[2] is None:
                self.wanting.pop(key, None)
            else:
                self.wanting[key] = entry[2]
        self.computed = computed
        self._now = now
        self._gone = gone
        return keys

    def _unindex(self, key: str, gone: list[dict[str, Any]], pod: dict[str, Any] | None) -> None:
        """Take `key` out of the indexes, as its last pod (kept with its patch) put it in; that pod joins `gone`
        unless it is `pod`."""
        entry = self._patches.get(key)
        if entry is None:
            return
        if entry[0] is not pod:
            gone.append(entry[0])
        node_name = PodView(entry[0]).node_name
        on_node = self._on_node.get(node_name) if node_name else None
        if on_node is not None:
            on_node.discard(key)
            if not on_node:
                del self._on_node[node_name]
        self._unplaced.discard(key)
        self._claimants.discard(key)

    def wants_rating(self, key: str, pod: dict[str, Any], overlaid: bool) -> bool:
        """Whether `key`'s series were not read from `pod` (with the controller's patch laid over it or not)."""
        rated = self._rated.get(key)
        return rated is None or rated[0] is not pod or rated[1] != overlaid

    def rate(self, model: ClusterModel, config: Config,
             asked: Mapping[str, tuple[dict[str, Any] | None, dict[str, Any] | None]]) -> bool:
        """Read again the series of the pods `asked` (those `begin` found, and those whose patch was laid over
        them or lifted this pass): a key's pod (None: gone) and, where the controller's patch lies over it, the
        object with the patch, which is rated instead. Whether the series are to be exported: any moved, or
        every one was read anew."""
        reading: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (key, pod, the object rated)
        gone, self._gone = self._gone, []  # objects rated before, to drop from the rates' entries
        moved = False
        for key, (pod, overlay) in asked.items():
            old = self._rated.get(key)
            if old is not None and old[1]:  # a patch laid over it is rated anew, or lifted
                gone.append(old[3])
            if pod is not None:
                reading.append((key, pod, pod if overlay is None else overlay))
            elif old is not None:
                del self._rated[key]
                moved = self._move(old[2], ()) or moved
        self._rates.forget(gone)
        rates = self._rates.rates_of(model, config, [rated for _key, _pod, rated in reading])
        for (key, pod, rated), rate in zip(reading, rates, strict=True):
            series = self._series_of(rate) if rate is not None else ()
            old = self._rated.get(key)
            if series or rated is not pod:
                self._rated[key] = (pod, rated is not pod, series, rated)
            elif old is not None:
                del self._rated[key]
            moved = self._move(old[2] if old is not None else (), series) or moved
        return moved or self._fresh

    def _move(self, old: Series, new: Series) -> bool:
        """Replace one pod's series `old` by `new` in `series`; whether they differ."""
        if old == new:
            return False
        if self._shared:
            self.series, self._shared = dict(self.series), False
        for series_key, _values in old:
            self.series.pop(series_key, None)
        self.series.update(new)
        return True

    def exported(self) -> dict[SeriesKey, Any]:
        """The series, handed to the collector: never changed from now on (the next move copies them first)."""
        self._shared = True
        return self.series

    def done(self) -> None:
        """The pass completed: the next one reads only what changed since this one's snapshot."""
        self._pods = self._now
        self._fresh = False


def _changed_nodes(before: Mapping[str, NodeFacts], now: Mapping[str, NodeFacts]) -> set[str]:
    """The node names whose facts are not the same object in both (added, removed, replaced)."""
    changed = {name for name, facts in now.items() if before.get(name) is not facts}
    changed.update(before.keys() - now.keys())
    return changed
