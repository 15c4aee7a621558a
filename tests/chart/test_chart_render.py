"""The chart renders, lints and produces objects the Kubernetes API would accept."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from chart_support import CHART, NAMESPACE, SCENARIOS, Rendered, crds, render

from webhook.config import parse_config

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas available.
KUBERNETES_VERSIONS = ["1.30", kubernetes_validate.latest_version()]

# Kinds from operators the chart integrates with; their schemas are not part of Kubernetes.
EXTERNAL_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_lint_is_clean(scenario: str) -> None:
    report = helm.lint(CHART, SCENARIOS[scenario], strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_chart_lints_for_its_oldest_kubernetes() -> None:
    with helm.Chart.load(CHART) as chart:
        assert chart.metadata["kubeVersion"] == ">=1.30.0-0"
    report = helm.lint(CHART, strict=True, kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_is_valid_kubernetes(rendered_scenarios: dict[str, Rendered], version: str) -> None:
    # Most objects are the same in every scenario: each distinct one is validated once.
    distinct: dict[str, tuple[str, dict[str, Any]]] = {}
    for scenario, rendered in rendered_scenarios.items():
        for obj in rendered.objects:
            if (obj["apiVersion"], obj["kind"]) not in EXTERNAL_KINDS:
                distinct.setdefault(json.dumps(obj, sort_keys=True), (scenario, obj))
    assert len(distinct) > 30
    for scenario, obj in distinct.values():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{scenario}: {obj['kind']} {obj['metadata']['name']}: {exc.message}")


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_crds_are_valid_kubernetes(version: str) -> None:
    for crd in crds():
        kubernetes_validate.validate(crd, version, strict=True)


def test_only_known_external_kinds_are_rendered(rendered_scenarios: dict[str, Rendered]) -> None:
    for rendered in rendered_scenarios.values():
        for obj in rendered.objects:
            group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
            if group.endswith((".coreos.com", "cert-manager.io")):
                assert (obj["apiVersion"], obj["kind"]) in EXTERNAL_KINDS


def test_namespaced_objects_land_in_the_release_namespace() -> None:
    rendered = render({"metrics": {"serviceMonitor": {"enabled": True}}}, namespace="gpu-admission")
    cluster_scoped = {
        "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    }
    for obj in rendered.objects:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "gpu-admission", obj["kind"]


def test_schema_refuses_values_that_would_break_the_webhook() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema({})
        for bad in (
            {"webhooks": {"mutating": {"failurePolicy": "Sometimes"}}},
            {"webhooks": {"validating": {"timeoutSeconds": 31}}},
            {"webhook": {"replicas": 0}},
            {"config": {"mode": "shadow"}},
            {"webhooks": {"resourcePrefixes": ["nvidia.com"]}},
            {"replicas": 3},
        ):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


def test_kgwe_answers_before_the_api_server_gives_up(default: Rendered) -> None:
    deadline = parse_config(default.one("ConfigMap")["data"]["config.yaml"]).limits.deadline_seconds
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert deadline < default.one(kind)["webhooks"][0]["timeoutSeconds"]


def _config(rendered: Rendered) -> Any:
    text = rendered.one("ConfigMap", "kgwe-config")["data"]["config.yaml"]
    return parse_config(text, "rendered ConfigMap")


def test_configmap_is_a_valid_kgwe_configuration(rendered_scenarios: dict[str, Rendered]) -> None:
    for rendered in rendered_scenarios.values():
        _config(rendered)


def test_configmap_carries_the_mode_and_chart_additions(rendered_scenarios: dict[str, Rendered]) -> None:
    assert _config(rendered_scenarios["default"]).mode == "enforce"
    audit = _config(rendered_scenarios["audit-mode"])
    assert audit.mode == "audit"
    # The user's other settings survive the mode switch.
    assert audit.limits.deadline_seconds == 1.5
    assert audit.excluded_namespaces == ["kube-system", NAMESPACE]
    assert audit.controller_users == [f"system:serviceaccount:{NAMESPACE}:kgwe-webhook"]


def test_user_configuration_is_kept_verbatim() -> None:
    config = _config(render({"config": {
        "pricing": {"currency": "EUR", "perGPUHour": {"nvidia-h100-80gb": 4.5}},
        "rbac": {"acceleratorTypes": True},
        "excludedNamespaces": ["batch-system"],
        "controllerUsers": ["system:serviceaccount:ops:reconciler"],
    }}))
    assert config.pricing.currency == "EUR"
    assert str(config.price_per_gpu_hour("nvidia-h100-80gb")) == "4.5"
    assert config.rbac.accelerator_types is True
    assert config.excluded_namespaces == ["batch-system", NAMESPACE]
    assert config.controller_users == [
        "system:serviceaccount:ops:reconciler", f"system:serviceaccount:{NAMESPACE}:kgwe-webhook"
    ]


def test_config_change_rolls_the_webhook_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = render(values).one("Deployment")
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) != checksum({"config": {"mode": "audit"}})


def test_notes_tell_how_to_switch_kgwe_off(rendered_scenarios: dict[str, Rendered]) -> None:
    notes = rendered_scenarios["default"].notes
    assert "kubectl delete mutatingwebhookconfiguration kgwe" in notes
    assert "kubectl delete validatingwebhookconfiguration kgwe" in notes
    assert "cert-manager Certificate kgwe-webhook" in rendered_scenarios["cert-manager"].notes
    assert "/ui/" not in rendered_scenarios["ui-off"].notes
