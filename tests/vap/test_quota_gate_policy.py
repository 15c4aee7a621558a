"""The chart's quota-gate ValidatingAdmissionPolicy (templates/pod-quota-gate.yaml): a new GPU pod of a tenant with a
TenantQuota carries `kgwe.io/quota`, held by the API server with every webhook replica down.

Rendered by the real Helm engine and applied as the API server applies it (tests/vap/apiserver_policy.py, cel-python),
once per TenantQuota (its params). Checked by example, and against KGWE's own `/mutate` and `/validate` (the real
admission core, configured from the chart's own ConfigMap) over generated pods, tenants and namespaces: it never
refuses a pod KGWE admits, and it refuses the ungated pods KGWE would have gated, wherever it can see why.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from apiserver_policy import ALLOWED, SKIPPED, ApiServerPolicy
from chart_support import NAMESPACE, REPO, Rendered, render
from effort import tries
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from policies.gpu_demand import pod_gpu_demand
from policies.quota.model import resolve_tenant
from webhook.admission.request import UserInfo
from webhook.assembly import build_runtime
from webhook.config import Config
from webhook.quotas.scheduling_gate import QUOTA_GATE, deferred_to_kueue
from webhook.review import answer_with_outcome, create_review, decoded_patch
from webhook.runtime import Runtime
from webhook.workloads.kind import workloads_of

POLICY = "kgwe-pod-quota-gate"
CLUSTER = REPO / "examples" / "cluster"
CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE = {"config": {"quotas": {"deferTo": "kueue", "deferNamespaceSelector": {
    "matchLabels": {"queue": "kueue"}, "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}}}}


def policy_of(rendered: Rendered) -> ApiServerPolicy:
    if POLICY not in rendered.names("ValidatingAdmissionPolicy"):
        return ApiServerPolicy(None, None)
    return ApiServerPolicy(rendered.one("ValidatingAdmissionPolicy", POLICY),
                           rendered.one("ValidatingAdmissionPolicyBinding", POLICY))


@pytest.fixture(scope="module")
def scenes() -> dict[str, Rendered]:
    return {"default": render({}), "kueue": render(KUEUE)}


@pytest.fixture(scope="module")
def gate_policy(scenes: dict[str, Rendered]) -> ApiServerPolicy:
    return policy_of(scenes["default"])


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Namespace as the API server keeps it (it adds `kubernetes.io/metadata.name`)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}}}


def quota(name: str, *, namespaces: list[str] | None = None, selector: dict[str, Any] | None = None,
          groups: list[str] | None = None, gpus: int = 64) -> dict[str, Any]:
    spec: dict[str, Any] = {"tenant": name, "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": gpus}]}
    if namespaces is not None:
        spec["namespaces"] = namespaces
    if selector is not None:
        spec["namespaceSelector"] = selector
    if groups is not None:
        spec["groups"] = groups
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": name}, "spec": spec}


def container(name: str = "main", limits: dict[str, str] | None = None, requests: dict[str, str] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "cuda", "resources": resources, **extra}


def pod(ns: str = "team-a", *, containers: list[dict[str, Any]] | None = None,
        init: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None,
        gates: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [container(limits={"nvidia.com/gpu": "1"})]}
    if init is not None:
        spec["initContainers"] = init
    if gates is not None:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train", "namespace": ns, "annotations": dict(annotations or {})}, "spec": spec}


def request_for(obj: dict[str, Any], user: str = "alice", groups: list[str] | None = None) -> dict[str, Any]:
    """The request as the API server hands it to admission (the same one KGWE is sent)."""
    request: dict[str, Any] = create_review(obj, user, groups or [])["request"]
    return request


def verdict(policy: ApiServerPolicy, obj: dict[str, Any], quotas: list[dict[str, Any]], *, user: str = "alice",
            groups: list[str] | None = None, labels: dict[str, str] | None = None) -> str:
    ns = obj["metadata"]["namespace"]
    return policy.verdict(request_for(obj, user, groups), obj, namespace(ns, labels), quotas)


def refused(answer: str) -> bool:
    return answer not in (ALLOWED, SKIPPED)


TEAM_A = quota("team-a", namespaces=["team-a"])


# -- by example ---------------------------------------------------------------------------------------------------


def test_a_gpu_pod_of_a_tenant_with_a_quota_must_carry_the_gate(gate_policy: ApiServerPolicy) -> None:
    answer = verdict(gate_policy, pod(), [TEAM_A])
    assert answer.startswith("tenant team-a (TenantQuota team-a): a GPU pod of a tenant with a TenantQuota waits")
    assert "kgwe.io/quota" in answer
    assert verdict(gate_policy, pod(gates=[QUOTA_GATE]), [TEAM_A]) == SKIPPED
    assert refused(verdict(gate_policy, pod(gates=["example.com/other"]), [TEAM_A]))


def test_without_a_claiming_tenant_quota_nothing_is_refused(gate_policy: ApiServerPolicy) -> None:
    assert verdict(gate_policy, pod(), []) == ALLOWED  # parameterNotFoundAction: Allow
    assert verdict(gate_policy, pod("ml"), [TEAM_A]) == ALLOWED
    # Once per TenantQuota: one claiming the pod is enough.
    assert refused(verdict(gate_policy, pod(), [quota("ml", namespaces=["ml"]), TEAM_A]))


SELECTORS = [
    ({}, {}, True),  # empty: every namespace
    ({"matchLabels": {"team": "a"}}, {"team": "a"}, True),
    ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, {"team": "b"}, True),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {"team": "a"}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": "x"}, False),
    ({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"team": "a"}, False),
    # What KGWE cannot read claims nothing (policies/vocabulary/selectors.py), however the labels look.
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": []}]}, {"team": "a"}, False),
    ({"matchExpressions": [{"key": "team", "operator": "NotIn"}]}, {}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]}, {"gpu": "x"}, False),
    ({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist", "values": ["x"]}]},
     {"team": "a"}, False),
    ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]}, {}, True),
]


@pytest.mark.parametrize(("selector", "labels", "claimed"), SELECTORS)
def test_namespace_selectors_claim_as_kgwe_reads_them(gate_policy: ApiServerPolicy, selector: dict[str, Any],
                                                      labels: dict[str, str], claimed: bool) -> None:
    tq = quota("lab", selector=selector)
    ns = namespace("team-a", labels)
    assert bool(resolve_tenant("team-a", ns["metadata"]["labels"], [], [tq])[1]) is claimed  # KGWE's own rule
    assert refused(verdict(gate_policy, pod(), [tq], labels=labels)) is claimed


def test_groups_claim_the_requesters_pods_but_not_a_controllers_signed_ones(gate_policy: ApiServerPolicy) -> None:
    tq = quota("ml", groups=["ml-researchers"])
    assert refused(verdict(gate_policy, pod("lab"), [tq], groups=["ml-researchers"]))
    assert verdict(gate_policy, pod("lab"), [tq], groups=["other"]) == ALLOWED
    # A controller's pod is judged by KGWE as the workload's author, whose groups only KGWE can verify.
    signed = pod("lab", annotations={"kgwe.io/requested-by": "{...}"})
    assert verdict(gate_policy, signed, [tq], user=CONTROLLER, groups=["ml-researchers"]) == ALLOWED
    assert refused(verdict(gate_policy, pod("lab"), [tq], user=CONTROLLER, groups=["ml-researchers"]))
    # Anyone else's annotation changes nothing (KGWE removes or refuses it); nor does it for a namespace claim.
    assert refused(verdict(gate_policy, signed, [tq], groups=["ml-researchers"]))
    by_name = quota("lab", namespaces=["lab"])
    assert refused(verdict(gate_policy, signed, [by_name], user=CONTROLLER))


GPU_ASKS = [
    ([container(limits={"nvidia.com/gpu": "1"})], None, True),
    ([container(limits={"nvidia.com/mig-1g.10gb": "2"})], None, True),
    ([container(limits={"nvidia.com/gpumem": "1Gi"})], None, True),  # HAMi's shares: nvidia.com/ all counts
    ([container(limits={"nvidia.com/gpu": "0", "cpu": "1"})], None, False),
    ([container(limits={"nvidia.com/gpu": "0"}, requests={"nvidia.com/gpu": "1"})], None, False),  # the limit wins
    ([container(requests={"nvidia.com/gpu": "1"})], None, True),
    ([container(limits={"cpu": "1"})], [container("init", limits={"nvidia.com/gpu": "1"})], True),
    ([container(limits={"cpu": "1"})], [container("side", limits={"nvidia.com/gpu": "2"}, restartPolicy="Always")],
     True),
    ([container(limits={"cpu": "1"}), container("b", limits={"nvidia.com/gpu": "1"})], None, True),
    ([container(limits={"example.com/gpu": "1"})], None, False),
]


@pytest.mark.parametrize(("containers", "init", "asks"), GPU_ASKS)
def test_gpus_are_counted_as_kgwe_counts_them(gate_policy: ApiServerPolicy, containers: list[dict[str, Any]],
                                              init: list[dict[str, Any]] | None, asks: bool) -> None:
    obj = pod(containers=containers, init=init, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})
    assert pod_gpu_demand(obj).asks_gpu is asks
    assert refused(verdict(gate_policy, obj, [TEAM_A])) is asks


def test_pods_kgwe_never_sees_are_not_looked_at(gate_policy: ApiServerPolicy) -> None:
    everywhere = quota("all", selector={})
    for ns in ("kube-system", NAMESPACE):
        assert verdict(gate_policy, pod(ns), [everywhere]) == SKIPPED
    assert verdict(gate_policy, pod(annotations={"kubernetes.io/config.mirror": "x"}), [everywhere]) == SKIPPED
    # amd.com/gpu is a GPU to KGWE, but webhooks.resourcePrefixes does not send such a pod to it...
    amd = pod(containers=[container(limits={"amd.com/gpu": "1"})])
    assert verdict(gate_policy, amd, [everywhere]) == SKIPPED
    # ...unless it carries kgwe.io/ annotations.
    amd["metadata"]["annotations"]["kgwe.io/accelerator"] = "amd-mi300x-192gb"
    assert refused(verdict(gate_policy, amd, [everywhere]))


def test_namespaces_deferred_to_kueue_need_no_gate(scenes: dict[str, Rendered]) -> None:
    policy = policy_of(scenes["kueue"])
    config = Config.model_validate(KUEUE["config"])
    everywhere = quota("all", selector={})
    for labels in ({"queue": "kueue"}, {"queue": "kueue", "env": "dev"}, {}, {"queue": "other"}):
        deferred = deferred_to_kueue(config, namespace("team-a", labels)["metadata"]["labels"])
        assert (not refused(verdict(policy, pod(), [everywhere], labels=labels))) is deferred, labels


@pytest.mark.parametrize("values", [
    {"config": {"mode": "audit"}},  # KGWE returns no patch: no pod is gated
    {"config": {"mode": "Audit"}},
    {"config": {"quotas": {"deferTo": "kueue"}}},  # every namespace is Kueue's
    {"config": {"quotas": {"deferTo": "kueue", "deferNamespaceSelector": {}}}},
    {"webhook": {"quotaGatePolicy": {"enabled": False}}},
])
def test_no_policy_where_kgwe_gates_no_pod(values: dict[str, Any]) -> None:
    rendered = render(values)
    assert POLICY not in rendered.names("ValidatingAdmissionPolicy")
    assert POLICY not in rendered.names("ValidatingAdmissionPolicyBinding")


# The chart writes `deferNamespaceSelector` into CEL itself (kgwe.cel.selectorMatches): each of these is read as
# KGWE reads it, a selector KGWE cannot read (non-string values, In without values, ...) deferring nothing.
DEFER_SELECTORS = [
    {"matchLabels": {"queue": "kueue", "tier": "it's \"quoted\" & <odd>"}},
    {"matchExpressions": [{"key": "queue", "operator": "In", "values": ["kueue", "batch"]},
                          {"key": "env", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]},
                          {"key": "queue", "operator": "Exists"}]},
    {"matchLabels": {"queue": 1}},
    {"matchLabels": ["queue"]},
    {"matchExpressions": [{"key": "queue", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "queue", "operator": "Exists", "values": ["x"]}]},
    {"matchExpressions": [{"key": "queue", "operator": "Gt", "values": ["1"]}]},
    {"matchExpressions": [{"key": "queue", "operator": "In", "values": "kueue"}]},
    {"matchExpressions": [{"operator": "Exists"}]},
    {"matchExpressions": {"key": "queue", "operator": "Exists"}},
]
DEFER_LABELS = [{}, {"queue": "kueue"}, {"queue": "batch", "env": "dev"}, {"queue": "kueue", "env": "prod"},
                {"queue": "kueue", "tier": "it's \"quoted\" & <odd>"}, {"queue": "1"}]


@pytest.mark.parametrize("selector", DEFER_SELECTORS)
def test_the_kueue_selector_is_read_as_kgwe_reads_it(selector: dict[str, Any]) -> None:
    values = {"config": {"quotas": {"deferTo": "kueue", "deferNamespaceSelector": selector}}}
    rendered = render(values)
    config = Config.model_validate(yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"]))
    policy = policy_of(rendered)
    for labels in DEFER_LABELS:
        deferred = deferred_to_kueue(config, namespace("team-a", labels)["metadata"]["labels"])
        assert (not refused(verdict(policy, pod(), [TEAM_A], labels=labels))) is deferred, labels


# -- against KGWE's own admission --------------------------------------------------------------------------------


@dataclass
class Kgwe:
    """KGWE configured from the chart's ConfigMap over the example cluster, and the API server's routing to it."""

    runtime: Runtime
    routing: ApiServerPolicy  # the mutating webhook's namespaceSelector and matchConditions, as a policy would be
    policy: ApiServerPolicy

    def set_cluster(self, namespaces: list[dict[str, Any]], quotas: list[dict[str, Any]]) -> None:
        store = self.runtime.store
        store.replace_kind("Namespace", namespaces)
        store.replace_kind("TenantQuota", quotas)
        store.snapshot(force=True)

    def routed(self, request: dict[str, Any], obj: dict[str, Any], ns: dict[str, Any]) -> bool:
        return self.routing.verdict(request, obj, ns) != SKIPPED

    def admit(self, obj: dict[str, Any], user: str, groups: list[str]) -> tuple[bool | None, dict[str, Any]]:
        """(True, the pod as admitted), (False, the pod refused by /validate) or (None, obj) when /mutate refused."""
        review = create_review(obj, user, groups)
        mutated, _ = answer_with_outcome(self.runtime.admission, review, True, 10.0)
        if not mutated["allowed"]:
            return None, obj
        patch = decoded_patch(mutated)
        made: dict[str, Any] = jsonpatch.apply_patch(review["request"]["object"], patch) if patch else obj
        validated, _ = answer_with_outcome(self.runtime.admission, create_review(made, user, groups), False, 10.0)
        return bool(validated["allowed"]), made


def kgwe_for(rendered: Rendered, key_file: Path) -> Kgwe:
    raw = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])
    raw["workloads"]["identityKeyFile"] = str(key_file)
    runtime = build_runtime(Config.model_validate(raw), CLUSTER)
    webhook = next(w for w in rendered.one("MutatingWebhookConfiguration")["webhooks"] if w["name"] == "mutate.kgwe.io")
    routing = {"spec": {"matchConstraints": {"resourceRules": webhook["rules"],
                                             "namespaceSelector": webhook["namespaceSelector"]},
                        "matchConditions": webhook["matchConditions"], "validations": []}}
    return Kgwe(runtime, ApiServerPolicy(routing, None), policy_of(rendered))


@pytest.fixture(scope="module")
def kgwes(scenes: dict[str, Rendered], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Kgwe]]:
    key = tmp_path_factory.mktemp("identity") / "key"
    key.write_bytes(b"0123456789abcdef0123456789abcdef")
    yield {name: kgwe_for(rendered, key) for name, rendered in scenes.items()}


GROUPS = ["ml", "lab", "system:serviceaccounts"]
LABELS = st.dictionaries(st.sampled_from(["team", "queue", "env"]), st.sampled_from(["a", "kueue", "dev"]), max_size=3)
EXPRESSION = st.builds(
    lambda key, operator, values: {"key": key, "operator": operator,
                                   **({"values": values} if values is not None else {})},
    st.sampled_from(["team", "queue", "env"]), st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    st.none() | st.lists(st.sampled_from(["a", "kueue", "dev"]), max_size=2),
)
# Mostly none: an empty selector claims every namespace, and hides what the other ways to claim a pod decide.
SELECTOR = st.one_of(st.none(), st.none(), st.none(), st.fixed_dictionaries({}, optional={
    "matchLabels": st.dictionaries(st.sampled_from(["team", "queue"]), st.sampled_from(["a", "kueue"]), max_size=2),
    "matchExpressions": st.lists(EXPRESSION, max_size=2),
}))
QUOTA = st.tuples(
    st.none() | st.lists(st.sampled_from(["team-a", "ml", "lab"]), min_size=1, max_size=2, unique=True),
    SELECTOR,
    st.none() | st.lists(st.sampled_from(GROUPS), max_size=2, unique=True),
    st.sampled_from([1, 64]),
)
# Canonical quantities, as the API server writes them; mostly whole GPUs of NVIDIA's, which the webhooks are sent.
AMOUNT = st.sampled_from(["0", "1", "1", "2", "2", "500m"])
RESOURCE = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "cpu"])
CONTAINER = st.tuples(st.dictionaries(RESOURCE, AMOUNT, min_size=1, max_size=2),  # limits
                      st.none() | st.dictionaries(RESOURCE, AMOUNT, max_size=2),  # requests
                      st.sampled_from([None, "Always"]))  # restartPolicy: an init container is then a sidecar
# An intent often, a mirror pod (which the webhooks are never sent) seldom.
INTENT = {"kgwe.io/accelerator": "nvidia-h100-80gb"}
ANNOTATIONS = st.sampled_from([{}, {}, INTENT, INTENT, {"kubernetes.io/config.mirror": "x"}]).map(dict)


@dataclass
class Case:
    namespace: dict[str, Any]
    quotas: list[dict[str, Any]]
    obj: dict[str, Any]
    user: str
    groups: list[str]
    signed_groups: list[str] | None  # a genuine kgwe.io/requested-by for bob in these groups (signed in the test)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    ns = namespace(draw(st.sampled_from(["team-a", "ml", "lab"] * 3 + ["kube-system", NAMESPACE])), draw(LABELS))
    quotas = [quota(f"q{i}", namespaces=names, selector=selector, groups=groups, gpus=gpus)
              for i, (names, selector, groups, gpus) in enumerate(draw(st.lists(QUOTA, max_size=3)))]

    def made(name: str, parts: tuple[Any, Any, Any]) -> dict[str, Any]:
        limits, requests, restart = parts
        return container(name, limits, requests, **({"restartPolicy": restart} if restart else {}))

    containers = [made(f"c{i}", parts) for i, parts in enumerate(draw(st.lists(CONTAINER, min_size=1, max_size=2)))]
    init = [made(f"i{i}", parts) for i, parts in enumerate(draw(st.lists(CONTAINER, max_size=1)))]
    user = draw(st.sampled_from(["alice", CONTROLLER]))
    groups = draw(st.lists(st.sampled_from(GROUPS), max_size=2, unique=True))
    annotations = draw(ANNOTATIONS)
    signed = draw(st.none() | st.just("forged") | st.lists(st.sampled_from(GROUPS), max_size=2, unique=True))
    if signed == "forged":
        annotations["kgwe.io/requested-by"] = '{"v":1,"user":"bob","groups":["ml"],"ns":"lab","sig":"00"}'
    obj = pod(ns["metadata"]["name"], containers=containers, init=init or None, annotations=annotations)
    return Case(ns, quotas, obj, user, groups, None if signed == "forged" else signed)


def without_gate(obj: dict[str, Any]) -> dict[str, Any]:
    ungated = copy.deepcopy(obj)
    gates = [g for g in ungated["spec"].get("schedulingGates") or [] if g["name"] != QUOTA_GATE]
    if gates:
        ungated["spec"]["schedulingGates"] = gates
    else:
        ungated["spec"].pop("schedulingGates", None)
    return ungated


def gated(obj: dict[str, Any]) -> bool:
    return any(g["name"] == QUOTA_GATE for g in obj["spec"].get("schedulingGates") or [])


# Corners a mistake hides in: a policy broken on purpose at either of the first two passed 600 generated cases.
CORNERS = [
    # A controller's pod signed for its author: KGWE charges the author's groups, not the controller's.
    Case(namespace("lab"), [quota("q0", groups=["system:serviceaccounts"])], pod("lab"), CONTROLLER,
         ["system:serviceaccounts"], ["ml"]),
    # The limit is what KGWE counts: a request beside a zero limit asks for nothing.
    Case(namespace("team-a"), [quota("q0", namespaces=["team-a"])],
         pod(containers=[container(limits={"nvidia.com/gpu": "0"}, requests={"nvidia.com/gpu": "1"})]), "alice", [],
         None),
    # A selector KGWE cannot read claims nothing.
    Case(namespace("team-a", {"team": "a"}),
         [quota("q0", selector={"matchExpressions": [{"key": "team", "operator": "In", "values": []}]})], pod(),
         "alice", [], None),
]


@pytest.mark.timeout(600)  # about 0.1 s a case on an idle CPU (cel-python is slow), several on a busy one
@pytest.mark.parametrize("scene", ["default", "kueue"])
@settings(max_examples=tries(25, 1000), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
@example(case=CORNERS[0])
@example(case=CORNERS[1])
@example(case=CORNERS[2])
def test_the_policy_refuses_exactly_the_ungated_pods_kgwe_would_gate(kgwes: dict[str, Kgwe], scene: str,
                                                                     case: Case) -> None:
    kgwe = kgwes[scene]
    obj, ns, user, groups = copy.deepcopy(case.obj), case.namespace, case.user, case.groups
    notes = obj["metadata"]["annotations"]
    if case.signed_groups is not None:  # a genuine signature, for a workload's author
        author = UserInfo(username="bob", groups=case.signed_groups)
        signer = workloads_of(kgwe.runtime.admission).identity.signer
        notes["kgwe.io/requested-by"] = signer.sign(author, ns["metadata"]["name"])
    kgwe.set_cluster([ns], case.quotas)
    request = request_for(obj, user, groups)

    if kgwe.routed(request, obj, ns):
        admitted, made = kgwe.admit(obj, user, groups)
    else:
        admitted, made = True, obj  # the API server never asks KGWE: the pod is created as it came
    if admitted is None:
        event("refused by /mutate")
        return  # nothing was made to compare
    kgwe_gates = gated(made)
    event(f"KGWE {'admits' if admitted else 'refuses'}, {'gates' if kgwe_gates else 'does not gate'}")

    # 1. With KGWE up, what it admits (the pod as its mutation left it) the policy admits too.
    if admitted:
        assert kgwe.policy.verdict(request_for(made, user, groups), made, ns, case.quotas) in (ALLOWED, SKIPPED)
    # 2. With KGWE down, a pod it would not gate is admitted by the policy too...
    if not kgwe_gates:
        assert kgwe.policy.verdict(request, obj, ns, case.quotas) in (ALLOWED, SKIPPED)
        return
    # 3. ...and one it would gate (and admit gated) is refused without the gate, wherever the policy can see why:
    # a GPU asked through resources (not a kgwe.io/ intent alone, which the mutation turns into resources), and a
    # tenant claiming the namespace, or the requester's groups where KGWE judges the requester. (A pod KGWE
    # refuses anyway may pass: a fractional device request beside a zero limit is no GPU to the policy, and the
    # API server's own validation refuses it first.)
    if not admitted:
        return
    signed_for_author = user == CONTROLLER and "kgwe.io/requested-by" in notes
    seen_groups = [] if signed_for_author else request["userInfo"]["groups"]
    namespace_labels = ns["metadata"]["labels"]
    visible = pod_gpu_demand(obj).asks_gpu and bool(
        resolve_tenant(ns["metadata"]["name"], namespace_labels, seen_groups, case.quotas)[1])
    event(f"gated pod the policy {'sees' if visible else 'cannot see'}")
    if visible:
        answer = kgwe.policy.verdict(request, without_gate(obj), ns, case.quotas)
        assert answer.startswith("tenant "), answer
