"""Debian packages the tests and benches run for real (Chromium for the UI, Prometheus and promtool for usage and
costs), installed with apt-get when missing and we are root, one installer at a time.

`python3 dev.py test` starts the install in the background before it makes the virtualenv, so that on a fresh
machine (as in CI) the download and unpacking overlap the Python install instead of holding up the pytest worker
that first needs a browser or a Prometheus. The installer holds `LOCK` until it ends; a test that needs a package
waits on the lock, then finds the package or installs it itself. Standard library only: dev.py loads this file
with the system's Python, before any virtualenv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The command each package is found by.
PACKAGES = {"chromium": "chromium", "prometheus": "prometheus", "promtool": "prometheus"}
LOCK = Path(tempfile.gettempdir()) / "kgwe-system-packages.lock"
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


class InstallFailed(RuntimeError):
    """apt-get could not install a package here; the reason is the message."""


def missing(packages: list[str] | None = None) -> list[str]:
    """The packages (all of PACKAGES' by default) whose commands are not on the PATH."""
    wanted = set(packages) if packages is not None else set(PACKAGES.values())
    return sorted({package for command, package in PACKAGES.items()
                   if package in wanted and shutil.which(command) is None})


def can_install() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


def _commands(packages: list[str]) -> list[list[str]]:
    return [["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]]


def start_background_install() -> list[str]:
    """dev.py's: start installing every missing package in a process of its own and return their names (none
    when nothing is missing or this machine cannot install). That process holds LOCK until it ends."""
    packages = missing()
    if not packages or not can_install() or os.name != "posix":
        return []
    import fcntl

    script = " && ".join(" ".join(command) for command in _commands(packages))
    with open(LOCK, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        # The child inherits the locked descriptor: the lock is released when the child exits, not when this
        # process closes its own copy below.
        subprocess.Popen(["sh", "-c", script], env=APT_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, pass_fds=(held.fileno(),), start_new_session=True)
    return packages


@contextmanager
def _installing(timeout: float) -> Iterator[None]:
    """LOCK held, waiting at most `timeout` seconds for another installer to end."""
    if os.name != "posix":
        yield
        return
    import fcntl

    deadline = time.monotonic() + timeout
    with open(LOCK, "a") as held:
        while True:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InstallFailed(f"another install held {LOCK} for more than {timeout:.0f}s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def ensure(packages: list[str], timeout: float) -> None:
    """Every one of `packages` installed: after any install under way ends, installed with apt-get where still
    missing (root only); InstallFailed saying why otherwise."""
    with _installing(timeout):
        wanted = missing(packages)
        if not wanted:
            return
        if not can_install():
            raise InstallFailed(f"{', '.join(wanted)} is not installed and installing it needs root and apt-get")
        deadline = time.monotonic() + timeout
        for command in _commands(wanted):
            left = max(deadline - time.monotonic(), 1.0)
            try:
                subprocess.run(command, check=True, capture_output=True, text=True, env=APT_ENV, timeout=left)
            except subprocess.TimeoutExpired:
                raise InstallFailed(f"`{' '.join(command)}` did not finish in {timeout:.0f}s") from None
            except (OSError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", "") or str(exc)
                raise InstallFailed(f"`{' '.join(command)}` failed: {detail.strip()[-300:]}") from None
        still = missing(packages)
        if still:
            raise InstallFailed(f"apt-get installed {', '.join(still)} but its commands are not on the PATH")
