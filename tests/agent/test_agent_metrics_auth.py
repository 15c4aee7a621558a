"""SPEC 13 for the agent's /metrics (per-pod GPU usage is tenant information): beyond loopback it is HTTPS and
answers only a Kubernetes token that the API server's TokenReview authenticates and a SubjectAccessReview
allows `get` on the non-resource URL /metrics, as kube-rbac-proxy and `kgwe serve` ask.

The agent's real server over real HTTPS on loopback, the fake NVML driver and kubelet behind it, and the fake API
server (tests/cluster/kube_fake_apiserver.py) answering the reviews with RBAC over the grants a test sets. Also:
the bounds (a flood of made-up tokens, a slow API server, slow or oversized clients, the connection cap), the
certificate from files and its renewal, and `kgwe agent` itself choosing the door by its address.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import nvml_machines as machines
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fake_nvml import FakeProcess, installed
from kube_fake_apiserver import ACCESS_REVIEWS, TOKEN_REVIEWS, FakeApiServer, write_kubeconfig
from kubelet_podresources import Container, Kubelet, Pod
from kubernetes import client as k8s
from patience import WAIT_SECONDS
from ports import free_port
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from waiting import eventually

from agent import metrics_tls
from agent.main import run
from agent.metrics_auth import MetricsAuth, bearer_token
from agent.metrics_http import MetricsServer, is_loopback
from agent.metrics_tls import ServingTls
from agent.podresources import PodResourcesClient
from agent.usage_metrics import FB_USED, UsageCollector, registry_for
from agent.usage_nvml import UsageReader

NODE = "gpu-node-1"
PROMETHEUS = "system:serviceaccount:monitoring:prometheus"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    server.add_user("prometheus-token", PROMETHEUS)
    server.allow(PROMETHEUS, "get", url="/metrics")  # the chart's <release>-metrics-reader, bound
    server.add_user("scrapers-token", "grafana-agent", ["scrapers"])
    server.allow("scrapers", "get", url="/metrics")  # bound to a group
    server.add_user("nobody-token", "nobody")  # authenticated, no binding
    server.add_user("api-reader-token", "api-reader")
    server.allow("api-reader", "get", url="/api/v1/tenants")  # another URL is not /metrics
    yield server
    server.close()


@pytest.fixture
def api_client(api: FakeApiServer) -> Iterator[k8s.ApiClient]:
    configuration = k8s.Configuration()
    configuration.host = api.url
    with k8s.ApiClient(configuration) as client:
        yield client


@dataclass
class Agent:
    server: MetricsServer
    tls: ServingTls | None
    ca: ssl.SSLContext | None

    @property
    def url(self) -> str:
        return f"{self.server.scheme}://127.0.0.1:{self.server.port}/metrics"

    def get(self, token: str | None = None, **headers: str) -> httpx.Response:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        with httpx.Client(verify=self.ca if self.ca is not None else False, timeout=20) as client:
            return client.get(self.url, headers=headers)


def _verifying(pem: bytes) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=pem.decode())
    return context


@contextmanager
def agent_metrics(kubelet: Kubelet, auth: MetricsAuth | None, tls: ServingTls | None = None,
                  **bounds: Any) -> Iterator[Agent]:
    """The agent's /metrics on 127.0.0.1 over the fake driver (an L4 held by team-a/train-0)."""
    system = machines.l4_mps()
    system.gpus[1].processes = [FakeProcess(10, 2_000)]
    kubelet.pods = [Pod("team-a", "train-0", [Container("main", {"nvidia.com/gpu": [system.gpus[1].uuid]})])]
    with ExitStack() as stack:
        stack.enter_context(installed(system))
        reader = UsageReader()
        reader.open()
        stack.callback(reader.close)
        pods = PodResourcesClient(str(kubelet.socket), min_interval=0.0, timeout=WAIT_SECONDS)
        stack.callback(pods.close)
        if auth is not None and tls is None:
            tls = ServingTls(names=[NODE])
        server = MetricsServer(registry_for(UsageCollector(reader, pods, None, hostname=NODE)), 0, "127.0.0.1",
                               auth=auth, tls=tls, **bounds)
        stack.callback(server.close)
        ca = _verifying(tls.certificate_pem) if tls is not None and tls.self_signed else None
        yield Agent(server, tls, ca)


@pytest.fixture
def guarded(kubelet: Kubelet, api_client: k8s.ApiClient) -> Iterator[Agent]:
    with agent_metrics(kubelet, MetricsAuth.for_api_client(api_client)) as agent:
        yield agent


def _families(answer: httpx.Response) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(answer.text)}


def _requests(agent: Agent) -> dict[str, float]:
    """kgwe_agent_metrics_requests_total by result, read from the agent's own registry."""
    found: dict[str, float] = {}
    for family in agent.server.registry.collect():
        if family.name == "kgwe_agent_metrics_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    found[sample.labels["result"]] = sample.value
    return found


# -- the four answers -----------------------------------------------------------------------------------------


def test_no_token_is_401_and_asks_the_api_server_nothing(guarded: Agent, api: FakeApiServer) -> None:
    answer = guarded.get()
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'Bearer realm="kgwe-agent"'
    assert answer.json()["reason"] == "Unauthorized" and "Authorization: Bearer" in answer.json()["message"]
    assert FB_USED not in answer.text
    for header in ("Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer a b"):
        assert guarded.get(Authorization=header).status_code == 401
    assert api.reviews(TOKEN_REVIEWS) == [] and api.reviews(ACCESS_REVIEWS) == []


def test_a_token_the_api_server_does_not_know_is_401(guarded: Agent, api: FakeApiServer) -> None:
    answer = guarded.get("made-up-token")
    assert answer.status_code == 401 and FB_USED not in answer.text
    assert "did not accept the token" in answer.json()["message"]
    review, = api.reviews(TOKEN_REVIEWS)
    assert review.body["spec"] == {"token": "made-up-token"}
    assert api.reviews(ACCESS_REVIEWS) == []  # nobody to authorize


@pytest.mark.parametrize("token", ["nobody-token", "api-reader-token"])
def test_a_token_not_allowed_get_metrics_is_403(guarded: Agent, api: FakeApiServer, token: str) -> None:
    answer = guarded.get(token)
    assert answer.status_code == 403 and FB_USED not in answer.text
    assert answer.json()["reason"] == "Forbidden" and "may not get /metrics" in answer.json()["message"]
    review, = api.reviews(ACCESS_REVIEWS)
    # What kube-rbac-proxy asks: the non-resource URL and the verb, with the user's whole identity.
    spec = review.body["spec"]
    assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert "resourceAttributes" not in spec
    assert spec["groups"] == ["system:authenticated"] and spec["uid"].startswith("uid-")


@pytest.mark.parametrize("token", ["prometheus-token", "scrapers-token"])
def test_a_token_allowed_get_metrics_gets_the_series(guarded: Agent, token: str) -> None:
    answer = guarded.get(token)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    memory = _families(answer)[FB_USED]
    held = [s for s in memory.samples if s.labels.get("pod") == "train-0"]
    assert len(held) == 1 and held[0].labels["namespace"] == "team-a" and held[0].value == 2_000


def test_gzip_and_openmetrics_as_prometheus_asks(guarded: Agent) -> None:
    answer = guarded.get("prometheus-token", **{"Accept-Encoding": "gzip",
                                                "Accept": "application/openmetrics-text; version=1.0.0"})
    assert answer.status_code == 200 and answer.headers["content-encoding"] == "gzip"
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    assert answer.text.rstrip().endswith("# EOF") and FB_USED in answer.text


def test_only_get_of_metrics_is_served(guarded: Agent) -> None:
    with httpx.Client(verify=guarded.ca, timeout=10) as client:
        base = guarded.url.removesuffix("/metrics")
        assert client.get(f"{base}/", headers={"Authorization": "Bearer prometheus-token"}).status_code == 404
        assert client.post(guarded.url, headers={"Authorization": "Bearer prometheus-token"}).status_code == 501


def test_the_verdicts_are_counted(guarded: Agent) -> None:
    for token in (None, "made-up-token", "nobody-token", "prometheus-token", "prometheus-token"):
        guarded.get(token)
    assert _requests(guarded) == {"unauthenticated": 2, "forbidden": 1, "allowed": 2}


def test_plain_http_to_the_https_port_gets_no_series(guarded: Agent) -> None:
    with socket.create_connection(("127.0.0.1", guarded.server.port), timeout=10) as raw:
        raw.sendall(b"GET /metrics HTTP/1.0\r\nAuthorization: Bearer prometheus-token\r\n\r\n")
        received = b""
        try:
            while chunk := raw.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    assert FB_USED.encode() not in received and not received.startswith(b"HTTP/1.0 200")


# -- the cache and the API server ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _auth(api_client: k8s.ApiClient, **options: Any) -> MetricsAuth:
    return MetricsAuth.for_api_client(api_client, **options)


def test_answers_are_reused_for_seconds_by_token_hash(api: FakeApiServer, api_client: k8s.ApiClient) -> None:
    clock = Clock()
    auth = _auth(api_client, clock=clock)
    assert auth.check("Bearer prometheus-token").code == 200
    assert auth.check("Bearer prometheus-token").code == 200
    assert auth.check("Bearer nobody-token").code == 403
    assert auth.check("Bearer nobody-token").code == 403
    assert (len(api.reviews(TOKEN_REVIEWS)), len(api.reviews(ACCESS_REVIEWS))) == (2, 2)
    assert "prometheus-token" not in repr(auth._cache)  # hashes only
    clock.now += 5.5  # a refusal is remembered 5 s, an allowed token 10 s
    api.allow("nobody", "get", url="/metrics")  # a binding made after the refusal
    assert auth.check("Bearer nobody-token").code == 200
    assert auth.check("Bearer prometheus-token").code == 200
    assert (len(api.reviews(TOKEN_REVIEWS)), len(api.reviews(ACCESS_REVIEWS))) == (3, 3)
    clock.now += 5
    assert auth.check("Bearer prometheus-token").code == 200
    assert (len(api.reviews(TOKEN_REVIEWS)), len(api.reviews(ACCESS_REVIEWS))) == (4, 4)


def test_a_flood_of_made_up_tokens_cannot_grow_the_table(api: FakeApiServer, api_client: k8s.ApiClient) -> None:
    auth = _auth(api_client, max_entries=16)
    assert auth.check("Bearer prometheus-token").code == 200
    for n in range(200):
        assert auth.check(f"Bearer made-up-{n}").code == 401
    assert auth.cache_size() == 16
    assert auth.check("Bearer prometheus-token").code == 200  # pushed out, asked again: still allowed
    assert auth.check("Bearer " + "x" * 20_000).code == 401  # longer than any token: no review
    assert len(api.reviews(TOKEN_REVIEWS)) == 202


def test_a_slow_api_server_is_503_within_the_bound(
    kubelet: Kubelet, api: FakeApiServer, api_client: k8s.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    with agent_metrics(kubelet, _auth(api_client, timeout=0.5)) as agent:
        api.delays[TOKEN_REVIEWS] = 60.0  # the fake server's handler threads are daemons: nothing waits for it
        started = time.monotonic()
        answer = agent.get("prometheus-token")
        took = time.monotonic() - started
        assert answer.status_code == 503 and FB_USED not in answer.text
        # The bound (0.5 s), not the API server (60 s): wide for a busy machine.
        assert "cannot check the caller" in answer.json()["message"] and took < 30
        assert _requests(agent) == {"unavailable": 1}
    assert "the API server does not answer the reviews" in caplog.text
    assert "prometheus-token" not in caplog.text


def test_a_failed_review_is_503_and_not_remembered(
    kubelet: Kubelet, api: FakeApiServer, api_client: k8s.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Reviews that are answered get the test's patience, not the short bound above: the allowed scrape after
    # the failure must not turn into a 503 because a busy machine ran the fake API server late.
    with agent_metrics(kubelet, _auth(api_client, timeout=WAIT_SECONDS)) as agent:
        api.fail_next(ACCESS_REVIEWS, 500)  # the SubjectAccessReview fails: closed too
        assert agent.get("prometheus-token").status_code == 503
        assert agent.get("prometheus-token").status_code == 200  # a failure is never cached
        assert _requests(agent) == {"unavailable": 1, "allowed": 1}
    assert "prometheus-token" not in caplog.text


def test_without_rights_to_review_the_agent_refuses_with_503(
    guarded: Agent, api: FakeApiServer
) -> None:
    api.fail_next(TOKEN_REVIEWS, 403)  # the agent's service account may not create TokenReviews
    answer = guarded.get("prometheus-token")
    assert answer.status_code == 503 and "HTTP 403" in answer.json()["message"]


def test_bearer_token_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc" and bearer_token("bearer  abc ") == "abc"
    assert bearer_token(None) is None and bearer_token("Token abc") is None and bearer_token("Bearer ") is None


# -- bounds: slow, oversized and too many clients ------------------------------------------------------------


def _closed_within(raw: socket.socket, seconds: float) -> float:
    """Seconds until the server closed `raw` (it reads what the server sends until then)."""
    raw.settimeout(seconds + 5)
    started = time.monotonic()
    try:
        while raw.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    return time.monotonic() - started


def _still_open(raw: socket.socket) -> bool:
    """Whether the server has not closed `raw` yet (it has sent nothing on it)."""
    raw.setblocking(False)
    try:
        return raw.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        raw.setblocking(True)


def test_a_client_that_never_says_hello_is_dropped(kubelet: Kubelet, api_client: k8s.ApiClient) -> None:
    with agent_metrics(kubelet, _auth(api_client), header_seconds=0.5) as agent, \
            socket.create_connection(("127.0.0.1", agent.server.port)) as raw:
        assert _closed_within(raw, 60) < 30  # the header deadline (0.5 s), wide for a busy machine


def test_a_client_trickling_its_headers_is_dropped_at_the_header_deadline(
    kubelet: Kubelet, api_client: k8s.ApiClient
) -> None:
    with agent_metrics(kubelet, _auth(api_client), header_seconds=1.0) as agent:
        assert agent.ca is not None
        with socket.create_connection(("127.0.0.1", agent.server.port)) as plain, \
                agent.ca.wrap_socket(plain, server_hostname="127.0.0.1") as raw:
            raw.sendall(b"GET /metrics HTTP/1.0\r\n")
            started = time.monotonic()
            with pytest.raises((BrokenPipeError, ConnectionResetError, ssl.SSLError)):
                while time.monotonic() - started < 60:
                    raw.sendall(b"X-Slow: a\r\n")  # a line every 0.1 s: always within IO_SECONDS
                    time.sleep(0.1)
            assert time.monotonic() - started < 30  # the header deadline (1 s), wide for a busy machine


def test_oversized_headers_are_431(guarded: Agent) -> None:
    answer = guarded.get("prometheus-token", **{"X-Big": "y" * 40_000})
    assert answer.status_code == 431 and FB_USED not in answer.text


def test_connections_past_the_cap_are_closed_at_once_and_the_server_recovers(
    kubelet: Kubelet, api_client: k8s.ApiClient
) -> None:
    with agent_metrics(kubelet, _auth(api_client), max_connections=2, header_seconds=6.0) as agent:
        idle = [socket.create_connection(("127.0.0.1", agent.server.port)) for _ in range(2)]
        try:
            time.sleep(0.2)  # both accepted and waiting in their threads
            with socket.create_connection(("127.0.0.1", agent.server.port)) as third:
                _closed_within(third, 60)
            # Closed at once, judged by order, not by a clock: before the header deadline of the two
            # connections opened before it, which are still open.
            assert all(_still_open(raw) for raw in idle)
            assert _requests(agent).get("busy") == 1
            for raw in idle:
                assert _closed_within(raw, 60) < 30  # dropped at the header deadline (6 s)
        finally:
            for raw in idle:
                raw.close()
        # The dropped connections' threads give their slots back only after the client saw the close, which a
        # busy machine may run late (a fixed 0.2 s sleep was not always enough): until then a scrape is refused
        # as busy, and counted so. The server has recovered once one gets through, and that one is allowed.
        refused = 0
        give_up = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                answer = agent.get("prometheus-token")
                break
            except httpx.TransportError:
                refused += 1
                assert time.monotonic() < give_up, "the server never had a free slot again"
                time.sleep(0.05)
        assert answer.status_code == 200
        assert _requests(agent).get("busy") == 1 + refused


# -- the serving certificate ---------------------------------------------------------------------------------


def _ca_and_leaf(folder: Path, name: str) -> Path:
    """A CA (returned) and a leaf for 127.0.0.1 signed by it, written to folder/tls.crt and folder/tls.key."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kgwe-agent-metrics")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("kgwe-agent-metrics.kgwe-system.svc")]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    (folder / "tls.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (folder / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    (folder / f"{name}.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return folder / f"{name}.crt"


def _verified_get(agent: Agent, ca: Path) -> int:
    """A scrape that checks the certificate against `ca` under the Service's name (tlsConfig.serverName)."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", agent.server.port), timeout=10) as plain, \
            context.wrap_socket(plain, server_hostname="kgwe-agent-metrics.kgwe-system.svc") as raw:
        raw.sendall(b"GET /metrics HTTP/1.0\r\nAuthorization: Bearer prometheus-token\r\n\r\n")
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
    return int(received.split(b" ", 2)[1])


def test_a_certificate_from_files_is_verified_and_renewed_without_a_restart(
    kubelet: Kubelet, api_client: k8s.ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _ca_and_leaf(tmp_path, "first-ca")
    clock = Clock()
    tls = ServingTls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), clock=clock)
    with agent_metrics(kubelet, _auth(api_client), tls) as agent:
        assert agent.server.scheme == "https" and not tls.self_signed
        assert _verified_get(agent, first) == 200
        second = _ca_and_leaf(tmp_path, "second-ca")  # cert-manager renewed the Secret
        assert _verified_get(agent, first) == 200  # looked at every CHECK_SECONDS, not on every connection
        clock.now += metrics_tls.CHECK_SECONDS
        assert _verified_get(agent, second) == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            _verified_get(agent, first)
        (tmp_path / "tls.key").write_bytes(b"not a key")  # half-written: the last good pair stays
        clock.now += metrics_tls.CHECK_SECONDS
        assert _verified_get(agent, second) == 200


def test_the_self_signed_certificate_names_the_node_and_loopback(guarded: Agent) -> None:
    assert guarded.tls is not None and guarded.tls.self_signed
    certificate = x509.load_pem_x509_certificate(guarded.tls.certificate_pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert NODE in names.get_values_for_type(x509.DNSName)
    assert guarded.get("prometheus-token").status_code == 200  # verified against it (the fixture's client)
    left = certificate.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=360) < left <= datetime.timedelta(days=365)


def test_one_of_cert_and_key_alone_is_refused() -> None:
    with pytest.raises(metrics_tls.TlsError):
        ServingTls("/some/tls.crt", "")


# -- kgwe agent picks the door by its address ----------------------------------------------------------------


def test_the_open_door_is_on_loopback_only() -> None:
    assert all(is_loopback(a) for a in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(a) for a in ("0.0.0.0", "::", "10.0.0.7", "gpu-node-1"))
    with pytest.raises(ValueError, match="loopback only"):
        MetricsServer(registry_for(UsageCollector(None, None, None, NODE)), 0, "0.0.0.0")  # type: ignore[arg-type]


def test_a_collector_that_raises_is_a_500_not_a_dropped_connection(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def collect(self) -> Iterator[Any]:
            raise RuntimeError("boom")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Broken())  # type: ignore[arg-type]
    server = MetricsServer(registry, 0, "127.0.0.1")
    try:
        answer = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
    finally:
        server.close()
    assert answer.status_code == 500 and "rendering the series failed" in caplog.text


def test_kgwe_agent_beyond_loopback_serves_https_to_tokens_only(
    api: FakeApiServer, kubelet: Kubelet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.put("Node", {"metadata": {"name": NODE, "labels": {}, "annotations": {}}})
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
    system = machines.l4_mps()
    system.gpus[0].processes = [FakeProcess(10, 1_000)]
    kubelet.pods = [Pod("team-a", "p", [Container("c", {"nvidia.com/gpu": [system.gpus[0].uuid]})])]
    port = free_port()
    stop = threading.Event()
    status: list[int] = []
    argv = ["--node-name", NODE, "--kubeconfig", str(kubeconfig), "--metrics-port", str(port),
            "--metrics-address", "0.0.0.0", "--pod-resources-socket", str(kubelet.socket)]
    caplog.set_level("INFO", logger="kgwe.agent")
    with installed(system):
        agent = threading.Thread(target=lambda: status.append(run(argv, stop)), daemon=True)
        agent.start()
        try:
            url = f"https://127.0.0.1:{port}/metrics"
            with httpx.Client(verify=False, timeout=10) as client:  # insecure_skip_verify, as the chart scrapes
                deadline = time.monotonic() + WAIT_SECONDS
                while True:
                    try:
                        refused = client.get(url)
                        break
                    except httpx.TransportError:
                        assert time.monotonic() < deadline, "the agent never served /metrics"
                        time.sleep(0.05)
                allowed = client.get(url, headers={"Authorization": "Bearer prometheus-token"})
                forbidden = client.get(url, headers={"Authorization": "Bearer nobody-token"})
            # /metrics serves before the first publish cycle begins: a stop set before that cycle ran (a busy
            # machine may run the agent's thread late) would end the agent without publishing at all.
            eventually(lambda: bool(api.objects("Node")[NODE]["metadata"]["labels"]), what="the topology published")
        finally:
            stop.set()
            agent.join(timeout=WAIT_SECONDS)
    assert status == [0]
    assert (refused.status_code, forbidden.status_code, allowed.status_code) == (401, 403, 200)
    assert [s.labels["pod"] for s in _families(allowed)[FB_USED].samples if "pod" in s.labels] == ["p"]
    assert f"usage metrics on https://0.0.0.0:{port}/metrics with a self-signed certificate" in caplog.text
    assert api.objects("Node")[NODE]["metadata"]["labels"], "it published the topology too"


def test_kgwe_agent_refuses_a_certificate_without_its_key(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.put("Node", {"metadata": {"name": NODE}})
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
    with installed(machines.l4_mps()):
        status = run(["--node-name", NODE, "--kubeconfig", str(kubeconfig), "--metrics-port", str(free_port()),
                      "--metrics-cert-file", str(tmp_path / "tls.crt"), "--pod-resources-socket", ""],
                     threading.Event())
    assert status == 1
    assert "--metrics-cert-file and --metrics-key-file go together" in capsys.readouterr().err
