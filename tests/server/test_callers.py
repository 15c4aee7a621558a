"""Who may call /mutate and /validate: over real HTTPS on 127.0.0.1, with certificates made by certs/.

The runtime is the real one over examples/cluster with a gang store the test reads, so what a call writes (the
record `/mutate` keeps of a gang's first member) is visible; the API server's client certificate comes from
`kgwe certs client`.
"""

from __future__ import annotations

import base64
import copy
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
import yaml
from fastapi import FastAPI
from patience import WAIT_SECONDS
from server_support import CLUSTER, CONFIG, GPU_POD, ROOT, admission_review, free_port, start_server

from certs.client import CLIENT_CA_CERT, CLIENT_CERT, CLIENT_KEY, ClientSettings, ensure_client_files
from certs.files import CertificatePaths
from certs.reloader import ReloadingSSLContext
from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import ConfigError, parse_config
from webhook.server.app import create_app

# A GPU pod the example configuration admits (the built-in policies want a memory limit).
GPU_POD = copy.deepcopy(GPU_POD)
GPU_POD["spec"]["containers"][0]["resources"]["limits"]["memory"] = "16Gi"
# A member of a gang (/mutate of it once wrote a gang record; it writes nothing now, and must stay answered).
GANG_POD = copy.deepcopy(GPU_POD)
GANG_POD["metadata"]["annotations"] = {"kgwe.io/accelerator": "nvidia-gb200-186gb", "kgwe.io/gang": "llm",
                                       "kgwe.io/gang-size": "2"}


@dataclass
class AuthServer:
    url: str
    ca_file: Path
    client_dir: Path
    handed_on: HandedOn

    def client(self, cert_dir: Path | None = None) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if cert_dir is not None:
            context.load_cert_chain(cert_dir / CLIENT_CERT, cert_dir / CLIENT_KEY)
        return httpx.Client(base_url=self.url, verify=context, timeout=10)

    def effects(self) -> int:
        """Admission requests whose effects were let through (not a dry run): what an attacker wants."""
        return self.handed_on.effective


@dataclass
class HandedOn:
    """Stands in for `runtime.decision_events` (Events on pods, written after the answer): the one thing the
    admission endpoints hand on after answering. Counts the requests that may take effect (not dry runs)."""

    effective: int = 0
    dry_runs: int = 0

    def offer(self, request: Any, outcome: Any, mutating: bool) -> None:
        if request.dry_run:
            self.dry_runs += 1
        else:
            self.effective += 1


def serve_with_auth(
    tmp_path: Path, cert_paths: CertificatePaths, client_dir: Path, mode: str
) -> Iterator[AuthServer]:
    config = yaml.safe_load(CONFIG.read_text())
    config["authentication"] = {"clientCAFile": str(client_dir / CLIENT_CA_CERT), "mode": mode}
    parsed = parse_config(yaml.safe_dump(config))
    handed_on = HandedOn()
    tls = ReloadingSSLContext(
        cert_paths.tls_cert, cert_paths.tls_key, poll_seconds=0.05, client_ca_file=parsed.authentication.client_ca_file
    )

    def make_app() -> FastAPI:
        runtime = build_runtime(parsed, CLUSTER)
        runtime.decision_events = handed_on
        return create_app(runtime, ui=False, certificate=tls, background=[tls])

    for running in start_server(make_app, cert_paths, tls):
        yield AuthServer(running.url, cert_paths.ca_cert, client_dir, handed_on)


@pytest.fixture
def client_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "apiserver"
    ensure_client_files(directory, ClientSettings())
    return directory


@pytest.fixture
def auth_server(tmp_path: Path, cert_paths: CertificatePaths, client_dir: Path) -> Iterator[AuthServer]:
    yield from serve_with_auth(tmp_path, cert_paths, client_dir, "required")


def post(client: httpx.Client, path: str, review: dict[str, Any]) -> httpx.Response:
    return client.post(f"{path}?timeout=10s", content=orjson.dumps(review),
                       headers={"content-type": "application/json"})


def test_caller_without_certificate_gets_401_and_writes_nothing(auth_server: AuthServer) -> None:
    with auth_server.client() as client:
        for _ in range(4):  # the attack of issue 13: fake /validate calls filling a tenant's limit
            response = post(client, "/validate", admission_review(GPU_POD))
            assert response.status_code == 401
            status = response.json()
            assert status["kind"] == "Status" and status["code"] == 401 and status["reason"] == "Unauthorized"
            assert "no client certificate" in status["message"]
        assert post(client, "/mutate", admission_review(GANG_POD)).status_code == 401
        # Probes, scrapers and the UI need no certificate.
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.get("/metrics").status_code == 200
        metrics = client.get("/metrics").text
    assert auth_server.effects() == 0
    assert 'kgwe_admission_callers_total{endpoint="validate",result="refused"}' in metrics


def test_api_server_certificate_is_accepted_and_its_calls_take_effect(auth_server: AuthServer) -> None:
    with auth_server.client(auth_server.client_dir) as client:
        mutated = post(client, "/mutate", admission_review(GPU_POD))
        assert mutated.status_code == 200
        patch = orjson.loads(base64.b64decode(mutated.json()["response"]["patch"]))
        response = post(client, "/validate", admission_review(jsonpatch.apply_patch(GPU_POD, patch)))
        assert response.status_code == 200
        assert response.json()["response"]["allowed"] is True, response.json()
        assert post(client, "/mutate", admission_review(GANG_POD)).status_code == 200
    # The same calls from the API server take effect: the 401 test above measures something real.
    assert auth_server.effects() == 3


def test_certificate_from_another_ca_fails_the_handshake(auth_server: AuthServer, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    ensure_client_files(stranger, ClientSettings())  # same name, its own CA
    with auth_server.client(stranger) as client, pytest.raises(httpx.TransportError):
        post(client, "/validate", admission_review(GPU_POD))
    assert auth_server.effects() == 0


def test_certificate_from_the_ca_with_another_name_gets_401(auth_server: AuthServer, tmp_path: Path) -> None:
    # A second certificate from the same client CA, issued for someone else.
    other = tmp_path / "other"
    other.mkdir()
    for name in (CLIENT_CA_CERT, "client-ca.key"):
        (other / name).write_bytes((auth_server.client_dir / name).read_bytes())
    ensure_client_files(other, ClientSettings(name="system:node:gpu-1"))
    with auth_server.client(other) as client:
        response = post(client, "/validate", admission_review(GPU_POD))
    assert response.status_code == 401
    assert "system:node:gpu-1" in response.json()["message"] and "not allowed" in response.json()["message"]
    assert auth_server.effects() == 0


def test_each_certificate_keeps_its_own_verdict(auth_server: AuthServer, tmp_path: Path) -> None:
    """Verdicts are remembered per certificate (callers.py): the API server's, another name's from the same CA and
    the API server's again, each over connections of its own to one server, are each answered as themselves."""
    other = tmp_path / "other"
    other.mkdir()
    for name in (CLIENT_CA_CERT, "client-ca.key"):
        (other / name).write_bytes((auth_server.client_dir / name).read_bytes())
    ensure_client_files(other, ClientSettings(name="system:node:gpu-1"))
    for cert_dir, status in ((auth_server.client_dir, 200), (other, 401), (auth_server.client_dir, 200), (other, 401)):
        with auth_server.client(cert_dir) as client:
            for _ in range(2):
                assert post(client, "/validate", admission_review(GPU_POD)).status_code == status
    assert auth_server.effects() == 4


def test_serving_certificate_is_no_client_certificate(auth_server: AuthServer, cert_paths: CertificatePaths) -> None:
    """The webhook's own serving pair is signed by another CA: it cannot stand in for the API server."""
    context = ssl.create_default_context(cafile=str(cert_paths.ca_cert))
    context.load_cert_chain(cert_paths.tls_cert, cert_paths.tls_key)
    with httpx.Client(base_url=auth_server.url, verify=context) as client, pytest.raises(httpx.TransportError):
        post(client, "/validate", admission_review(GPU_POD))


def test_permissive_mode_answers_unauthenticated_callers_as_dry_run(
    tmp_path: Path, cert_paths: CertificatePaths, client_dir: Path
) -> None:
    for server in serve_with_auth(tmp_path, cert_paths, client_dir, "permissive"):
        with server.client() as client:
            mutated = post(client, "/mutate", admission_review(GPU_POD))
            patch = orjson.loads(base64.b64decode(mutated.json()["response"]["patch"]))
            pod = jsonpatch.apply_patch(GPU_POD, patch)
            response = post(client, "/validate", admission_review(pod))
            assert post(client, "/mutate", admission_review(GANG_POD)).json()["response"]["allowed"] is True
        assert response.status_code == 200 and response.json()["response"]["allowed"] is True
        assert server.effects() == 0 and server.handed_on.dry_runs == 3
        with server.client(client_dir) as client:
            assert post(client, "/validate", admission_review(pod)).json()["response"]["allowed"] is True
            assert post(client, "/mutate", admission_review(GANG_POD)).json()["response"]["allowed"] is True
        assert server.effects() == 2


def test_unauthenticated_request_is_always_dry_run() -> None:
    review = admission_review(GPU_POD)
    assert decode_review(orjson.dumps(review), authenticated=False).dry_run is True
    assert decode_review(orjson.dumps(review), authenticated=False).authenticated is False
    trusted = decode_review(orjson.dumps(review))
    assert trusted.authenticated is True and trusted.dry_run is False


def test_authentication_settings_are_checked() -> None:
    assert parse_config("{}").authentication.effective_mode == "off"
    assert parse_config("authentication: {clientCAFile: /x}").authentication.effective_mode == "required"
    with pytest.raises(ConfigError, match=r"needs authentication\.clientCAFile"):
        parse_config("authentication: {mode: required}")
    with pytest.raises(ConfigError, match="allowedNames"):
        parse_config("authentication: {clientCAFile: /x, allowedNames: []}")


def test_startup_says_loudly_when_nobody_is_checked(caplog: pytest.LogCaptureFixture) -> None:
    from webhook.config import Authentication
    from webhook.server.callers import CallerAuthenticator

    with caplog.at_level(logging.INFO, logger="webhook.server.callers"):
        CallerAuthenticator(Authentication()).announce()
        CallerAuthenticator(Authentication(client_ca_file="/ca.crt")).announce()
    off, on = caplog.records
    assert off.levelno == logging.WARNING and "authentication is OFF" in off.getMessage()
    assert on.levelno == logging.INFO and "kgwe-apiserver-client" in on.getMessage()


@pytest.mark.parametrize("authenticated", [True, False], ids=["client-ca", "no-client-ca"])
def test_kgwe_serve_wires_authentication_and_says_when_it_is_off(tmp_path: Path, authenticated: bool) -> None:
    """The real `kgwe serve` process: its TLS context asks for client certificates from the configured CA,
    its admission endpoints check them, and its log says when nothing is checked."""

    client_dir = tmp_path / "apiserver"
    ensure_client_files(client_dir, ClientSettings())
    config = yaml.safe_load(CONFIG.read_text())
    if authenticated:
        config["authentication"] = {"clientCAFile": str(client_dir / CLIENT_CA_CERT)}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state")}
    command = [sys.executable, "-m", "webhook.cli", "serve", "--cluster", str(CLUSTER), "--config", str(config_file),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--no-ui"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert process.stdout is not None
        ca_file = Path(process.stdout.readline().rsplit("CA: ", 1)[1].strip())
        server = AuthServer(f"https://127.0.0.1:{port}", ca_file, client_dir, HandedOn())
        give_up = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                with server.client() as client:
                    if client.get("/readyz").status_code == 200:
                        break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < give_up, "kgwe serve never became ready"
            time.sleep(0.1)
        with server.client() as client:
            anonymous = post(client, "/validate", admission_review(GPU_POD)).status_code
        with server.client(client_dir) as client:
            api_server = post(client, "/validate", admission_review(GPU_POD)).status_code
        assert (anonymous, api_server) == ((401, 200) if authenticated else (200, 200))
    finally:
        process.terminate()
        assert process.wait(20) in (0, -signal.SIGTERM)
    assert process.stderr is not None
    log = process.stderr.read()
    assert ("authentication is OFF" in log) is not authenticated


def test_kgwe_serve_refuses_to_start_without_its_client_ca(tmp_path: Path) -> None:

    config = yaml.safe_load(CONFIG.read_text())
    config["authentication"] = {"clientCAFile": str(tmp_path / "missing-ca.crt")}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state")}
    command = [sys.executable, "-m", "webhook.cli", "serve", "--cluster", str(CLUSTER), "--config", str(config_file),
               "--host", "127.0.0.1", "--port", str(free_port()), "--workers", "1", "--no-ui"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert result.returncode != 0
    assert "cannot load the client CA" in result.stderr and "missing-ca.crt" in result.stderr
