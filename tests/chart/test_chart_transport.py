"""Transport and privileges in the chart, rendered with the real Helm engine: the NetworkPolicy, caller
authentication wiring, key file modes, the CA key kept out of the webhook's reach, and the webhook's
pod-scope ValidatingAdmissionPolicy (evaluated with cel-python)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from chart_support import NAMESPACE, Cel, Rendered, render
from test_chart_rbac import NODE, _agent_request, _allows, _policy_verdict

from webhook.config import parse_config

WEBHOOK_USER = f"system:serviceaccount:{NAMESPACE}:kgwe-webhook"
POD_POLICY = "kgwe-webhook-pod-scope"


def _webhook_pod(rendered: Rendered) -> dict[str, Any]:
    return dict(rendered.one("Deployment", "kgwe-webhook")["spec"]["template"]["spec"])


def _volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod["volumes"] if v["name"] == name)


# -- NetworkPolicy --------------------------------------------------------------------------------

def test_network_policy_admits_the_webhook_port_only(default: Rendered) -> None:
    policy = default.one("NetworkPolicy", "kgwe-webhook")["spec"]
    labels = default.one("Deployment", "kgwe-webhook")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    container = _webhook_pod(default)["containers"][0]
    assert [p["name"] for p in container["ports"]] == ["https"]
    # The default must not break a cluster: every address may reach the port (the API server's source
    # cannot be guessed); the monitoring namespace is a named peer for when the addresses are narrowed.
    assert {"ipBlock": {"cidr": "0.0.0.0/0"}} in rule["from"] and {"ipBlock": {"cidr": "::/0"}} in rule["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in rule["from"]


def test_network_policy_peers_are_configurable() -> None:
    control_plane = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    rendered = render({"networkPolicy": {"apiServerPeers": control_plane,
                                         "extraPeers": [{"podSelector": {"matchLabels": {"app": "ui-proxy"}}}]}})
    (rule,) = rendered.one("NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/24"}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        {"podSelector": {"matchLabels": {"app": "ui-proxy"}}},
    ]
    assert render({"networkPolicy": {"enabled": False}}).of_kind("NetworkPolicy") == []


def test_network_policy_without_peers_is_refused_not_opened() -> None:
    with pytest.raises(Exception, match="at least one peer"):
        render({"networkPolicy": {"apiServerPeers": [], "monitoringNamespaceSelector": None}})


# -- keys and Secrets -----------------------------------------------------------------------------

def test_key_mounts_are_not_world_readable(rendered_scenarios: dict[str, Rendered]) -> None:
    for rendered in rendered_scenarios.values():
        assert _volume(_webhook_pod(rendered), "tls")["secret"]["defaultMode"] == 0o440
    pod = _webhook_pod(render({"authentication": {"enabled": True}}))
    assert _volume(pod, "client-ca")["secret"]["defaultMode"] == 0o440


def test_webhook_never_sees_the_ca_key(rendered_scenarios: dict[str, Rendered]) -> None:
    for name, rendered in rendered_scenarios.items():
        tls = _volume(_webhook_pod(rendered), "tls")["secret"]
        assert {item["key"] for item in tls["items"]} == {"tls.crt", "tls.key", "ca.crt"}, name
        for secret in (tls["secretName"], "kgwe-ca", "kgwe-tls"):
            for verb in ("get", "list", "watch"):
                assert not _allows(rendered, "kgwe-webhook", verb, "", "secrets", secret, NAMESPACE), (name, verb)


def test_certs_runners_keep_the_ca_in_its_own_secret(default: Rendered) -> None:
    for kind, name in (("Job", "kgwe-certs-hook-pre"), ("CronJob", "kgwe-certs")):
        obj = default.one(kind, name)
        spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
        args = spec["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--ca-secret") + 1] == "kgwe-ca"
        assert args[args.index("--secret") + 1] == "kgwe-tls"


# -- caller authentication ------------------------------------------------------------------------

def test_authentication_is_off_by_default_and_wired_when_enabled(default: Rendered) -> None:
    config = parse_config(default.one("ConfigMap", "kgwe-config")["data"]["config.yaml"])
    assert config.authentication.effective_mode == "off"
    assert "client-ca" not in {v["name"] for v in _webhook_pod(default)["volumes"]}

    rendered = render({"authentication": {"enabled": True, "mode": "permissive", "clientCASecret": "apiserver-ca",
                                          "allowedNames": ["kube-apiserver-kgwe"]}})
    config = parse_config(rendered.one("ConfigMap", "kgwe-config")["data"]["config.yaml"])
    assert config.authentication.effective_mode == "permissive"
    assert config.authentication.allowed_names == ["kube-apiserver-kgwe"]
    pod = _webhook_pod(rendered)
    volume = _volume(pod, "client-ca")["secret"]
    assert volume["secretName"] == "apiserver-ca" and volume["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "client-ca")
    assert config.authentication.client_ca_file == f"{mount['mountPath']}/ca.crt"


def test_schema_refuses_an_empty_allowed_names_list() -> None:
    with pytest.raises(Exception, match="allowedNames"):
        render({"authentication": {"enabled": True, "allowedNames": []}})


# -- the webhook's pod-scope policy ---------------------------------------------------------------

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "trainer", "namespace": "team-a",
        "labels": {"app": "trainer", "kgwe.io/gang": "g1"},
        "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb", "team": "a"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"}],
    },
    "spec": {
        "schedulingGates": [{"name": "kgwe.io/gang"}, {"name": "example.com/quota"}],
        "containers": [{"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    },
}


def _webhook_request(user: str = WEBHOOK_USER, sub_resource: str = "") -> dict[str, Any]:
    return {"operation": "UPDATE", "name": "trainer", "subResource": sub_resource,
            "userInfo": {"username": user, "extra": {}}}


def _pod_verdict(cel: Cel, rendered: Rendered, new: dict[str, Any], request: dict[str, Any] | None = None) -> str:
    return _policy_verdict(cel, rendered, request or _webhook_request(), new, POD, POD_POLICY)


def _edited(**changes: Any) -> dict[str, Any]:
    pod = copy.deepcopy(POD)
    for path, value in changes.items():
        section, key = path.split("__")
        if value is None:
            pod[section].pop(key, None)
        else:
            pod[section][key] = value
    return pod


def test_webhook_may_write_kgwe_keys_and_lift_its_own_gate(default: Rendered, cel: Cel) -> None:
    written = copy.deepcopy(POD)
    written["metadata"]["annotations"]["kgwe.io/hourly-cost"] = "3.20"
    written["metadata"]["labels"]["kgwe.io/tenant"] = "team-a"
    assert _pod_verdict(cel, default, written) == "allowed"
    ungated = copy.deepcopy(POD)
    ungated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    assert _pod_verdict(cel, default, ungated) == "allowed"


@pytest.mark.parametrize(("change", "message"), [
    ({"metadata__labels": {"app": "other", "kgwe.io/gang": "g1"}}, "kgwe.io/ labels"),
    ({"metadata__annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb"}}, "kgwe.io/ annotations"),
    ({"metadata__finalizers": ["example.com/hold"]}, "finalizers or ownerReferences"),
    ({"metadata__ownerReferences": None}, "finalizers or ownerReferences"),
    ({"spec__schedulingGates": [{"name": "kgwe.io/gang"}]}, "its own kgwe.io/ scheduling gates"),
    ({"spec__schedulingGates": [{"name": "kgwe.io/gang"}, {"name": "example.com/quota"}, {"name": "kgwe.io/x"}]},
     "its own kgwe.io/ scheduling gates"),
    ({"spec__containers": [{"name": "main", "image": "evil:1"}]}, "containers, tolerations"),
    ({"spec__tolerations": [{"operator": "Exists"}]}, "containers, tolerations"),
    ({"spec__nodeSelector": {"kubernetes.io/os": "linux"}}, "a gang's room or a pod's accelerator type"),
    ({"spec__affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}},
     "accelerator type to the required node affinity"),
    ({"spec__affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}]}}},
     "accelerator type to the required node affinity"),
    ({"spec__activeDeadlineSeconds": 1}, "containers, tolerations"),
])
def test_webhook_may_change_nothing_else_on_a_pod(default: Rendered, cel: Cel, change: dict[str, Any],
                                                  message: str) -> None:
    assert message in _pod_verdict(cel, default, _edited(**change))


def test_webhook_may_pin_a_gated_gang_member_to_its_room(default: Rendered, cel: Cel) -> None:
    pinned = _edited(spec__nodeSelector={"kgwe.io/nvlink-clique": "nvl72-a"})
    assert _pod_verdict(cel, default, pinned) == "allowed"
    # Not once the gate is gone, and never another key.
    ungated = copy.deepcopy(POD)
    ungated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    pinned_late = copy.deepcopy(ungated)
    pinned_late["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    verdict = _policy_verdict(cel, default, _webhook_request(), pinned_late, ungated, POD_POLICY)
    assert "a gang's room" in verdict


def test_webhook_may_pin_a_gated_pod_to_its_accelerator_type(default: Rendered, cel: Cel) -> None:
    by_selector = _edited(spec__nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert _pod_verdict(cel, default, by_selector) == "allowed"
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]}]}
    before = _edited(spec__affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}})
    pinned = copy.deepcopy(before)
    pinned["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"].append(
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]})
    assert _policy_verdict(cel, default, _webhook_request(), pinned, before, POD_POLICY) == "allowed"
    # Never a key that is no type's (a stolen token moving a pod to a node of its choice).
    moved = copy.deepcopy(before)
    moved["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"].append({"key": "evil", "operator": "Exists"})
    assert "accelerator type" in _policy_verdict(cel, default, _webhook_request(), moved, before, POD_POLICY)


def test_pod_policy_refuses_subresources_and_leaves_others_alone(default: Rendered, cel: Cel) -> None:
    assert "subresources" in _pod_verdict(cel, default, POD, _webhook_request(sub_resource="status"))
    relabelled = _edited(metadata__labels={"app": "other"})
    assert _pod_verdict(cel, default, relabelled, _webhook_request(user="alice")) == "skipped"
    binding = default.one("ValidatingAdmissionPolicyBinding", POD_POLICY)
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert default.one("ValidatingAdmissionPolicy", POD_POLICY)["spec"]["failurePolicy"] == "Fail"
    assert render({"webhook": {"podScopePolicy": {"enabled": False}}}).names("ValidatingAdmissionPolicy") == {
        "kgwe-agent-node-scope", "kgwe-webhook-claim-template-scope", "kgwe-pod-guarantees", "kgwe-pod-quota-gate"
    }


# -- the agent's node-scope policy, the parts issue 13 found missing ------------------------------

@pytest.mark.parametrize(("field", "value", "message"), [
    ("finalizers", ["example.com/keep"], "finalizers"),
    ("ownerReferences", [{"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"}], "ownerReferences"),
])
def test_agent_may_not_change_finalizers_or_owners(default: Rendered, cel: Cel, field: str, value: Any,
                                                   message: str) -> None:
    tampered = copy.deepcopy(NODE)
    tampered["metadata"][field] = value
    verdict = _policy_verdict(cel, default, _agent_request("gpu-node-1", "gpu-node-1"), tampered, NODE)
    assert verdict == f"the KGWE agent may not change a node's {message}"


def test_chart_can_carry_the_client_ca_secret(tmp_path: Any) -> None:
    import base64

    from certs.client import CLIENT_CA_CERT, ClientSettings, ensure_client_files

    ensure_client_files(tmp_path, ClientSettings())
    pem = (tmp_path / CLIENT_CA_CERT).read_text()
    rendered = render({"authentication": {"enabled": True, "clientCACert": pem}})
    secret = rendered.one("Secret", "kgwe-apiserver-client-ca")
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["data"] == {"ca.crt": base64.b64encode(pem.encode()).decode()}
    assert _volume(_webhook_pod(rendered), "client-ca")["secret"]["secretName"] == "kgwe-apiserver-client-ca"
    assert [s for s in render({"authentication": {"enabled": True}}).of_kind("Secret")
            if s["metadata"]["name"] != "kgwe-identity"] == []
    with pytest.raises(Exception, match="PEM certificate"):
        render({"authentication": {"enabled": True, "clientCACert": "not a certificate"}})


def test_notes_say_when_callers_are_not_authenticated(default: Rendered) -> None:
    assert "WARNING: caller authentication is OFF" in default.notes
    notes = render({"authentication": {"enabled": True}}).notes
    assert "OFF" not in notes and "kgwe-apiserver-client" in notes
