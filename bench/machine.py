"""What a benchmark ran on: written next to every result, so numbers from two machines are never compared blind."""

from __future__ import annotations

import os
import platform
import socket
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

# Packages whose version changes the numbers (HTTP stack, JSON, policy engines, TLS).
PACKAGES = (
    "kgwe", "fastapi", "starlette", "uvicorn", "uvloop", "httptools", "orjson", "pydantic", "gordon-to-regorus",
    "cel-expr-python", "opa-golib-python-bindings", "opa-python-client", "cryptography", "prometheus-client",
    "kubernetes", "nvidia-ml-py",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_total_mib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _cgroup_cpu_limit() -> str | None:
    """`quota period` of a cgroup v2 CPU limit, when the container has one."""
    try:
        return Path("/sys/fs/cgroup/cpu.max").read_text().strip()
    except OSError:
        return None


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def describe_machine() -> dict[str, Any]:
    """CPU model and count, memory, OS, Python, package versions, and how busy the machine was at the start."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpus_usable": cpus,
        "cpus_online": os.cpu_count(),
        "cgroup_cpu_max": _cgroup_cpu_limit(),
        "memory_total_mib": _memory_total_mib(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": package_versions(),
        # Other work on the machine moves every number here; the load average says how much there was.
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
