"""The webhook Deployment, the agent DaemonSet and the certificate jobs, as the contract with the code says."""

from __future__ import annotations

from typing import Any

from chart_support import NAMESPACE, Rendered, render

SERVE_ARGS = [
    "serve", "--config", "/etc/kgwe/config.yaml", "--tls-cert-file", "/etc/kgwe/tls/tls.crt",
    "--tls-private-key-file", "/etc/kgwe/tls/tls.key", "--port", "8443",
]


def _container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    assert len(pod_spec["containers"]) == 1
    return dict(pod_spec["containers"][0])


def _assert_hardened(pod_spec: dict[str, Any]) -> None:
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] != 0
    container = _container(pod_spec)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    }


def test_webhook_is_highly_available(default: Rendered) -> None:
    deployment = default.one("Deployment", "kgwe-webhook")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["priorityClassName"] == "system-cluster-critical"
    by_node = next(c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname")
    assert by_node["whenUnsatisfiable"] == "DoNotSchedule"
    assert by_node["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    pdb = default.one("PodDisruptionBudget", "kgwe-webhook")
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    service = default.one("Service", "kgwe-webhook")
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]


def test_webhook_resources_have_no_cpu_limit(default: Rendered) -> None:
    resources = _container(default.one("Deployment")["spec"]["template"]["spec"])["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "cpu" not in resources.get("limits", {})


def test_webhook_readiness_is_gated_on_readyz_over_tls(default: Rendered) -> None:
    container = _container(default.one("Deployment")["spec"]["template"]["spec"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]


def test_serve_command_is_the_contract(rendered_scenarios: dict[str, Rendered]) -> None:
    container = _container(rendered_scenarios["default"].one("Deployment")["spec"]["template"]["spec"])
    assert container["command"] == ["kgwe"]
    assert container["args"] == SERVE_ARGS
    no_ui = _container(rendered_scenarios["ui-off"].one("Deployment")["spec"]["template"]["spec"])
    assert no_ui["args"] == [*SERVE_ARGS, "--no-ui"]


def test_webhook_pod_is_hardened_and_never_sees_the_ca_key(default: Rendered) -> None:
    pod = default.one("Deployment")["spec"]["template"]["spec"]
    _assert_hardened(pod)
    assert pod["serviceAccountName"] == "kgwe-webhook"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    tls = volumes["tls"]["secret"]
    assert tls["secretName"] == "kgwe-tls"
    assert {item["key"] for item in tls["items"]} == {"tls.crt", "tls.key", "ca.crt"}
    mounts = {mount["name"]: mount for mount in _container(pod)["volumeMounts"]}
    # subPath mounts are never refreshed by kubelet: the certificates must be mounted as a directory.
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/kgwe/tls", "readOnly": True}
    assert mounts["config"]["mountPath"] == "/etc/kgwe/config.yaml"
    assert volumes["config"]["configMap"]["name"] == "kgwe-config"


def test_agent_runs_on_gpu_nodes_only(default: Rendered) -> None:
    daemonset = default.one("DaemonSet", "kgwe-agent")
    pod = daemonset["spec"]["template"]["spec"]
    _assert_hardened(pod)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["serviceAccountName"] == "kgwe-agent"
    container = _container(pod)
    assert container["command"] == ["kgwe"]
    assert container["args"] == ["agent", "--node-name", "$(NODE_NAME)", "--metrics-port=0"]
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    # Reading NVML must not take a GPU away from workloads.
    assert not any(key.startswith("nvidia.com/") for key in container["resources"].get("limits", {}))


def test_agent_can_ask_for_gpus_by_volume_mount(rendered_scenarios: dict[str, Rendered]) -> None:
    pod = rendered_scenarios["agent-volume-mount-devices"].one("DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in _container(pod)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["all-gpus"]["mountPath"] == "/var/run/nvidia-container-devices/all"
    assert volumes["all-gpus"]["hostPath"]["path"] == "/dev/null"
    default_pod = rendered_scenarios["default"].one("DaemonSet")["spec"]["template"]["spec"]
    assert not any("hostPath" in volume for volume in default_pod["volumes"])


def test_agent_selector_and_runtime_are_configurable() -> None:
    # Helm merges maps: a default key is removed by setting it to null.
    selector = {"nvidia.com/gpu.present": None, "kgwe.io/gpu": "yes"}
    rendered = render({"agent": {"nodeSelector": selector, "runtimeClassName": ""}})
    pod = rendered.one("DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kgwe.io/gpu": "yes"}
    assert "runtimeClassName" not in pod


def test_agent_off_removes_everything_of_the_agent(rendered_scenarios: dict[str, Rendered]) -> None:
    rendered = rendered_scenarios["agent-off"]
    assert rendered.of_kind("DaemonSet") == []
    policies = rendered.names("ValidatingAdmissionPolicy")
    assert not any(name.startswith("kgwe-agent") for name in policies)
    assert not any("agent" in obj["metadata"]["name"] for obj in rendered.objects)
    assert rendered.one("Deployment", "kgwe-webhook")


def _certs_args(pod_spec: dict[str, Any]) -> list[str]:
    container = _container(pod_spec)
    assert container["command"] == ["kgwe"]
    return list(container["args"])


def test_certificates_are_ensured_by_hooks_and_renewed_daily(default: Rendered) -> None:
    expected = [
        "certs", "ensure", "--namespace", NAMESPACE, "--service", "kgwe-webhook", "--secret", "kgwe-tls",
        "--ca-secret", "kgwe-ca", "--mutating-config", "kgwe", "--validating-config", "kgwe",
        "--ca-validity-days", "3650", "--cert-validity-days", "90", "--renew-before-days", "30",
    ]
    pre = default.one("Job", "kgwe-certs-hook-pre")
    post = default.one("Job", "kgwe-certs-hook-post")
    # pre-*: the Secret exists before the pods that mount it; post-*: caBundle once the configurations exist.
    assert pre["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert post["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    for job in (pre, post):
        assert _certs_args(job["spec"]["template"]["spec"]) == expected
        _assert_hardened(job["spec"]["template"]["spec"])
    # The hook's RBAC comes first (lower weight), in both phases, and goes away after each.
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        annotations = default.one(kind, "kgwe-certs-hook")["metadata"]["annotations"]
        assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade", "post-install",
                                                               "post-upgrade"}
        assert int(annotations["helm.sh/hook-weight"]) < int(pre["metadata"]["annotations"]["helm.sh/hook-weight"])
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    cronjob = default.one("CronJob", "kgwe-certs")
    assert cronjob["spec"]["schedule"] == "17 3 * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert _certs_args(pod) == expected
    assert pod["serviceAccountName"] == "kgwe-certs"
    assert "helm.sh/hook" not in (default.one("ServiceAccount", "kgwe-certs")["metadata"].get("annotations") or {})


def test_cert_manager_replaces_the_certs_jobs(rendered_scenarios: dict[str, Rendered]) -> None:
    rendered = rendered_scenarios["cert-manager"]
    assert rendered.of_kind("Job") == [] and rendered.of_kind("CronJob") == []
    serving = rendered.one("Certificate", "kgwe-webhook")["spec"]
    assert serving["secretName"] == "kgwe-tls"
    assert f"kgwe-webhook.{NAMESPACE}.svc" in serving["dnsNames"]
    assert serving["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "kgwe-ca"}
    ca = rendered.one("Certificate", "kgwe-ca")["spec"]
    assert ca["isCA"] is True
    # A long-lived CA and a short-lived leaf: renewing the leaf never changes the caBundle.
    assert int(ca["duration"].rstrip("h")) > 10 * int(serving["duration"].rstrip("h"))
    assert rendered.one("Issuer", "kgwe-ca")["spec"]["ca"]["secretName"] == ca["secretName"]
    external = rendered_scenarios["cert-manager-external-issuer"]
    assert external.of_kind("Issuer") == []
    assert external.one("Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_image_digest_pins_every_workload() -> None:
    digest = "sha256:" + "a" * 64
    rendered = render({"image": {"digest": digest}})
    images = [
        container["image"]
        for obj in rendered.objects
        for container in _pod_specs(obj)
    ]
    assert images and all(image == f"ghcr.io/kgwe/kgwe@{digest}" for image in images)


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    kind = obj["kind"]
    if kind in ("Deployment", "DaemonSet", "Job"):
        return list(obj["spec"]["template"]["spec"]["containers"])
    if kind == "CronJob":
        return list(obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"])
    return []
