"""The kube-scheduler filter predicates KGWE relies on, evaluated against the cluster model.

nodeSelector, required node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt; matchFields on
metadata.name), taints and tolerations (NoSchedule, NoExecute), and resource fit against allocatable.
Used by `/validate` to refuse pods no node could ever run, and by tests as the scheduler's stand-in.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from policies.vocabulary.quantities import parse_quantity
from webhook.cluster.node_facts import NodeFacts, Taint


def _requirement_matches(expr: dict[str, Any], value: str | None) -> bool:
    operator = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            actual, bound = int(value), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def term_matches(term: dict[str, Any], labels: dict[str, str], node_name: str) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no objects
    for expr in expressions:
        if not _requirement_matches(expr, labels.get(str(expr.get("key")))):
            return False
    for expr in fields:
        value = node_name if expr.get("key") == "metadata.name" else None
        if not _requirement_matches(expr, value):
            return False
    return True


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]] | None:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return None
    return list(required.get("nodeSelectorTerms") or [])


def node_selector_matches(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())


def node_affinity_matches(pod: dict[str, Any], labels: dict[str, str], node_name: str) -> bool:
    terms = required_terms(pod)
    if terms is None:
        return True
    return any(term_matches(term, labels, node_name) for term in terms)


def toleration_tolerates(toleration: dict[str, Any], taint: Taint) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key")
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.key:
        return False
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.value or "")


def tolerates_taints(pod: dict[str, Any], taints: Iterable[Taint]) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_tolerates(t, taint) for t in tolerations if isinstance(t, dict)):
            return False
    return True


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """Effective pod requests: max(sum of app containers + sidecars, largest init container), per resource."""
    spec = pod.get("spec") or {}

    def container_requests(container: dict[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        out: dict[str, Decimal] = {}
        for section in ("limits", "requests"):
            for key, raw in (resources.get(section) or {}).items():
                try:
                    out[key] = parse_quantity(raw) if section == "requests" else out.get(key, parse_quantity(raw))
                except ValueError:
                    continue
        return out

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for key, value in container_requests(container).items():
            total[key] = total.get(key, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        requests = container_requests(container)
        for key, value in requests.items():
            if container.get("restartPolicy") == "Always":
                total[key] = total.get(key, Decimal(0)) + value
            else:
                total[key] = max(total.get(key, Decimal(0)), value)
    return total


def resources_fit(requests: dict[str, Decimal], allocatable: dict[str, Decimal]) -> bool:
    for key, amount in requests.items():
        if amount <= 0:
            continue
        if key in ("cpu", "memory", "ephemeral-storage") and key not in allocatable:
            continue
        if amount > allocatable.get(key, Decimal(0)):
            return False
    return True


def node_can_run(pod: dict[str, Any], node: NodeFacts, requests: dict[str, Decimal] | None = None) -> bool:
    if not node_selector_matches(pod, node.labels):
        return False
    if not node_affinity_matches(pod, node.labels, node.name):
        return False
    if not tolerates_taints(pod, node.taints):
        return False
    return resources_fit(requests if requests is not None else pod_requests(pod), node.allocatable)


def feasible_nodes(pod: dict[str, Any], nodes: Iterable[NodeFacts]) -> list[str]:
    requests = pod_requests(pod)
    return [n.name for n in nodes if not n.unschedulable and node_can_run(pod, n, requests)]


def first_feasible(pod: dict[str, Any], nodes: Iterable[NodeFacts]) -> str | None:
    """The first node that is not cordoned and can run the pod (`node_can_run`), None when none can."""
    requests = pod_requests(pod)
    fit = _PodFit(pod)
    for node in nodes:
        if not node.unschedulable and fit.can_run(node, requests):
            return node.name
    return None


class _PodFit:
    """`node_can_run` for one pod over many nodes: the pod's selector, required terms and tolerations are
    read once, each when first needed (where `node_can_run` would first read it, so a malformed part
    fails at the same node), instead of once per node."""

    __slots__ = ("_pod", "_selector", "_terms", "_terms_read", "_tolerations")

    def __init__(self, pod: dict[str, Any]) -> None:
        self._pod = pod
        self._selector: list[tuple[str, str]] | None = None
        self._terms: list[dict[str, Any]] | None = None  # None: no required terms (once read)
        self._terms_read = False
        self._tolerations: list[dict[str, Any]] | None = None

    def can_run(self, node: NodeFacts, requests: dict[str, Decimal]) -> bool:
        labels = node.labels
        selector = self._selector
        if selector is None:
            raw = (self._pod.get("spec") or {}).get("nodeSelector") or {}
            selector = self._selector = [(str(k), str(v)) for k, v in raw.items()]
        for key, value in selector:
            if labels.get(key) != value:
                return False
        if not self._terms_read:
            self._terms = required_terms(self._pod)
            self._terms_read = True
        terms = self._terms
        if terms is not None and not any(term_matches(term, labels, node.name) for term in terms):
            return False
        for taint in node.taints:
            if taint.effect not in ("NoSchedule", "NoExecute"):
                continue
            tolerations = self._tolerations
            if tolerations is None:
                raw_tolerations = (self._pod.get("spec") or {}).get("tolerations") or []
                tolerations = self._tolerations = [t for t in raw_tolerations if isinstance(t, dict)]
            if not any(toleration_tolerates(t, taint) for t in tolerations):
                return False
        return resources_fit(requests, node.allocatable)


def explain_infeasible(pod: dict[str, Any], nodes: Iterable[NodeFacts], limit: int = 3) -> str:
    """Why no node can run the pod, by the first predicate each node fails, most common first:
    `2 nodes do not match its nodeSelector or node affinity; 14 nodes have taints it does not tolerate
    (nvidia.com/gpu=present:NoSchedule); 3 nodes have too little nvidia.com/gpu (asks 16)`."""
    requests = pod_requests(pod)
    counts: dict[str, int] = {}
    taints_seen: dict[str, None] = {}
    short: dict[str, None] = {}
    for node in nodes:
        if node.unschedulable:
            reason = "unschedulable"
        elif not node_selector_matches(pod, node.labels) or not node_affinity_matches(pod, node.labels, node.name):
            reason = "selector"
        elif not tolerates_taints(pod, node.taints):
            reason = "taints"
            for taint in node.taints:
                text = f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"
                taints_seen[text] = None
        elif not resources_fit(requests, node.allocatable):
            reason = "resources"
            for key, amount in requests.items():
                if amount > 0 and amount > node.allocatable.get(key, Decimal(0)) and key not in ("cpu", "memory"):
                    short[f"{key} (asks {amount.normalize():f})"] = None
        else:
            continue
        counts[reason] = counts.get(reason, 0) + 1
    words = {
        "unschedulable": "are cordoned",
        "selector": "do not match its nodeSelector or node affinity",
        "taints": f"have taints it does not tolerate ({', '.join(list(taints_seen)[:limit])})",
        "resources": f"have too little {', '.join(list(short)[:limit]) or 'of what it requests'}",
    }
    parts = [f"{n} node{'s' if n != 1 else ''} {words[r]}" for r, n in sorted(counts.items(), key=lambda i: -i[1])]
    return "; ".join(parts) if parts else "no node has the GPUs it requests"
