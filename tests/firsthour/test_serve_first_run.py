"""The first minutes with `kgwe serve`: `/` leads to the page, a busy port is one line, dev.py stays on loopback."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from ports import free_port

from webhook.server.ui_routes import ui_router

ROOT = Path(__file__).resolve().parents[2]


def test_root_redirects_to_the_ui() -> None:
    app = FastAPI()
    app.include_router(ui_router())
    with TestClient(app) as client:
        answer = client.get("/?tab=nodes", follow_redirects=False)
        assert answer.status_code == 307
        assert answer.headers["location"] == "ui/?tab=nodes"  # relative: works behind a path prefix
        page = client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def _kgwe(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main(sys.argv[1:]))", *args],
        env=env, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )


def test_a_busy_port_is_one_line_that_says_what_to_do(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        for workers in ("1", "2"):
            done = _kgwe(["serve", "--cluster", "examples/cluster", "--host", "127.0.0.1", "--port", str(port),
                          "--workers", workers], tmp_path)
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr
            assert done.stderr.strip().splitlines()[-1:] == [  # earlier lines: INFO from the start (key made)
                f"kgwe serve: port {port} on 127.0.0.1 is already in use (another kgwe serve?); stop it or give "
                "--port N"
            ]


def test_dev_py_serves_on_loopback_unless_told_otherwise(tmp_path: Path, monkeypatch) -> None:
    import dev  # the repository root is on pytest's pythonpath
    calls: list[list[str]] = []
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev.subprocess, "call", lambda args: calls.append(args) or 0)
    monkeypatch.chdir(tmp_path)
    assert dev.main(["serve"]) == 0
    assert dev.main(["serve", "--host", "0.0.0.0"]) == 0
    assert calls[0][calls[0].index("--host") + 1] == "127.0.0.1"
    assert calls[1].count("--host") == 1 and calls[1][calls[1].index("--host") + 1] == "0.0.0.0"


def test_a_second_server_on_the_port_of_a_running_one_is_refused(tmp_path: Path) -> None:
    """Both with several workers (SO_REUSEPORT): the second must not join the first one's group."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state")}
    first = subprocess.Popen(
        [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main(sys.argv[1:]))", "serve",
         "--cluster", "examples/cluster", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # the parent binds before anything else: a connection means the port is taken
            assert first.poll() is None, "the first server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the first server never listened"
                time.sleep(0.2)
        for workers in ("2", "1"):
            done = _kgwe(["serve", "--cluster", "examples/cluster", "--host", "127.0.0.1", "--port", str(port),
                          "--workers", workers], tmp_path)
            assert done.returncode == 2, done.stderr
            assert done.stderr.strip().splitlines()[-1] == (
                f"kgwe serve: port {port} on 127.0.0.1 is already in use (another kgwe serve?); stop it or give "
                "--port N"
            )
    finally:
        first.terminate()
        first.wait(timeout=30)


def test_the_first_line_says_how_to_trust_the_ca_and_trusting_it_works(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state")}
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main(sys.argv[1:]))", "serve",
         "--cluster", "examples/cluster", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline().strip()
        ca = tmp_path / "state" / "certs" / "ca.crt"
        assert first.startswith("kgwe serve: no --tls-cert-file given; serving a certificate of KGWE's own CA.")
        assert first.endswith(f"CA: {ca}")  # last, where scripts read it
        assert f"https://127.0.0.1:{port}/ui/" in first and '"Trust the CA"' in first
        assert "certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n kgwe-dev -i CA" in first
        assert "### Trust the CA" in (ROOT / "README.md").read_text()
        # What the line asks to trust is what verifies the page's address.
        trusted = ssl.create_default_context(cafile=str(ca))
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, \
                        trusted.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    assert tls.recv(64).startswith(b"HTTP/1.1 200")
                break
            except (ConnectionError, TimeoutError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                assert time.monotonic() < deadline and server.poll() is None, "the server never answered"
                time.sleep(0.3)
    finally:
        server.terminate()
        server.wait(timeout=30)
