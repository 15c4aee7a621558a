"""What the web UI tests and the screenshot script share: a real `kgwe serve` and a real headless Chromium.

The browser is Debian's chromium driven by Playwright over CDP (never `playwright install`, which needs
the internet). It is installed with apt-get when missing and we are root; otherwise the tests skip and
say why. Every request the page makes to anywhere but the server is refused and recorded, so a page
that needed a CDN or a web font would fail its tests.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import system_packages
from ports import free_port

from certs.authority import Settings
from certs.files import ensure_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CLUSTER = ROOT / "examples" / "cluster"
EXAMPLE_CONFIG = ROOT / "examples" / "config.yaml"
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
APT_TIMEOUT_SECONDS = 240
SERVER_START_SECONDS = 60
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}


class BrowserUnavailable(RuntimeError):
    """No Chromium can be found or installed here; the reason is the message."""


def find_chromium() -> Path | None:
    if DEBIAN_CHROMIUM.is_file():
        return DEBIAN_CHROMIUM
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return Path(found) if found else None


def ensure_chromium() -> Path:
    """Debian's chromium, installed with apt-get when it is missing and we are root."""
    found = find_chromium()
    if found is not None:
        return found
    try:
        system_packages.ensure(["chromium"], APT_TIMEOUT_SECONDS)
    except system_packages.InstallFailed as exc:
        raise BrowserUnavailable(str(exc)) from None
    found = find_chromium()
    if found is None:
        raise BrowserUnavailable("apt-get installed chromium but no chromium binary is on the PATH")
    return found


def _kgwe_command() -> list[str]:
    # Never the `kgwe` console script: it imports `webhook` from wherever the package was installed (an
    # editable install of another checkout), not from this tree. The interpreter with this tree first on
    # PYTHONPATH (see _serve_env) runs the code under test.
    return [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())"]


def _serve_env(workdir: Path) -> dict[str, str]:
    """The environment of `kgwe serve`: this tree's code ahead of any installed copy, and a state directory of
    the test's own (not the user's, which every xdist worker's server would share)."""
    inherited = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *([inherited] if inherited else [])]),
            "KGWE_STATE_DIR": str(workdir / "state")}


@dataclass
class KgweServer:
    url: str
    ca_file: Path
    process: subprocess.Popen[bytes]
    log_file: Path

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.ca_file)), timeout=60)

    def get_json(self, path: str, **params: str) -> Any:
        with self.api() as client:
            response = client.get(path, params=params)
            response.raise_for_status()
            return response.json()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


@contextmanager
def kgwe_serve(workdir: Path, cluster: Path = EXAMPLE_CLUSTER, *extra_args: str,
               config: Path = EXAMPLE_CONFIG) -> Iterator[KgweServer]:
    """`kgwe serve --cluster CLUSTER --config CONFIG` on 127.0.0.1 with a serving certificate from our own CA,
    running this tree's code."""
    paths, _ = ensure_files(workdir / "certs", Settings(ip_addresses=("127.0.0.1",)))
    port = free_port()
    log_file = workdir / f"kgwe-serve-{port}.log"
    command = [
        *_kgwe_command(), "serve", "--cluster", str(cluster), "--config", str(config),
        "--host", "127.0.0.1", "--port", str(port),
        "--tls-cert-file", str(paths.tls_cert), "--tls-private-key-file", str(paths.tls_key),
        # One worker unless the test asks for more: a directory serve starts one per CPU, each importing and
        # compiling everything, and what these tests look at is the same from any worker.
        *(() if "--workers" in extra_args else ("--workers", "1")), *extra_args,
    ]
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=_serve_env(workdir), stdout=log, stderr=subprocess.STDOUT)
    server = KgweServer(f"https://127.0.0.1:{port}", paths.ca_cert, process, log_file)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_ready(server: KgweServer) -> None:
    deadline = time.monotonic() + SERVER_START_SECONDS
    with server.api() as client:
        while True:
            if server.process.poll() is not None:
                raise RuntimeError(f"kgwe serve exited with {server.process.returncode}:\n{server.log()[-3000:]}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kgwe serve not ready after {SERVER_START_SECONDS}s:\n{server.log()[-3000:]}")
            time.sleep(0.1)


@dataclass
class PageProblems:
    """What went wrong inside the page: script errors, console errors (CSP violations among them), and
    requests to anywhere but the server."""

    errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)

    def watch(self, context: Any, page: Any, origin: str) -> None:
        def route(request_route: Any) -> None:
            url = request_route.request.url
            if url.startswith(origin) or url.startswith(("data:", "blob:")):
                request_route.continue_()
            else:
                self.foreign_requests.append(url)
                request_route.abort()

        context.route("**/*", route)
        def console(message: Any) -> None:
            if message.type == "error":
                self.errors.append(f"console: {message.text}")

        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("console", console)


def open_page(browser: Any, server: KgweServer) -> tuple[Any, Any, PageProblems]:
    """A page in a fresh browser context (1280x800, certificate errors ignored), watched for problems."""
    context = browser.new_context(ignore_https_errors=True, viewport=VIEWPORT, accept_downloads=True)
    page = context.new_page()
    problems = PageProblems()
    problems.watch(context, page, server.url)
    return context, page, problems


@contextmanager
def chromium_browser(executable: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # launch() gives every run a fresh, temporary user-data-dir.
        browser = playwright.chromium.launch(executable_path=str(executable), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
