"""Quota status shared by the worker processes of one `kgwe serve` on one machine (local mode).

The same compare-and-swap contract as `InMemoryQuotaStore` and `KubeQuotaStore`: a read returns a
version, a write succeeds only if the version is unchanged. Several processes serialise on an
exclusive `flock` of a lock file beside the state file (opened once per process). Admission takes the
`transact` path: read, change and write under one lock, with no race to lose and retry.

What never happens here, because each would admit pods the quota should refuse:

- waiting for the lock forever or spinning on it: the wait polls with a growing sleep (0.2 ms to 25 ms,
  not a busy loop) and gives up at the caller's deadline (or `max_lock_wait` without one), raising
  `QuotaUnavailable`;
- treating a file it cannot read or parse as "no reservations": a missing file is the empty state, but
  an unreadable, empty, truncated or malformed one raises `QuotaUnavailable` on every read and write
  until an operator moves it aside. The file is never overwritten while it is corrupt, so the
  reservations in it are not lost silently (refuse until fixed, logged once per corrupt version);
- a torn write: the state is written to a temporary file in the same directory and renamed over the
  state file under the lock, so readers see the old or the new state whole, also after a worker crashed
  mid-write. With `durable=True` both are fsynced as well, so that the state survives a crash of the
  machine; `kgwe serve` does not ask for that, because its file lives as long as the server (the parent's
  PID names it; a restarted server never reads it again) and two fsyncs cost milliseconds per write,
  which made two workers serve fewer `/validate` requests than one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
from prometheus_client import Counter

from policies.api import WouldBlock
from policies.quota.store import QuotaStatus, QuotaUnavailable, Versioned, status_from_json, status_to_json

log = logging.getLogger("kgwe.quota.file")

T = TypeVar("T")

QUOTA_STORE_ERRORS = Counter(
    "kgwe_quota_store_errors",
    "Quota state file operations that failed and were answered as 'quota unavailable', by reason "
    "(lock_timeout, corrupt, io).",
    ["reason"],
)

# Sleep between tries of a held lock: short at first (the usual holder keeps it for a fraction of a
# millisecond; a longer first sleep leaves the lock idle while waiters sleep), growing so that a
# long-held lock costs a few wake-ups per second, not a spinning core.
_FIRST_SLEEP = 0.0002
_MAX_SLEEP = 0.025
# The state file is written by us only; a bigger one is not ours (or is damaged) and is not parsed.
MAX_STATE_BYTES = 64 * 1024 * 1024
MAX_KEPT_STATUSES = 4096  # parsed statuses kept by `_status_of`, one per TenantQuota


class QuotaStateCorrupt(QuotaUnavailable):
    """The state file exists but is not a state this store wrote; it is left in place for an operator."""


def parse_state(raw: bytes) -> dict[str, dict[str, Any]] | str:
    """The state document in `raw`, validated; else why it is not one this store wrote."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    if not isinstance(data, dict):
        return f"the top level is a {type(data).__name__}, not an object"
    for quota, entry in data.items():
        if (
            not isinstance(entry, dict)
            or type(entry.get("version")) is not int
            or entry["version"] < 0
            or not isinstance(entry.get("status"), dict | None)
        ):
            return f"the entry of quota {quota!r} is not {{version: int, status: object}}"
    return data


class FileQuotaStore:
    """Compare-and-swap quota status in one JSON file, safe across processes and threads.

    `max_lock_wait` bounds a call made without a timeout (background reconciliation), so that nothing
    waits forever for a lock held by a stuck process.
    """

    def __init__(self, path: str | Path, *, max_lock_wait: float = 5.0, durable: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_path = str(self.path.with_suffix(self.path.suffix + ".lock"))
        self._path, self._directory = str(self.path), str(self.path.parent)  # no pathlib under the lock
        self.max_lock_wait = max_lock_wait
        self._reported: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of the corrupt file logged
        self._report_guard = threading.Lock()
        # Threads of one process queue on this lock (woken at once when it is free) before they poll the
        # file lock, so the polling is only between processes: with every request thread polling, waiters
        # slept through most of the time the file lock was free.
        self._threads = threading.Lock()
        self._lock_file: tuple[Any, int] = (None, 0)
        self._statuses: dict[str, tuple[Any, QuotaStatus]] = {}  # `_status_of`

    @contextlib.contextmanager
    def _locked_now(self) -> Iterator[None]:
        """Both locks if they are free at this moment; else WouldBlock (nothing counted, nothing changed)."""
        with self._threads_taken(None, wait=False), self._flocked_now():
            yield

    @contextlib.contextmanager
    def _locked(self, timeout: float | None) -> Iterator[None]:
        with self._threads_taken(timeout, wait=True) as (wait, give_up), self._flocked(wait, give_up):
            yield

    @contextlib.contextmanager
    def _threads_taken(self, timeout: float | None, *, wait: bool) -> Iterator[tuple[float, float]]:
        """This worker's own lock (its threads queue here before they poll the file lock); yields how long the
        file lock may be waited for and the `time.monotonic()` at which to give up. With `wait=False`,
        WouldBlock at once when another thread of this worker holds it."""
        limit = self.max_lock_wait if timeout is None else min(timeout, self.max_lock_wait)
        limit = max(limit, 0.0) if wait else 0.0
        give_up = time.monotonic() + limit
        if not wait:
            if not self._threads.acquire(blocking=False):
                raise WouldBlock(f"quota state {self.path} is locked by another request of this worker", soon=True)
        elif not self._threads.acquire(timeout=limit):
            QUOTA_STORE_ERRORS.labels("lock_timeout").inc()
            raise QuotaUnavailable(f"quota state {self.path} stayed locked by this worker's requests for {limit:.3g}s")
        try:
            yield limit, give_up
        finally:
            self._threads.release()

    @contextlib.contextmanager
    def _flocked_now(self) -> Iterator[None]:
        """The file lock if it is free at this moment (call with `_threads` held); else WouldBlock."""
        try:
            handle = self._lock_handle()
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise WouldBlock(f"quota state {self.path} is locked by another worker", soon=True) from exc
        except OSError as exc:
            raise WouldBlock(f"quota state {self.path}: {exc}") from exc
        try:
            if not self._still_the_lock_file(handle):
                raise WouldBlock(f"quota lock {self._lock_path} was replaced")
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

    def _lock_handle(self) -> Any:
        """The lock file, opened once per process (call with `_threads` held).

        `flock` belongs to the open file description: a handle inherited across a fork would be one
        lock shared by parent and child, so a process never uses a handle another process opened.
        """
        handle, pid = self._lock_file
        if handle is None or pid != os.getpid() or handle.closed:
            handle = open(self._lock_path, "a+b")  # noqa: SIM115 - kept open for the store's life
            self._lock_file = (handle, os.getpid())
        return handle

    @contextlib.contextmanager
    def _flocked(self, wait: float, give_up: float) -> Iterator[None]:
        pause = _FIRST_SLEEP
        while True:
            try:
                handle = self._lock_handle()
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                left = give_up - time.monotonic()
                if left <= 0:
                    QUOTA_STORE_ERRORS.labels("lock_timeout").inc()
                    raise QuotaUnavailable(
                        f"quota state {self.path} stayed locked by another worker for {wait:.3g}s"
                    ) from None
                time.sleep(min(pause, left))
                pause = min(pause * 2, _MAX_SLEEP)
                continue
            except OSError as exc:
                QUOTA_STORE_ERRORS.labels("io").inc()
                raise QuotaUnavailable(f"quota lock {self._lock_path} could not be taken: {exc}") from exc
            if self._still_the_lock_file(handle):
                break
            # The lock file was removed or replaced while we held it open: a lock on it excludes nobody.
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

    def _still_the_lock_file(self, handle: Any) -> bool:
        try:
            current = os.stat(self._lock_path)
        except FileNotFoundError:
            return False
        held = os.fstat(handle.fileno())
        return (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev)

    def _corrupt(self, reason: str, stat: os.stat_result | None) -> QuotaStateCorrupt:
        QUOTA_STORE_ERRORS.labels("corrupt").inc()
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns) if stat is not None else (0, 0, 0)
        with self._report_guard:
            first = identity != self._reported
            self._reported = identity
        if first:
            log.error(
                "quota state file %s is corrupt (%s): every quota check is refused until it is fixed; it is "
                "kept as it is. Move it aside (the reservations in it are then forgotten) or restore it.",
                self.path, reason,
            )
        return QuotaStateCorrupt(f"quota state {self.path} is corrupt: {reason}")

    def _load(self) -> dict[str, dict[str, Any]]:
        """The whole state, validated; {} when there is no file yet. Call with the lock held."""
        # Plain descriptors, not file objects: this runs under the lock on every reservation.
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            QUOTA_STORE_ERRORS.labels("io").inc()
            raise QuotaUnavailable(f"quota state {self.path} unreadable: {exc}") from exc
        try:
            stat = os.fstat(fd)
            if stat.st_size > MAX_STATE_BYTES:
                raise self._corrupt(f"{stat.st_size} bytes, more than {MAX_STATE_BYTES}", stat)
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_STATE_BYTES:
                chunk = os.read(fd, max(stat.st_size - size, 0) + 1)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_STATE_BYTES:
                raise self._corrupt(f"more than {MAX_STATE_BYTES} bytes", stat)
            raw = b"".join(chunks)
        except OSError as exc:
            QUOTA_STORE_ERRORS.labels("io").inc()
            raise QuotaUnavailable(f"quota state {self.path} unreadable: {exc}") from exc
        finally:
            os.close(fd)
        if not raw:
            # We never write an empty file (writes are atomic renames): something else truncated it.
            raise self._corrupt("the file is empty", stat)
        return self._parse(raw, stat)

    def _parse(self, raw: bytes, stat: os.stat_result | None) -> dict[str, dict[str, Any]]:
        """The state document in `raw`, validated (QuotaStateCorrupt otherwise)."""
        data = parse_state(raw)
        if isinstance(data, str):
            raise self._corrupt(data, stat)
        return data

    def _store(self, data: dict[str, dict[str, Any]]) -> None:
        """Replace the state file atomically (and durably with `durable`). Call with the lock held."""
        scratch = f"{self._directory}/.{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(orjson.dumps(data))
                while view:
                    view = view[os.write(fd, view):]
                if self.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(scratch, self._path)
            if self.durable:
                directory = os.open(self._directory, os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
        except OSError as exc:
            QUOTA_STORE_ERRORS.labels("io").inc()
            with contextlib.suppress(OSError):
                os.unlink(scratch)
            raise QuotaUnavailable(f"quota state {self.path} could not be written: {exc}") from exc

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
            self._store(data)
            return True

    def _status_of(self, quota: str, raw: Any) -> QuotaStatus:
        """`status_from_json(raw)`, kept per quota while `_load` hands out the same parsed entry (the mapped
        store keeps its parsed state between transactions). Call with the lock held."""
        kept = self._statuses.get(quota)
        if kept is not None and kept[0] is raw and raw is not None:
            return kept[1]
        status = status_from_json(raw)
        if len(self._statuses) >= MAX_KEPT_STATUSES:
            self._statuses.clear()
        self._statuses[quota] = (raw, status)
        return status

    def transact(
        self,
        quota: str,
        change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]],
        *,
        timeout: float | None,
        wait: bool = True,
    ) -> T:
        """Read, change and write one quota's status under one lock: the path `/validate` takes.

        Half the lock round trips and file reads of `read` + `write`, and no lost race to retry: with
        several workers this lock is what they queue on. With `wait=False` it runs only if both locks are
        free at once (WouldBlock otherwise): the event loop may call it without a thread.
        """
        with self._locked(timeout) if wait else self._locked_now():
            changed, result = self._changed(quota, change, self._load())
            if changed is not None:
                self._store(changed)
            return result

    def _changed(
        self, quota: str, change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]], data: dict[str, dict[str, Any]]
    ) -> tuple[dict[str, dict[str, Any]] | None, T]:
        """`change` applied to `quota`'s entry of `data` (changed in place): the state to write, None when the
        status stays as it is, and the change's result."""
        entry = data.get(quota) or {}
        status = self._status_of(quota, entry.get("status"))
        new_status, result = change(status)
        if new_status is None or new_status == status:
            return None, result
        data[quota] = {"version": int(entry.get("version", 0)) + 1, "status": status_to_json(new_status)}
        return data, result
