"""The chart's certificate hooks, run in order with their rendered arguments against a small API server.

`kgwe certs` (the real CLI and Kubernetes client) talks HTTP to a stand-in for the API server on
127.0.0.1 that stores Secrets and webhook configurations, as Helm's install sequence would meet them:
pre-install hook -> release objects -> post-install hook -> daily CronJob.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import NAMESPACE, Rendered
from cryptography import x509

from certs.commands import run as certs_cli

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"


class FakeApiServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[str] = []
        self.lock = threading.Lock()

    def put_object(self, collection: str, obj: dict[str, Any]) -> None:
        with self.lock:
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = "1"
            self.objects[f"{collection}/{obj['metadata']['name']}"] = obj


class _Handler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def _body(self) -> dict[str, Any]:
        return dict(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    def do_GET(self) -> None:
        with self.server.lock:
            found = self.server.objects.get(self.path.split("?")[0])
        self._reply(200, found) if found else self._not_found()

    def do_POST(self) -> None:
        body = self._body()
        path = f"{self.path.split('?')[0]}/{body['metadata']['name']}"
        with self.server.lock:
            body["metadata"]["resourceVersion"] = "1"
            self.server.objects[path] = body
            self.server.writes.append(f"create {path}")
        self._reply(201, body)

    def do_PUT(self) -> None:
        body = self._body()
        path = self.path.split("?")[0]
        with self.server.lock:
            current = self.server.objects.get(path)
            if current is None:
                self._not_found()
                return
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                self._reply(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409})
                return
            body["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            self.server.objects[path] = body
            self.server.writes.append(f"replace {path}")
        self._reply(200, body)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "hook", "user": {"token": "not-checked"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "hook"}}],
    }))
    try:
        yield server, kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def _args(rendered: Rendered, kind: str, name: str) -> list[str]:
    obj = rendered.one(kind, name)
    spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    assert container["command"] == ["kgwe"] and container["args"][0] == "certs"
    return list(container["args"][1:])


def _secret(server: FakeApiServer, name: str = "kgwe-tls") -> dict[str, bytes]:
    data = server.objects[f"{SECRETS}/{name}"]["data"]
    return {key: base64.b64decode(value) for key, value in data.items()}


def _ca_bundles(server: FakeApiServer) -> list[bytes]:
    """The distinct caBundles of every webhook in both configurations (pod and workload webhooks alike)."""
    bundles: list[bytes] = []
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for webhook in server.objects[f"{ADMISSION}/{plural}/kgwe"]["webhooks"]:
            bundle = base64.b64decode(webhook["clientConfig"].get("caBundle", ""))
            if bundle not in bundles:
                bundles.append(bundle)
    return bundles


def test_install_then_daily_renewal(default: Rendered, api: tuple[FakeApiServer, Path]) -> None:
    server, kubeconfig = api
    flags = ["--kubeconfig", str(kubeconfig)]

    # pre-install: no webhook configurations yet. The Secret the pods mount is created.
    assert certs_cli([*_args(default, "Job", "kgwe-certs-hook-pre"), *flags]) == 0
    secret = _secret(server)
    # The Secret the webhook pods mount holds no CA key; the CA's own Secret does.
    assert secret.keys() == {"ca.crt", "tls.crt", "tls.key"}
    authority = _secret(server, "kgwe-ca")
    assert authority.keys() == {"ca.crt", "ca.key"} and authority["ca.crt"] == secret["ca.crt"]
    leaf = x509.load_pem_x509_certificate(secret["tls.crt"])
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"kgwe-webhook.{NAMESPACE}.svc" in names

    # Helm applies the release: the configurations arrive without a caBundle.
    server.put_object(f"{ADMISSION}/mutatingwebhookconfigurations", default.one("MutatingWebhookConfiguration"))
    server.put_object(f"{ADMISSION}/validatingwebhookconfigurations", default.one("ValidatingWebhookConfiguration"))
    assert _ca_bundles(server) == [b""]

    # post-install: both configurations trust the CA that signed the served certificate.
    assert certs_cli([*_args(default, "Job", "kgwe-certs-hook-post"), *flags]) == 0
    assert _ca_bundles(server) == [secret["ca.crt"]]
    ca = x509.load_pem_x509_certificate(secret["ca.crt"])
    leaf.verify_directly_issued_by(ca)

    # The daily CronJob with nothing to renew writes nothing.
    writes = list(server.writes)
    assert certs_cli([*_args(default, "CronJob", "kgwe-certs"), *flags]) == 0
    assert server.writes == writes
    assert _secret(server) == secret


def test_upgrade_repairs_configurations_recreated_after_a_switch_off(
    default: Rendered, api: tuple[FakeApiServer, Path]
) -> None:
    server, kubeconfig = api
    flags = ["--kubeconfig", str(kubeconfig)]
    assert certs_cli([*_args(default, "Job", "kgwe-certs-hook-pre"), *flags]) == 0
    # The emergency switch-off deleted them; `helm upgrade` re-creates them without a caBundle.
    assert certs_cli([*_args(default, "Job", "kgwe-certs-hook-pre"), *flags]) == 0
    server.put_object(f"{ADMISSION}/mutatingwebhookconfigurations", default.one("MutatingWebhookConfiguration"))
    server.put_object(f"{ADMISSION}/validatingwebhookconfigurations", default.one("ValidatingWebhookConfiguration"))
    assert certs_cli([*_args(default, "Job", "kgwe-certs-hook-post"), *flags]) == 0
    assert _ca_bundles(server) == [_secret(server)["ca.crt"]]


def test_single_secret_layout_is_split_keeping_the_ca(default: Rendered, api: tuple[FakeApiServer, Path]) -> None:
    """An install from before the CA Secret: its serving Secret holds ca.key. The next run moves the key
    into the CA Secret and keeps the CA (no rotation, no new caBundle), and the serving pair."""
    from certs.authority import Settings, reconcile

    server, kubeconfig = api
    material, _ = reconcile(None, Settings(service="kgwe-webhook", namespace=NAMESPACE))
    old = {"ca.crt": material.ca_bundle, "ca.key": material.ca_key, "tls.crt": material.tls_cert,
           "tls.key": material.tls_key}
    server.put_object(SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "kgwe-tls", "namespace": NAMESPACE},
        "data": {key: base64.b64encode(value).decode() for key, value in old.items()},
    })
    assert certs_cli([*_args(default, "CronJob", "kgwe-certs"), "--kubeconfig", str(kubeconfig)]) == 0
    assert _secret(server) == {key: old[key] for key in ("ca.crt", "tls.crt", "tls.key")}
    assert _secret(server, "kgwe-ca") == {"ca.crt": old["ca.crt"], "ca.key": old["ca.key"]}
