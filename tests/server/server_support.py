"""A real uvicorn server over TLS on 127.0.0.1, a CA made by certs/, AdmissionReviews as the API server sends them."""

from __future__ import annotations

import copy
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
import yaml
from fastapi import FastAPI
from patience import WAIT_SECONDS
from ports import free_port as free_port

from certs.authority import Settings
from certs.files import CertificatePaths, ensure_files
from certs.reloader import ReloadingSSLContext
from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.admission.validate import fails_closed
from webhook.cluster.model import ClusterStore
from webhook.config import Config
from webhook.server.listener import uvicorn_server
from webhook.server.transport import ConnectionLimits

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster"
CONFIG = ROOT / "examples" / "config.yaml"
PODS = sorted((ROOT / "examples" / "pods").glob("*.yaml"))
# httpx gives up after 5 s by default, which a TLS handshake on a busy machine can take: a bound on how long
# a test waits for a hung server, not on how fast KGWE answers (tests that bound an answer say so themselves).
CLIENT_TIMEOUT_SECONDS = 60.0


def load_pod(path: Path) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "Pod")


GPU_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer", "namespace": "team-a", "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb"}},
    "spec": {
        "containers": [{"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    },
}


def admission_review(
    obj: dict[str, Any] | None = None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    kind: str = "Pod",
    group: str = "",
    version: str = "v1",
    resource: str = "pods",
    dry_run: bool = False,
    namespace: str = "team-a",
    user: str = "alice@example.com",
    user_uid: str = "b5d2b0c4-5a0b-4c0e-9d7e-1f2a3b4c5d6e",
    groups: Sequence[str] = ("team-a", "system:authenticated"),
    extra: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview exactly as kube-apiserver posts it."""
    name = ((obj or old or {}).get("metadata") or {}).get("name", "")
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}.get(operation)
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": user,
                "uid": user_uid,
                "groups": list(groups),
                "extra": extra if extra is not None else {
                    "iam.gke.io/user-assertion": ["abc"], "user-assertion.cloud.google.com": ["xyz"],
                },
            },
            "object": copy.deepcopy(obj),
            "oldObject": copy.deepcopy(old),
            "dryRun": dry_run,
            "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"} if options_kind else None,
        },
    }


class FakeAdmission:
    """Stands in for the admission core: adds one annotation to GPU pods, fails on request."""

    def __init__(self) -> None:
        self.budgets: list[float] = []
        # The deadlines themselves: a test bounds them by clock readings taken around its request, which holds
        # however long a busy machine takes to reach the core (the budget left when it does is not fixed).
        self.deadlines: list[float] = []
        self.delay = 0.0
        # Set to end a delay early (a hung core's thread is not left sleeping past its test).
        self.wake = threading.Event()

    def _pod(self, request: AdmissionRequest, deadline: float | None) -> dict[str, Any] | None:
        if deadline is not None:
            self.deadlines.append(deadline)
            self.budgets.append(deadline - time.monotonic())
        if self.delay:
            self.wake.wait(self.delay)
        if not request.is_pod or request.operation != "CREATE" or request.object is None:
            return None
        name = request.object["metadata"].get("name")
        if name == "explode":
            raise RuntimeError("policy engine crashed")
        if name == "too-slow":
            raise TimeoutError("deadline passed")
        return request.object

    def fails_closed(self, request: AdmissionRequest) -> bool:
        return fails_closed(request)  # the core's rule, no wing's gates registered

    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        pod = self._pod(request, deadline)
        if pod is None:
            return Outcome()
        patch = [{"op": "add", "path": "/metadata/labels", "value": {"kgwe.io/seen": "true"}}]
        return Outcome(
            patch=patch, warnings=["placed on nvidia-h100-80gb"], audit_annotations={"kgwe.io/decision": "x"}
        )

    def validate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        pod = self._pod(request, deadline)
        if pod is not None and pod["metadata"].get("name") == "forbidden":
            return Outcome.deny("nvidia-h100-80gb quota of team-a exhausted")
        return Outcome()

    async def validate_async(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        return self.validate(request, deadline)


@dataclass
class FakeRuntime:
    config: Config = field(default_factory=Config)
    store: ClusterStore = field(default_factory=lambda: ClusterStore(AcceleratorTable.build()))
    admission: FakeAdmission = field(default_factory=FakeAdmission)

    def set_config(self, config: Config) -> None:
        self.config = config


@dataclass
class RunningServer:
    url: str
    ca_file: Path
    cert_dir: Path
    tls: ReloadingSSLContext
    # The server itself where it runs in this process: its open connections and request tasks, for a test
    # to wait until the server has finished with a connection (start_server sets it).
    uvicorn: uvicorn.Server | None = None

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", CLIENT_TIMEOUT_SECONDS)
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.ca_file)), **kwargs)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def tls_socket(self, timeout: float) -> ssl.SSLSocket:
        """A TLS connection to the server that trusts its CA, for a test that writes raw HTTP."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return context.wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.fixture(scope="session")
def cert_settings() -> Settings:
    return Settings(service="kgwe-webhook", namespace="kgwe")


@pytest.fixture
def cert_paths(tmp_path: Path, cert_settings: Settings) -> CertificatePaths:
    paths, _ = ensure_files(tmp_path / "certs", cert_settings)
    return paths


def start_server(
    make_app: Callable[[], FastAPI], paths: CertificatePaths, tls: ReloadingSSLContext,
    limits: ConnectionLimits | None = None,
) -> Iterator[RunningServer]:
    """Serve the app from a thread. The app is built in that thread: native policy engines are bound to the
    thread that created them, and in `kgwe serve` the runtime is built on the thread that serves."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    servers: list[uvicorn.Server] = []
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            servers.append(uvicorn_server(make_app(), "127.0.0.1", port, tls, log_level="warning", limits=limits))
        except BaseException as exc:
            errors.append(exc)
            raise
        servers[0].run(sockets=[sock])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_SECONDS
    while not (servers and servers[0].started):
        if errors:
            raise errors[0]
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield RunningServer(f"https://127.0.0.1:{port}", paths.ca_cert, paths.directory, tls, servers[0])
    finally:
        servers[0].should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
def server(runtime: FakeRuntime, cert_paths: CertificatePaths) -> Iterator[RunningServer]:
    from webhook.server.app import create_app

    tls = ReloadingSSLContext(cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.05)
    yield from start_server(lambda: create_app(runtime, ui=False, certificate=tls, background=[tls]), cert_paths, tls)


def ask(server: RunningServer, path: str, review: dict[str, Any]) -> dict[str, Any]:
    """POST `review` to `path` as the API server does and return the checked `response`."""
    with server.client() as client:
        response = client.post(f"{path}?timeout=10s", content=orjson.dumps(review))
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()["response"]
    assert answer["uid"] == review["request"]["uid"]
    return answer
