"""Quota status shared by the worker processes of one `kgwe serve` on one machine (YAML mode).

The same compare-and-swap contract as `InMemoryQuotaStore` and `KubeQuotaStore`: a read returns a
version, a write succeeds only if the version is unchanged. Several processes serialise on an
exclusive `flock` of the state file; the file is replaced atomically, so a crash never leaves half a
state behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from policies.quota_store import QuotaStatus, QuotaUnavailable, Versioned, status_from_json, status_to_json


class FileQuotaStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.path.with_suffix(self.path.suffix + ".lock")

    @contextlib.contextmanager
    def _locked(self, timeout: float | None) -> Iterator[None]:
        with open(self._lock_path, "a+b") as handle:
            give_up = None if timeout is None else time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if give_up is not None and time.monotonic() >= give_up:
                        raise QuotaUnavailable(f"quota state {self.path} is locked by another worker") from None
                    time.sleep(0.0005)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _load(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, orjson.JSONDecodeError) as exc:
            raise QuotaUnavailable(f"quota state {self.path} unreadable: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def read(self, quota: str, *, timeout: float | None = None) -> Versioned:
        with self._locked(timeout):
            entry = self._load().get(quota) or {}
        return Versioned(status_from_json(entry.get("status")), str(entry.get("version", 0)))

    def write(self, quota: str, status: QuotaStatus, version: str, *, timeout: float | None = None) -> bool:
        with self._locked(timeout):
            data = self._load()
            entry = data.get(quota) or {}
            current = int(entry.get("version", 0))
            if str(current) != version:
                return False
            data[quota] = {"version": current + 1, "status": status_to_json(status)}
            scratch = self.path.with_suffix(self.path.suffix + f".{os.getpid()}.tmp")
            scratch.write_bytes(orjson.dumps(data))
            os.replace(scratch, self.path)
            return True
