"""Profiling for bench/bench_scale.py (KGWE_SCALE_PROFILE=DIR): py-spy over the worker where a figure is missed,
never part of a figure (py-spy pauses the worker a moment per dump)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def profile_directory() -> Path | None:
    """KGWE_SCALE_PROFILE, made, or None: no profiling. py-spy is KGWE_PYSPY or the one on PATH."""
    profile = os.environ.get("KGWE_SCALE_PROFILE")
    if not profile:
        return None
    Path(profile).mkdir(parents=True, exist_ok=True)
    return Path(profile)


def _pyspy() -> str | None:
    return os.environ.get("KGWE_PYSPY") or shutil.which("py-spy")


@contextmanager
def dumps_while(pid: int, out: Path | None, every: float = 5.0) -> Iterator[None]:
    """`py-spy dump` of the worker's threads every `every` seconds while the block runs (profiling only)."""
    spy = _pyspy()
    if out is None or spy is None:
        yield
        return
    done = threading.Event()

    def dump() -> None:
        with out.open("w") as sink:
            started = time.monotonic()
            while not done.wait(every):
                sink.write(f"\n=== {time.monotonic() - started:.1f} s ===\n")
                sink.flush()
                subprocess.run([spy, "dump", "--pid", str(pid)], stdout=sink, stderr=subprocess.STDOUT, check=False)
    thread = threading.Thread(target=dump, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(30)


@contextmanager
def recording(pid: int, out: Path | None) -> Iterator[None]:
    """`py-spy record` of the worker while the block runs (profiling only): raw stacks of the GIL's holder."""
    spy = _pyspy()
    if out is None or spy is None:
        yield
        return
    recorder = subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--gil",
                                 "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)
