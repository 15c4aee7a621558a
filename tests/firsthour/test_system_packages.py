"""The Debian packages' installer that `dev.py test` starts in the background (bench/system_packages.py): a test that
needs a package waits until the installer under way ends, and is told why when it waits too long."""

from __future__ import annotations

import subprocess
import sys

import pytest
import system_packages

HOLD = """
import fcntl, sys, time
with open(sys.argv[1], "a") as held:
    fcntl.flock(held, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(system_packages.LOCK), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.skipif(sys.platform != "linux", reason="the lock is flock(2)")
def test_a_test_waits_for_the_install_under_way_then_finds_nothing_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system_packages, "missing", lambda packages=None: [])
    holder = _holder(0.5)
    system_packages.ensure(["prometheus"], timeout=30)
    assert holder.poll() is not None  # ensure() returned only once the holder had ended
    holder.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="the lock is flock(2)")
def test_an_install_that_holds_the_lock_too_long_is_named() -> None:
    holder = _holder(30)
    try:
        # The holder keeps the lock for 30 s: an ensure() that waited it out would return, not raise.
        with pytest.raises(system_packages.InstallFailed, match=r"kgwe-system-packages\.lock"):
            system_packages.ensure(["prometheus"], timeout=0.3)
    finally:
        holder.kill()
        holder.wait()


def test_nothing_is_started_where_nothing_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system_packages, "missing", lambda packages=None: [])
    assert system_packages.start_background_install() == []
