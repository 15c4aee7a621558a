"""The webhook configurations keep their promise: a KGWE outage never blocks ordinary pods.

The matchConditions are evaluated with cel-python against real pods, as the API server evaluates them
before it calls the webhook.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from chart_support import NAMESPACE, SCENARIOS, Cel, Rendered, render

GPU_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"containers": [{"name": "main", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
}
MIG_INIT_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "warmup", "namespace": "team-a"},
    "spec": {
        "initContainers": [{"name": "warm", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}],
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
    },
}
INTENT_ONLY_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "notebook", "namespace": "team-a", "annotations": {"kgwe.io/profile": "small-mig"}},
    "spec": {"containers": [{"name": "main"}]},
}
PLAIN_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}, "annotations": {"team": "a"}},
    "spec": {"containers": [{"name": "nginx", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]},
}


def _with(pod: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    changed = copy.deepcopy(pod)
    for key, value in metadata.items():
        changed["metadata"].setdefault(key, {}).update(value) if isinstance(value, dict) else None
        if not isinstance(value, dict):
            changed["metadata"][key] = value
    return changed


def _webhook(rendered: Rendered, kind: str) -> dict[str, Any]:
    """The pod webhook (the workload webhooks beside it are tested in tests/workloads/test_chart_rules.py)."""
    configuration = rendered.one(kind, "kgwe")
    name = "mutate.kgwe.io" if kind.startswith("Mutating") else "validate.kgwe.io"
    found = [w for w in configuration["webhooks"] if w["name"] == name]
    assert len(found) == 1
    return dict(found[0])


def _sent(cel: Cel, webhook: dict[str, Any], operation: str, pod: dict[str, Any], old: dict[str, Any] | None = None,
          namespace: str | None = None, sub_resource: str = "") -> bool:
    """Would the API server call this webhook? (rules, namespaceSelector and matchConditions, as it applies them.)"""
    namespace = namespace or pod["metadata"]["namespace"]
    for expression in webhook["namespaceSelector"]["matchExpressions"]:
        assert expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "NotIn"
        if namespace in expression["values"]:
            return False
    resource = f"pods/{sub_resource}" if sub_resource else "pods"
    if not any(resource in rule["resources"] and operation in rule["operations"] for rule in webhook["rules"]):
        return False
    request = {"operation": operation, "namespace": namespace, "name": pod["metadata"]["name"],
               "subResource": sub_resource}
    return all(
        cel.check(condition["expression"], object=pod, oldObject=old, request=request)
        for condition in webhook["matchConditions"]
    )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scoping_promises_hold_in_every_scenario(rendered_scenarios: dict[str, Rendered], scenario: str) -> None:
    rendered = rendered_scenarios[scenario]
    mutate = _webhook(rendered, "MutatingWebhookConfiguration")
    validate = _webhook(rendered, "ValidatingWebhookConfiguration")
    assert mutate["name"] == "mutate.kgwe.io" and validate["name"] == "validate.kgwe.io"
    for webhook in (mutate, validate):
        excluded = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert {"kube-system", NAMESPACE} <= set(excluded)
        assert webhook["matchConditions"], "matchConditions must narrow the webhook to GPU pods"
        assert webhook["sideEffects"] == "NoneOnDryRun"
        assert webhook["matchPolicy"] == "Equivalent"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["timeoutSeconds"] <= 5
    assert [rule["resources"] for rule in mutate["rules"]] == [["pods"]]
    # The subresources judged like the pod (SPEC section 13), on UPDATE only; nothing else of pods.
    assert [(rule["resources"], rule["operations"]) for rule in validate["rules"]] == [
        (["pods"], ["CREATE", "UPDATE"]), (["pods/ephemeralcontainers", "pods/status"], ["UPDATE"])]
    assert mutate["failurePolicy"] == "Ignore"
    assert mutate["reinvocationPolicy"] == "IfNeeded"
    assert mutate["rules"][0]["operations"] == ["CREATE"]
    assert mutate["clientConfig"]["service"]["path"] == "/mutate"
    assert validate["failurePolicy"] == "Fail"
    assert validate["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert validate["clientConfig"]["service"]["path"] == "/validate"


def test_own_namespace_is_excluded_wherever_kgwe_is_installed() -> None:
    rendered = render({}, namespace="platform-gpu")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = _webhook(rendered, kind)
        assert "platform-gpu" in webhook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert webhook["clientConfig"]["service"] == {
            "name": "kgwe-webhook", "namespace": "platform-gpu", "path": webhook["clientConfig"]["service"]["path"],
            "port": 443,
        }


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_only_gpu_and_kgwe_pods_reach_the_webhook_on_create(default: Rendered, cel: Cel, kind: str) -> None:
    webhook = _webhook(default, kind)
    assert _sent(cel, webhook, "CREATE", GPU_POD)
    assert _sent(cel, webhook, "CREATE", MIG_INIT_POD)
    assert _sent(cel, webhook, "CREATE", INTENT_ONLY_POD)
    assert not _sent(cel, webhook, "CREATE", PLAIN_POD)


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_protected_pods_never_reach_the_webhook(default: Rendered, cel: Cel, kind: str) -> None:
    webhook = _webhook(default, kind)
    assert not _sent(cel, webhook, "CREATE", GPU_POD, namespace="kube-system")
    assert not _sent(cel, webhook, "CREATE", GPU_POD, namespace=NAMESPACE)
    mirror = _with(GPU_POD, annotations={"kubernetes.io/config.mirror": "0f1e2d"})
    assert not _sent(cel, webhook, "CREATE", mirror)


def test_namespace_condition_holds_even_if_the_selector_is_widened(default: Rendered, cel: Cel) -> None:
    # The matchCondition repeats the namespace exclusion: a hand-edited namespaceSelector cannot make
    # KGWE guard the pods it runs on.
    webhook = _webhook(default, "ValidatingWebhookConfiguration")
    condition = next(c for c in webhook["matchConditions"] if c["name"] == "exclude-kgwe-namespace")
    request = {"operation": "CREATE", "namespace": NAMESPACE}
    assert cel.check(condition["expression"], object=GPU_POD, oldObject=None, request=request) is False


@pytest.mark.parametrize("policies_on_update", [True, False])
def test_updates_reach_the_fail_closed_webhook_only_when_they_touch_judged_fields(
    cel: Cel, policies_on_update: bool
) -> None:
    rendered = render({"webhooks": {"validating": {"policiesOnUpdate": policies_on_update}}})
    webhook = _webhook(rendered, "ValidatingWebhookConfiguration")
    admitted = _with(GPU_POD, annotations={"kgwe.io/accelerator-type": "nvidia-h100-80gb", "kgwe.io/tenant": "team-a"},
                     labels={"kgwe.io/gang": "job-1"})
    # Finalizer removal: KGWE being down must never block it.
    assert not _sent(cel, webhook, "UPDATE", _with(admitted, finalizers=[]), old=_with(admitted, finalizers=["x/y"]))
    # Relabelling is judged by GPUPolicies on UPDATE, unless the admin chose availability over that.
    relabelled = _with(admitted, labels={"app": "trainer"})
    assert _sent(cel, webhook, "UPDATE", relabelled, old=admitted) is policies_on_update
    # Lifting a scheduling gate always reaches it: the gang gate is KGWE's.
    gated = copy.deepcopy(admitted)
    gated["spec"]["schedulingGates"] = [{"name": "kgwe.io/gang"}]
    assert _sent(cel, webhook, "UPDATE", admitted, old=gated)
    # The output-annotation guard sees every change to a kgwe.io/ key.
    assert _sent(cel, webhook, "UPDATE", _with(admitted, annotations={"kgwe.io/hourly-cost": "0.01"}), old=admitted)
    assert _sent(cel, webhook, "UPDATE", _with(admitted, labels={"kgwe.io/gang": "job-2"}), old=admitted)
    removed = copy.deepcopy(admitted)
    del removed["metadata"]["annotations"]["kgwe.io/tenant"]
    assert _sent(cel, webhook, "UPDATE", removed, old=admitted)
    # A plain pod that gains a kgwe.io/ annotation is checked too.
    assert _sent(cel, webhook, "UPDATE", _with(PLAIN_POD, annotations={"kgwe.io/tenant": "free"}), old=PLAIN_POD)
    # And one that drops the last one.
    assert _sent(cel, webhook, "UPDATE", PLAIN_POD, old=_with(PLAIN_POD, annotations={"kgwe.io/tenant": "x"}))


def test_extra_resource_prefixes_are_scoped_in(cel: Cel) -> None:
    rendered = render({"webhooks": {"resourcePrefixes": ["nvidia.com/", "amd.com/"]}})
    amd = copy.deepcopy(GPU_POD)
    amd["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": "1"}}
    webhook = _webhook(rendered, "MutatingWebhookConfiguration")
    assert _sent(cel, webhook, "CREATE", amd)
    assert not _sent(cel, _webhook(render({}), "MutatingWebhookConfiguration"), "CREATE", amd)


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_pods_that_name_resource_claims_reach_the_webhook_unless_turned_off(cel: Cel, kind: str) -> None:
    # A claim of the pod's own may ask for GPUs (docs/dra.md): without the webhook, no quota would count it.
    claiming = copy.deepcopy(PLAIN_POD)
    claiming["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "eight-h100"}]
    claiming["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    assert _sent(cel, _webhook(render({}), kind), "CREATE", claiming)
    without = copy.deepcopy(PLAIN_POD)
    without["spec"]["resourceClaims"] = []
    assert not _sent(cel, _webhook(render({}), kind), "CREATE", without)
    turned_off = render({"webhooks": {"resourceClaimPods": False}})
    assert not _sent(cel, _webhook(turned_off, kind), "CREATE", claiming)
    assert _sent(cel, _webhook(turned_off, kind), "CREATE", GPU_POD)


def test_rollout_selector_is_added_not_substituted() -> None:
    rendered = render({"webhooks": {"namespaceSelectorExpressions": [
        {"key": "kgwe.io/enabled", "operator": "In", "values": ["true"]}
    ]}})
    expressions = _webhook(rendered, "MutatingWebhookConfiguration")["namespaceSelector"]["matchExpressions"]
    assert expressions[0]["values"] == ["kube-system", NAMESPACE]
    assert expressions[1] == {"key": "kgwe.io/enabled", "operator": "In", "values": ["true"]}


def test_ca_bundle_is_left_to_its_owner(rendered_scenarios: dict[str, Rendered]) -> None:
    # Without cert-manager, `kgwe certs ensure` patches caBundle: a Helm upgrade must not blank it.
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        default = rendered_scenarios["default"].one(kind)
        assert "caBundle" not in _webhook(rendered_scenarios["default"], kind)["clientConfig"]
        assert "cert-manager.io/inject-ca-from" not in (default["metadata"].get("annotations") or {})
        managed = rendered_scenarios["cert-manager"].one(kind)
        assert managed["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/kgwe-webhook"


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_pods_that_ask_device_class_extended_resources_reach_the_webhook(cel: Cel, kind: str) -> None:
    # deviceclass.resource.kubernetes.io/<class> gets DRA devices without a claim (KEP-5004): GPUs too.
    implicit = copy.deepcopy(PLAIN_POD)
    limits = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "8"}
    implicit["spec"]["containers"][0]["resources"]["limits"] = limits
    assert _sent(cel, _webhook(render({}), kind), "CREATE", implicit)
    assert not _sent(cel, _webhook(render({"webhooks": {"resourceClaimPods": False}}), kind), "CREATE", implicit)


def test_resource_claims_users_create_reach_the_validating_webhook(cel: Cel) -> None:
    # A claim made again under the name a waiting pod names is judged (docs/dra.md); the claims Kubernetes
    # makes for pods are not sent, and nothing is sent with resourceClaimPods off.
    def claims_webhook(rendered: Rendered) -> list[dict[str, Any]]:
        configuration = rendered.one("ValidatingWebhookConfiguration", "kgwe")
        return [w for w in configuration["webhooks"] if w["name"] == "resourceclaims.validate.kgwe.io"]

    (webhook,) = claims_webhook(render({}))
    assert webhook["rules"] == [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE"],
                                 "resources": ["resourceclaims", "resourceclaimtemplates"],
                                 "scope": "Namespaced"}]
    assert webhook["clientConfig"]["service"]["path"] == "/validate"
    claim = {"metadata": {"name": "mine", "namespace": "team-a"}, "spec": {}}

    def sent(user: str, namespace: str = "team-a") -> bool:
        request = {"operation": "CREATE", "namespace": namespace, "userInfo": {"username": user}}
        return all(cel.check(c["expression"], object=claim, oldObject=None, request=request)
                   for c in webhook["matchConditions"])

    assert sent("alice@example.com")
    assert not sent("alice@example.com", namespace="kgwe-system")
    assert not sent("system:serviceaccount:kube-system:resource-claim-controller")
    assert not sent("system:kube-scheduler")
    assert not sent("system:serviceaccount:kgwe-system:kgwe-webhook")  # its templates hold what KGWE judged
    assert claims_webhook(render({"webhooks": {"resourceClaimPods": False}})) == []


def _debugged(pod: dict[str, Any], privileged: bool = True) -> dict[str, Any]:
    """`pod` after `kubectl debug --profile=sysadmin` (or general) added an ephemeral container."""
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [{
        "name": "debugger-x7k2p", "image": "busybox", "targetContainerName": pod["spec"]["containers"][0]["name"],
        "securityContext": {"privileged": privileged},
    }]
    return debugged


def _with_status(pod: dict[str, Any], **status: Any) -> dict[str, Any]:
    changed = copy.deepcopy(pod)
    changed["status"] = {**changed.get("status", {}), **status}
    return changed


@pytest.mark.parametrize("policies_on_update", [True, False])
def test_ephemeral_containers_and_status_updates_are_routed_and_nothing_more(
    cel: Cel, policies_on_update: bool
) -> None:
    """Issue 30 doors 2 and 3: both subresources reach /validate when they can matter, never otherwise."""
    rendered = render({"webhooks": {"validating": {"policiesOnUpdate": policies_on_update}}})
    validate = _webhook(rendered, "ValidatingWebhookConfiguration")
    mutate = _webhook(rendered, "MutatingWebhookConfiguration")
    running = _with_status(GPU_POD, phase="Running")
    # An ephemeral container added to a GPU or KGWE pod is judged; one added to an ordinary pod is not sent.
    assert _sent(cel, validate, "UPDATE", _debugged(running), old=running, sub_resource="ephemeralcontainers")
    assert _sent(cel, validate, "UPDATE", _debugged(INTENT_ONLY_POD, False), old=INTENT_ONLY_POD,
                 sub_resource="ephemeralcontainers")
    assert not _sent(cel, validate, "UPDATE", _debugged(PLAIN_POD), old=PLAIN_POD, sub_resource="ephemeralcontainers")
    assert not _sent(cel, mutate, "UPDATE", _debugged(running), old=running, sub_resource="ephemeralcontainers")
    # A status update that rewrites a kgwe.io/ key is judged, on a GPU pod or on any other.
    admitted = _with(running, annotations={"kgwe.io/tenant": "team-a", "kgwe.io/hourly-cost": "36"})
    cheaper = _with(admitted, annotations={"kgwe.io/hourly-cost": "0.01"})
    assert _sent(cel, validate, "UPDATE", cheaper, old=admitted, sub_resource="status")
    assert _sent(cel, validate, "UPDATE", _with(PLAIN_POD, annotations={"kgwe.io/tenant": "free"}), old=PLAIN_POD,
                 sub_resource="status")
    # The kubelet's status updates and KGWE's own condition never are: KGWE being down must not block them.
    ready = _with_status(admitted, conditions=[{"type": "Ready", "status": "True"}])
    assert not _sent(cel, validate, "UPDATE", ready, old=admitted, sub_resource="status")
    quota = _with_status(admitted, conditions=[{"type": "kgwe.io/QuotaAvailable", "status": "False"}])
    assert not _sent(cel, validate, "UPDATE", quota, old=admitted, sub_resource="status")
    assert not _sent(cel, validate, "UPDATE", _with_status(PLAIN_POD, phase="Running"), old=PLAIN_POD,
                     sub_resource="status")
    # Other subresources (binding, eviction, resize, exec) are never sent.
    for other in ("binding", "eviction", "resize", "exec"):
        assert not _sent(cel, validate, "UPDATE", cheaper, old=admitted, sub_resource=other)
        assert not _sent(cel, validate, "CREATE", cheaper, sub_resource=other)
