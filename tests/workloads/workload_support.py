"""Workload tests' shared parts: the example cluster's real runtime behind real HTTPS, and
AdmissionReviews for workloads exactly as kube-apiserver sends them (kind, resource, requestKind)."""

from __future__ import annotations

import base64
import copy
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import uvicorn
import yaml
from server_support import CLIENT_TIMEOUT_SECONDS

from certs.authority import Settings
from certs.files import ensure_files
from certs.reloader import ReloadingSSLContext
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime
from webhook.server.app import create_app
from webhook.server.listener import uvicorn_server
from webhook.wing_config import DEFAULT_CONTROLLER_IDENTITIES
from webhook.workloads.identity import Identity, Signer
from webhook.workloads.kind import workloads_of

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster"
CONFIG = ROOT / "examples" / "config.yaml"
WORKLOADS = sorted((ROOT / "examples" / "workloads").glob("*.yaml"))
KEY = b"0123456789abcdef0123456789abcdef"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"

# (group, version, resource) per kind, as the API server names them in AdmissionReviews.
RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "RayJob": ("ray.io", "v1", "rayjobs"),
    "RayCluster": ("ray.io", "v1", "rayclusters"),
}


def load(path: Path) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d)


def real_runtime() -> Runtime:
    runtime = build_runtime(load_config(CONFIG), CLUSTER)
    workloads_of(runtime.admission).identity = Identity(Signer(KEY), DEFAULT_CONTROLLER_IDENTITIES)
    return runtime


def review(
    obj: dict[str, Any],
    *,
    user: str = "bob",
    groups: tuple[str, ...] = ("ml-researchers",),
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The AdmissionReview kube-apiserver posts for `obj` (its namespace filled in, as before admission)."""
    obj = copy.deepcopy(obj)
    group, version, resource = RESOURCES[obj["kind"]]
    namespace = obj.setdefault("metadata", {}).setdefault("namespace", "default")
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    options = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}[operation]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj["metadata"].get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": user, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, user)),
                         "groups": [*groups, "system:authenticated"]},
            "object": obj,
            "oldObject": copy.deepcopy(old),
            "dryRun": False,
            "options": {"kind": options, "apiVersion": "meta.k8s.io/v1"},
        },
    }


def pod_from_template(template: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """The pod a controller creates from a template: its metadata (plus a name) and spec."""
    metadata = copy.deepcopy(template.get("metadata") or {})
    metadata.update(name=name, namespace=namespace)
    metadata.setdefault("labels", {})["pod-template-hash"] = "5d8f7c9b4"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template["spec"])}


@dataclass
class Server:
    url: str
    ca_file: Path
    runtime: Runtime

    def ask(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with httpx.Client(base_url=self.url, verify=context, timeout=CLIENT_TIMEOUT_SECONDS) as client:
            response = client.post(f"{path}?timeout=10s", content=orjson.dumps(body))
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()["response"]
        assert answer["uid"] == body["request"]["uid"]
        return answer

    def admit(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        """Both webhooks as the API server calls them: (validating answer, object after the patch, patch)."""
        mutated = self.ask("/mutate", body)
        assert mutated["allowed"]
        patch = orjson.loads(base64.b64decode(mutated["patch"])) if "patch" in mutated else []
        obj = jsonpatch.apply_patch(body["request"]["object"], patch)
        again = copy.deepcopy(body)
        again["request"]["object"] = obj
        again["request"]["uid"] = str(uuid.uuid4())
        validated = self.ask("/validate", again)
        assert "patch" not in validated
        validated["warnings"] = [*mutated.get("warnings", []), *validated.get("warnings", [])]
        return validated, obj, patch


def serve(tmp: Path) -> Iterator[Server]:
    paths, _ = ensure_files(tmp / "certs", Settings(service="kgwe-webhook", namespace="kgwe"))
    tls = ReloadingSSLContext(paths.tls_cert, paths.tls_key, poll_seconds=1.0)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    holder: list[tuple[uvicorn.Server, Runtime]] = []

    def run() -> None:
        # Built on the serving thread: the native policy engine is bound to the thread that made it.
        runtime = real_runtime()
        server = uvicorn_server(create_app(runtime, ui=False, certificate=tls, background=[tls]),
                                "127.0.0.1", port, tls, log_level="warning")
        holder.append((server, runtime))
        server.run(sockets=[sock])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not (holder and holder[0][0].started):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the webhook server did not start")
        time.sleep(0.02)
    try:
        yield Server(f"https://127.0.0.1:{port}", paths.ca_cert, holder[0][1])
    finally:
        holder[0][0].should_exit = True
        thread.join(10)
        sock.close()
