"""The chart's workload webhooks, rendered by the real Helm engine, their CEL run by cel-python."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import chart_support as chart  # tests/chart, on pytest's pythonpath
import pytest
from workload_support import WORKLOADS, load

from webhook.workload_kinds import BUILTIN_KINDS


@pytest.fixture(scope="module")
def rendered() -> Any:
    return chart.render({})


def workload_webhooks(rendered: Any, kind: str) -> dict[str, dict[str, Any]]:
    configuration = rendered.one(kind, "kgwe")
    # Not the pod webhook (`validate.kgwe.io`), nor the ResourceClaim one (tests/chart/test_chart_scoping.py).
    return {w["rules"][0]["resources"][0]: w for w in configuration["webhooks"]
            if w["name"].count(".") == 3 and w["name"] != "resourceclaims.validate.kgwe.io"}


def sent(webhook: dict[str, Any], obj: dict[str, Any], namespace: str = "team-a") -> bool:
    cel = chart.Cel()
    request = {"operation": "CREATE", "namespace": namespace, "name": obj["metadata"]["name"]}
    conditions = webhook["matchConditions"]
    return all(cel.check(c["expression"], object=obj, oldObject=None, request=request) for c in conditions)


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_every_builtin_kind_has_a_webhook_on_create_and_update(rendered: Any, kind: str) -> None:
    webhooks = workload_webhooks(rendered, kind)
    assert set(webhooks) == {k.resource for k in BUILTIN_KINDS}
    for spec in BUILTIN_KINDS:
        webhook = webhooks[spec.resource]
        rule = webhook["rules"][0]
        assert rule["apiGroups"] == [spec.group] and rule["apiVersions"] == list(spec.versions)
        assert rule["operations"] == ["CREATE", "UPDATE"]
        assert webhook["clientConfig"]["service"]["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
        assert "kube-system" in webhook["namespaceSelector"]["matchExpressions"][0]["values"]
    if kind.startswith("Mutating"):
        assert {w["reinvocationPolicy"] for w in webhooks.values()} == {"IfNeeded"}


def test_gpu_and_kgwe_templates_are_sent_and_others_are_not(rendered: Any) -> None:
    webhooks = workload_webhooks(rendered, "ValidatingWebhookConfiguration")
    resource = {k.kind: k.resource for k in BUILTIN_KINDS}
    for path in WORKLOADS:
        workload = load(path)
        webhook = webhooks[resource[workload["kind"]]]
        assert sent(webhook, workload), path.name
        assert not sent(webhook, workload, namespace=chart.NAMESPACE)
        plain = _strip_gpus(copy.deepcopy(workload))
        assert not sent(webhook, plain), path.name


def test_partial_objects_never_make_the_conditions_fail(rendered: Any) -> None:
    # A matchCondition error applies failurePolicy (Fail for validation): every optional field is guarded.
    webhooks = workload_webhooks(rendered, "ValidatingWebhookConfiguration")
    minimal = {
        "jobsets": {"spec": {}},
        "leaderworkersets": {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}}}}},
        "rayjobs": {"spec": {"entrypoint": "python x.py"}},
        "rayclusters": {"spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}}}},
        "pytorchjobs": {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"metadata": {}, "spec": {}}}}}},
    }
    for resource, body in minimal.items():
        assert not sent(webhooks[resource], {"metadata": {"name": "x"}, **body}), resource


def _strip_gpus(value: Any) -> Any:
    """The same workload with no GPU resources and no kgwe.io/ keys anywhere."""
    if isinstance(value, dict):
        return {k: _strip_gpus(v) for k, v in value.items() if not (isinstance(k, str) and (
            k.startswith("kgwe.io/") or k.startswith("nvidia.com/")))}
    if isinstance(value, list):
        return [_strip_gpus(v) for v in value]
    return value


def test_the_identity_key_secret_is_kept_and_mounted(rendered: Any) -> None:
    secret = rendered.one("Secret", "kgwe-identity")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert len(secret["data"]["key"]) >= 64
    deployment = rendered.one("Deployment", "kgwe-webhook")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["identity"]["secret"] == {"secretName": "kgwe-identity", "defaultMode": 0o400}
    config = rendered.one("ConfigMap")["data"]["config.yaml"]
    assert "identityKeyFile: /etc/kgwe/identity/key" in config


def test_chart_path_is_real() -> None:
    assert Path(chart.CHART).is_dir()


def test_the_webhook_may_list_and_watch_every_workload_kind(rendered: Any) -> None:
    """The model watches the workload kinds (webhook/cluster/workloads.py): the chart grants read access."""
    role = next(r for r in rendered.of_kind("ClusterRole") if r["metadata"]["name"].endswith("-workloads"))
    granted = {(rule["apiGroups"][0], rule["resources"][0]): rule["verbs"] for rule in role["rules"]}
    assert set(granted) == {(k.group, k.resource) for k in BUILTIN_KINDS}
    assert all(verbs == ["get", "list", "watch"] for verbs in granted.values())
    binding = next(b for b in rendered.of_kind("ClusterRoleBinding") if b["metadata"]["name"].endswith("-workloads"))
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    off = chart.render({"webhooks": {"workloads": {"enabled": False}}})
    assert not [r for r in off.of_kind("ClusterRole") if r["metadata"]["name"].endswith("-workloads")]


def test_templates_that_name_resource_claims_are_sent_unless_turned_off(rendered: Any) -> None:
    # A template's claims of its own may ask for GPUs (docs/dra.md): its pods are made by a controller, and
    # only workload admission signs kgwe.io/requested-by, which makes them its author's, not the controller's.
    resource = {k.kind: k.resource for k in BUILTIN_KINDS}
    plain = _strip_gpus(load(next(p for p in WORKLOADS if load(p)["kind"] == "Deployment")))
    claiming = copy.deepcopy(plain)
    claiming["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "eight"}]
    empty = copy.deepcopy(plain)
    empty["spec"]["template"]["spec"]["resourceClaims"] = []
    turned_off = chart.render({"webhooks": {"resourceClaimPods": False}})
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = workload_webhooks(rendered, kind)[resource["Deployment"]]
        assert sent(webhook, claiming) and not sent(webhook, empty) and not sent(webhook, plain)
        assert not sent(workload_webhooks(turned_off, kind)[resource["Deployment"]], claiming)
