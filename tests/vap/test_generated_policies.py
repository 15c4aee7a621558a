"""CEL GPUPolicies as ValidatingAdmissionPolicies (policies.generateAdmissionPolicies): which qualify, that
the API server's evaluation (cel-python, as in tests/chart) refuses what KGWE refuses, and the leader's
sync against the fake API server (objects as v1.36 serves admissionregistration.k8s.io/v1)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from chart_support import Cel
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client
from waiting import eventually

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.cluster.kube_json import KubeJson
from webhook.cluster.kube_source import KubeClusterSource
from webhook.cluster.model import ClusterStore
from webhook.vap.sync import HASH_ANNOTATION, AdmissionPolicySync
from webhook.vap.translate import cel_literal, rewrite, translate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
EXCLUDED = ["kube-system", "kgwe-system"]

# Written without optionals, which cel-python (the API server's stand-in here) lacks.
CAP = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy",
    "metadata": {"name": "gpu-cap", "uid": "uid-gpu-cap"},
    "spec": {
        "enforcementAction": "Deny",
        "match": {"operations": ["CREATE"], "namespaces": ["team-a", "team-b"]},
        "matchConditions": [{"name": "not-system", "expression": "!object.metadata.name.startsWith('system-')"}],
        "validations": [{
            "expression": "object.spec.containers.all(c, !has(c.resources.limits) || "
                          "!('nvidia.com/gpu' in c.resources.limits) || "
                          "int(c.resources.limits['nvidia.com/gpu']) <= params.maxGpus)",
            "message": "too many\nGPUs",
            "messageExpression": "'at most ' + string(params.maxGpus) + ' GPUs per container' // params: a comment",
        }],
        "params": {"maxGpus": 4, "note": "say \"hi\"", "ratio": 0.5, "tags": ["a"], "off": None},
    },
}


def pod(gpus: int, name: str = "p", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}]}}


def verdict(cel: Cel, policy: dict[str, Any], obj: dict[str, Any], operation: str = "CREATE",
            old: dict[str, Any] | None = None) -> str:
    """As the API server applies one policy: "skipped", "allowed" or the refusal's message."""
    spec = policy["spec"]
    if operation not in spec["matchConstraints"]["resourceRules"][0]["operations"]:
        return "skipped"
    activation: dict[str, Any] = {"object": obj, "oldObject": old, "request": {"operation": operation}}
    if not all(cel.check(c["expression"], **activation) for c in spec["matchConditions"]):
        return "skipped"
    variables = {v["name"]: cel.evaluate(v["expression"]) for v in spec.get("variables", [])}
    activation["variables"] = variables
    env = celpy.Environment()
    for validation in spec["validations"]:
        program = env.program(env.compile(validation["expression"]))
        bound = {k: celpy.json_to_cel(v) for k, v in activation.items() if k != "variables"}
        bound["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})
        if not bool(program.evaluate(bound)):
            message = env.program(env.compile(validation["messageExpression"])).evaluate(bound)
            return str(message)
    return "allowed"


def test_a_cel_policy_becomes_a_policy_and_binding_the_api_server_decides_alike(cel: Cel) -> None:
    generated = translate(CAP, excluded_namespaces=EXCLUDED)
    policy, binding = generated.policy, generated.binding
    assert generated.name == "kgwe-gpupolicy-gpu-cap"
    assert binding["spec"] == {"policyName": "kgwe-gpupolicy-gpu-cap", "validationActions": ["Deny"]}
    for obj in (policy, binding):
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kgwe", "kgwe.io/gpupolicy": "gpu-cap"}
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-gpu-cap"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": sorted(EXCLUDED)},
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]},
    ]
    assert spec["validations"][0]["message"] == "too many GPUs"  # the API server refuses line breaks
    assert "params:" in spec["validations"][0]["messageExpression"]  # the comment is kept as written

    assert verdict(cel, policy, pod(2)) == "allowed"
    assert verdict(cel, policy, pod(8)) == "at most 4 GPUs per container"
    assert verdict(cel, policy, pod(8, name="system-x")) == "skipped"  # the policy's own match condition
    assert verdict(cel, policy, pod(0)) == "skipped"  # no GPU, no kgwe.io/ key: KGWE never judges it
    assert verdict(cel, policy, pod(0, annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"})) == "allowed"
    assert verdict(cel, policy, pod(8), operation="UPDATE", old=pod(8)) == "skipped"  # match.operations


def test_params_become_a_cel_literal_with_the_same_values(cel: Cel) -> None:
    literal = cel_literal(CAP["spec"]["params"])
    value = cel.evaluate(literal)
    assert value == celpy.json_to_cel(CAP["spec"]["params"])
    assert cel_literal(1.0) == "1.0" and cel_literal(7) == "7"
    with pytest.raises(ValueError):
        cel_literal(2**64)


@pytest.mark.parametrize(("expression", "written"), [
    ("params.max > 1", "variables.params.max > 1"),
    (".params.max > 1", "variables.params.max > 1"),
    ("object.params == 'params' && params['x'] == 1", "object.params == 'params' && variables.params['x'] == 1"),
    ("object.spec.containers.all(c, c.name != params.name)",
     "object.spec.containers.all(c, c.name != variables.params.name)"),
])
def test_params_are_rewritten_token_by_token(expression: str, written: str) -> None:
    assert rewrite(expression) == (written, True)


@pytest.mark.parametrize(("change", "reason"), [
    ({"rego": {"module": "package x"}}, "Rego"),
    ({"validations": []}, "no CEL validations"),
    ({"validations": [{"expression": "usage == null"}]}, "usage"),
    ({"validations": [{"expression": "request.object.metadata.name != ''"}]}, "request's objects"),
    ({"validations": [{"expression": "object.spec.containers.all(params, params.name != '')"}]}, "params"),
])
def test_what_only_kgwe_can_decide_does_not_qualify(change: dict[str, Any], reason: str) -> None:
    policy = copy.deepcopy(CAP)
    policy["spec"].update(change)
    with pytest.raises(ValueError, match=reason):
        translate(policy, excluded_namespaces=EXCLUDED)


def test_the_example_cel_policy_qualifies_and_the_rego_one_does_not() -> None:
    cap = yaml.safe_load((EXAMPLES / "max-gpus-per-pod.yaml").read_text())
    generated = translate(cap, excluded_namespaces=EXCLUDED)
    assert generated.policy["spec"]["variables"] == [{"name": "params", "expression": "{\"maxGpus\": 8}"}]
    assert "ownerReferences" not in generated.policy["metadata"]  # a file's policy: nothing to own it
    with pytest.raises(ValueError, match="Rego"):
        translate(yaml.safe_load((EXAMPLES / "require-owner-label.yaml").read_text()), excluded_namespaces=EXCLUDED)


# -- the leader's sync, against the fake API server --------------------------------------------------------


class Cluster:
    def __init__(self, server: FakeApiServer, store: ClusterStore, sync: AdmissionPolicySync) -> None:
        self.server, self.store, self.sync = server, store, sync

    def put_policy(self, policy: dict[str, Any]) -> None:
        stored = self.server.put("GPUPolicy", policy)
        eventually(lambda: (self.store.snapshot(force=True).gpu_policies.get(policy["metadata"]["name"]) or {})
                   .get("metadata", {}).get("resourceVersion") == stored["metadata"]["resourceVersion"],
                   what="the GPUPolicy in the model")

    def generated(self) -> dict[str, set[str]]:
        return {kind: set(self.server.objects(kind))
                for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")}

    def writes(self) -> list[str]:
        return [f"{r.method} {r.path.rsplit('/', 1)[-1]}" for r in self.server.requests
                if r.method in ("POST", "PUT", "DELETE") and "admissionregistration" in r.path]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    server = FakeApiServer().start()
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    refused: set[str] = set()
    with k8s_client.ApiClient(configuration) as client:
        store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
        source = KubeClusterSource(store, client, kinds=("Node", "Pod", "Namespace", "GPUPolicy"))
        source.start()
        try:
            assert source.wait_loaded(20)
            sync = AdmissionPolicySync(store, KubeJson(client), excluded_namespaces=EXCLUDED,
                                       refused=lambda: refused)
            yield Cluster(server, store, sync)
        finally:
            source.stop()
            server.close()


def test_the_leader_writes_updates_and_removes_generated_policies(cluster: Cluster) -> None:
    server = cluster.server
    name = "kgwe-gpupolicy-gpu-cap"
    # Someone else's policy, and one of KGWE's chart (not generated): never touched.
    server.put("ValidatingAdmissionPolicy", {"metadata": {"name": "corp-policy"}, "spec": {}})
    server.put("ValidatingAdmissionPolicy", {"metadata": {"name": "kgwe-webhook-pod-scope",
                                                          "labels": {"app.kubernetes.io/managed-by": "kgwe"}}})
    cluster.put_policy(CAP)
    rego = {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "with-rego"},
            "spec": {"rego": {"module": "package kgwe.policy.r\nimport rego.v1\ndeny contains 'x' if false"}}}
    cluster.put_policy(rego)
    cluster.sync.sync()
    assert cluster.generated() == {"ValidatingAdmissionPolicy": {"corp-policy", "kgwe-webhook-pod-scope", name},
                                   "ValidatingAdmissionPolicyBinding": {name}}
    assert "Rego" in cluster.sync.not_generated["with-rego"]
    stored = server.objects("ValidatingAdmissionPolicy")[name]
    assert stored["spec"]["validations"][0]["expression"].endswith("<= variables.params.maxGpus)")
    assert HASH_ANNOTATION in stored["metadata"]["annotations"]
    assert cluster.writes() == ["POST validatingadmissionpolicies", "POST validatingadmissionpolicybindings"]

    cluster.sync.sync()  # nothing changed: nothing written
    assert len(cluster.writes()) == 2

    lowered = copy.deepcopy(CAP)
    lowered["spec"]["params"]["maxGpus"] = 2
    cluster.put_policy(lowered)
    cluster.sync.sync()
    assert cluster.writes()[2:] == [f"PUT {name}"]  # the policy's params changed; its binding did not
    assert "maxGpus\": 2" in server.objects("ValidatingAdmissionPolicy")[name]["spec"]["variables"][0]["expression"]

    # Not compiling now: what was generated from the last good version stays.
    broken = copy.deepcopy(lowered)
    broken["spec"]["validations"][0]["expression"] = "object.spec.("
    cluster.sync.refused = lambda: {"gpu-cap"}
    cluster.put_policy(broken)
    cluster.sync.sync()
    assert name in cluster.generated()["ValidatingAdmissionPolicy"]

    # Qualifying no more (it reads usage now): removed, the binding first.
    cluster.sync.refused = set
    uses_usage = copy.deepcopy(lowered)
    uses_usage["spec"]["validations"][0]["expression"] = "usage == null"
    cluster.put_policy(uses_usage)
    cluster.sync.sync()
    assert cluster.writes()[-2:] == [f"DELETE {name}", f"DELETE {name}"]
    deletes = [r for r in server.requests if r.method == "DELETE"]
    assert deletes[-2].path.endswith(f"validatingadmissionpolicybindings/{name}")
    assert all(set(r.body["preconditions"]) == {"uid", "resourceVersion"} for r in deletes)
    assert cluster.generated() == {"ValidatingAdmissionPolicy": {"corp-policy", "kgwe-webhook-pod-scope"},
                                   "ValidatingAdmissionPolicyBinding": set()}

    # Back, then the GPUPolicy deleted: gone again.
    cluster.put_policy(CAP)
    cluster.sync.sync()
    assert name in cluster.generated()["ValidatingAdmissionPolicyBinding"]
    server.delete("GPUPolicy", "gpu-cap")
    eventually(lambda: "gpu-cap" not in cluster.store.snapshot(force=True).gpu_policies, what="the GPUPolicy gone")
    cluster.sync.sync()
    assert name not in cluster.generated()["ValidatingAdmissionPolicy"]


def test_a_policy_changed_under_the_update_is_redone_next_pass(cluster: Cluster) -> None:
    cluster.put_policy(CAP)
    cluster.sync.sync()
    name = "kgwe-gpupolicy-gpu-cap"
    lowered = copy.deepcopy(CAP)
    lowered["spec"]["params"]["maxGpus"] = 1
    cluster.put_policy(lowered)
    # Someone rewrites the generated policy between the sync's list and its update: 409, no harm.
    original = cluster.sync.api

    class Racing:
        def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
            if method == "PUT":
                current = cluster.server.objects("ValidatingAdmissionPolicy")[name]
                cluster.server.put("ValidatingAdmissionPolicy", current)
            return original.request(method, path, **kw)

    def params() -> str:
        return str(cluster.server.objects("ValidatingAdmissionPolicy")[name]["spec"]["variables"][0]["expression"])

    cluster.sync.api = Racing()
    cluster.sync.sync()
    assert "maxGpus\": 1" not in params()
    cluster.sync.api = original
    cluster.sync.sync()
    assert "maxGpus\": 1" in params()


def test_nothing_is_written_before_the_policies_are_listed() -> None:
    class NoApi:
        def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise AssertionError("asked the API before the model had the GPUPolicies")

    store = ClusterStore(AcceleratorTable.build(), min_rebuild_interval=0)
    AdmissionPolicySync(store, NoApi(), excluded_namespaces=EXCLUDED).sync()
