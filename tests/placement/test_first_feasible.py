"""`first_feasible` reads the pod once for many nodes: it must answer exactly as `node_can_run` node by node.

The reference is the predicate itself, applied to every node in order; pods are generated with node
selectors, required node affinity (every operator, matchFields too), tolerations and GPU requests over the
example cluster's real nodes, including shapes that make the predicates raise.
"""

from __future__ import annotations

from typing import Any

from effort import tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_support import EXAMPLES

from webhook.assembly import build_runtime
from webhook.cluster.node_facts import NodeFacts
from webhook.config import load_config
from webhook.scheduling.predicates import first_feasible, node_can_run, pod_requests

_RUNTIME = build_runtime(load_config(EXAMPLES / "config.yaml"), EXAMPLES / "cluster", load_policies=False)
_MODEL = _RUNTIME.store.snapshot()
NODES: list[NodeFacts] = list(_MODEL.nodes.values())
LABEL_KEYS = [*sorted({key for node in NODES for key in node.labels})[:40], "absent.example/key"]
LABEL_VALUES = [*sorted({value for node in NODES for value in node.labels.values()})[:40], "none-such", "8", "0"]
TAINT_KEYS = [*sorted({taint.key for node in NODES for taint in node.taints}), "other.example/taint"]

expressions = st.fixed_dictionaries(
    {
        "key": st.sampled_from(LABEL_KEYS),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]),
    },
    optional={"values": st.lists(st.sampled_from(LABEL_VALUES), max_size=3)},
)
fields = st.fixed_dictionaries(
    {"key": st.just("metadata.name"), "operator": st.sampled_from(["In", "NotIn"]),
     "values": st.lists(st.sampled_from(sorted(_MODEL.nodes)), max_size=2)}
)
terms = st.fixed_dictionaries({}, optional={
    "matchExpressions": st.lists(expressions, max_size=3), "matchFields": st.lists(fields, max_size=1),
})
tolerations = st.one_of(
    st.fixed_dictionaries({}, optional={
        "key": st.sampled_from(TAINT_KEYS), "operator": st.sampled_from(["Exists", "Equal"]),
        "value": st.sampled_from(["present", "true", ""]), "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
    }),
    st.just("not-a-toleration"),
)
resources = st.fixed_dictionaries({}, optional={
    "limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "cpu", "memory"]),
                              st.sampled_from(["1", "2", "8", "16", "500m", "64Gi", "x"]), max_size=3),
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                st.sampled_from(["1", "4", "100Gi", "0"]), max_size=2),
})
# Well-formed parts, and parts of the wrong type that make the predicates raise (the same way either way).
node_selectors = st.one_of(st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
                           st.just(["not", "a", "map"]))
affinities = st.one_of(
    st.builds(
        lambda ts: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ts}}},
        st.lists(terms, max_size=3),
    ),
    st.just({"nodeAffinity": ["not", "a", "map"]}),
)
specs = st.fixed_dictionaries(
    {"containers": st.lists(st.fixed_dictionaries({"name": st.just("c"), "resources": resources}), min_size=1,
                            max_size=2)},
    optional={"nodeSelector": node_selectors, "affinity": affinities,
              "tolerations": st.one_of(st.lists(tolerations, max_size=4), st.just(7))},
)


def _reference(pod: dict[str, Any], nodes: list[NodeFacts]) -> str | None:
    requests = pod_requests(pod)
    for node in nodes:
        if not node.unschedulable and node_can_run(pod, node, requests):
            return node.name
    return None


def _answer(function: Any, pod: dict[str, Any], nodes: list[NodeFacts]) -> tuple[str, Any]:
    try:
        return "found", function(pod, nodes)
    except Exception as exc:  # the same failure, at the same node, is part of the answer
        return "raised", type(exc).__name__


@settings(max_examples=tries(50, 400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, order=st.permutations(range(len(NODES))), count=st.integers(0, len(NODES)))
def test_first_feasible_answers_as_node_can_run_node_by_node(
    spec: dict[str, Any], order: list[int], count: int
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    nodes = [NODES[i] for i in order[:count]]
    assert _answer(first_feasible, pod, nodes) == _answer(_reference, pod, nodes)
