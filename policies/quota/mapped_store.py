"""Quota status shared by the workers of one `kgwe serve` through one memory-mapped file.

`FileQuotaStore`'s contract and lock (an `flock` on a lock file beside the state, waits bounded by the
deadline), with the state in a shared mapping instead of a file rewritten and renamed per reservation.

A transaction is worked out *before* the lock is taken: the state is read from the mapping as it is (a
copy of the active slot that matches its CRC), the change applied and the new state serialised; under the
lock the active slot is compared with the bytes the change was worked out from, and only when they are
the same is the new state copied in. Otherwise (another worker wrote in between, or the read met a write
in progress) the change is worked out again under the lock. The lock is therefore held for a comparison
and a copy of a few kilobytes (microseconds), not for the parse, the change and the serialisation (about
a tenth of a millisecond): with two workers reserving on every admission, the other worker found the lock
held a sixth of the time, and every such request waited on the event loop or a thread. A change that
writes nothing (a refusal, a dry run, a reservation kept) takes no lock at all: its answer is that of the
state as it was when read, which a copy matching its CRC holds whole.

The change is a pure function of the status it is given, so working it out twice is only work; comparing
bytes, not a counter, makes the check independent of how the processor orders the other worker's writes.

Layout: a 64-byte header, then two slots of `SLOT_BYTES`. The header names the active slot and holds each
slot's length and CRC-32. A write fills the inactive slot, records its length and CRC, and only then flips
the active index (one byte): a worker that dies mid-write leaves the previous state whole. Under the lock,
a header or active slot that does not check out is corrupt: every read and write refuses
(`QuotaStateCorrupt`) and nothing overwrites it, as with the file store. A worker parses the state only when
its bytes differ from the state it parsed or wrote last. The file lives in the runtime directory for the
server's life (never durable: a restarted server starts a new one).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from policies.quota.file_store import QUOTA_STORE_ERRORS, FileQuotaStore, parse_state
from policies.quota.store import QuotaStatus, QuotaUnavailable

MAGIC = b"KGWEQS01"
# magic, active slot, 7 bytes of padding, the two slots' lengths, their CRC-32s; padded to 64 bytes.
HEADER = struct.Struct("<8sB7xQQII")
HEADER_BYTES = 64
ACTIVE_OFFSET = 8
# Per slot: room for tens of thousands of reservations. The file is sparse; only pages written use memory.
SLOT_BYTES = 16 * 1024 * 1024
NEVER_WRITTEN = bytes(8)

T = TypeVar("T")
State = dict[str, dict[str, Any]]


class _Unreadable(Exception):
    """The header or the active slot does not check out (corrupt under the lock; torn or corrupt outside it)."""


class MappedQuotaStore(FileQuotaStore):
    """`FileQuotaStore` with its state in a shared mapping: see the module doc."""

    def __init__(self, path: str | Path, *, max_lock_wait: float = 5.0, slot_bytes: int = SLOT_BYTES) -> None:
        super().__init__(path, max_lock_wait=max_lock_wait, durable=False)
        self.slot_bytes = slot_bytes
        # This process's mapping, the pid that made it and the (device, inode) of the file it maps.
        self._mapping: tuple[mmap.mmap | None, int, tuple[int, int]] = (None, 0, (0, 0))
        # (bytes, state) of the last state this process parsed or wrote; used with `_threads` held.
        self._parsed: tuple[bytes, State] | None = None

    def _map(self, *, followed: bool = False) -> mmap.mmap:
        """This process's mapping of the state file (call with `_threads` held); made at the first use.

        `followed` (before each read a decision rests on: the one without the lock, the one under it): made
        again when the path no longer names the file mapped, moved aside or removed. Otherwise this worker
        would go on with a file no worker started since uses (each counting only its own file's
        reservations), or with a damaged file moved aside, refusing every check for ever."""
        mapped, pid, identity = self._mapping
        if mapped is not None and pid == os.getpid() and not mapped.closed:
            if not followed:
                return mapped
            try:
                current = os.stat(self._path)
            except OSError:
                current = None
            if current is not None and (current.st_dev, current.st_ino) == identity:
                return mapped
            mapped.close()  # this worker's own; every use maps anew through here
        size = HEADER_BYTES + 2 * self.slot_bytes
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                stat = os.fstat(fd)
                if stat.st_size < size:
                    os.ftruncate(fd, size)  # zeros: an empty state until the first write
                mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:
            QUOTA_STORE_ERRORS.labels("io").inc()
            raise QuotaUnavailable(f"quota state {self.path} could not be mapped: {exc}") from exc
        self._mapping = (mapped, os.getpid(), (stat.st_dev, stat.st_ino))
        return mapped

    def _header(self, mapped: mmap.mmap) -> tuple[bytes, int, list[int], list[int]]:
        magic, active, first, second, first_crc, second_crc = HEADER.unpack_from(mapped, 0)
        return magic, active, [first, second], [first_crc, second_crc]

    def _active_bytes(self, mapped: mmap.mmap) -> bytes | None:
        """A copy of the active slot, checked against its CRC; None when nothing was ever written."""
        magic, active, lengths, crcs = self._header(mapped)
        if magic == NEVER_WRITTEN:
            # Zeros, as `_map` made it (a writer copies the header in whole, so no read meets a zero magic
            # over a written state); slot 0 may hold a first write that died before its header. Else a
            # header zeroed by damage over states written since, never to be overwritten with a new one.
            if mapped[:HEADER_BYTES] == bytes(HEADER_BYTES) and not mapped[HEADER_BYTES + self.slot_bytes]:
                return None
            raise _Unreadable("the header is zeroed over a state already written")
        if magic != MAGIC or active not in (0, 1) or not 0 < lengths[active] <= self.slot_bytes:
            # Never an empty slot: a state is at least "{}".
            raise _Unreadable("the header is not one this store wrote")
        start = HEADER_BYTES + active * self.slot_bytes
        raw = mapped[start:start + lengths[active]]
        if zlib.crc32(raw) != crcs[active]:
            raise _Unreadable("the active slot does not match its checksum")
        return raw

    def _state_of(self, raw: bytes | None, *, quietly: bool = False) -> State | None:
        """The state these bytes hold (parsed again only when they differ from the last ones). A top-level
        copy: a transaction replaces entries in it, never changes one, so entries are shared with the kept
        state (which keeps `_status_of`'s memo valid). Bytes that are no state are corrupt, or with
        `quietly` (a read without the lock, which may meet a write half done) None."""
        if raw is None:
            return {}
        kept = self._parsed
        if kept is not None and kept[0] == raw:
            return dict(kept[1])
        if quietly:
            parsed = parse_state(raw)
            if isinstance(parsed, str):
                return None
            data = parsed
        else:
            data = self._parse(raw, None)
        self._parsed = (raw, data)
        return dict(data)

    def _load(self) -> State:
        """The state (call with both locks held); a header or slot that does not check out is corrupt."""
        try:
            raw = self._active_bytes(self._map(followed=True))
        except _Unreadable as exc:
            raise self._corrupt(str(exc), None) from None
        state = self._state_of(raw)
        assert state is not None  # not quietly: bytes that are no state raise
        return state

    def _serialised(self, data: State) -> bytes:
        raw = orjson.dumps(data)
        if len(raw) > self.slot_bytes:
            QUOTA_STORE_ERRORS.labels("io").inc()
            raise QuotaUnavailable(f"quota state {self.path}: {len(raw)} bytes do not fit a slot of {self.slot_bytes}")
        return raw

    def _store(self, data: State) -> None:
        raw = self._serialised(data)
        self._write(raw)
        self._parsed = (raw, dict(data))

    def _write(self, raw: bytes) -> None:
        """Copy `raw` into the inactive slot, then make it the active one (call with both locks held)."""
        mapped = self._map()
        magic, active, lengths, crcs = self._header(mapped)
        fresh = magic != MAGIC
        target = 0 if fresh else 1 - active
        start = HEADER_BYTES + target * self.slot_bytes
        mapped[start:start + len(raw)] = raw
        lengths[target], crcs[target] = len(raw), zlib.crc32(raw)
        # The slot and its length and checksum first, under the index still naming the other slot... Copied in
        # whole, never packed in place: `pack_into` zeroes its target before it fills it, and a worker reading
        # without the lock would meet a zero magic (a file never written: the empty state) or a zero index.
        mapped[:HEADER.size] = HEADER.pack(MAGIC, target if fresh else active, *lengths, *crcs)
        # ...then the index: one byte, so a reader sees the old state or the new one whole.
        mapped[ACTIVE_OFFSET] = target

    def _snapshot(self) -> tuple[bytes | None, State] | None:
        """The state read without the file lock (call with `_threads` held): (its bytes, the state), or None
        when it cannot be read whole this way (a write in progress, or damage the locked read will report)."""
        try:
            raw = self._active_bytes(self._map(followed=True))
        except (_Unreadable, QuotaUnavailable):
            return None
        state = self._state_of(raw, quietly=True)
        return None if state is None else (raw, state)

    def _planned(
        self, quota: str, change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]], data: State
    ) -> tuple[tuple[bytes, State] | None, T]:
        """`FileQuotaStore._changed`, with the new state serialised: (its bytes, the state) or None when
        nothing is to be written, and the change's result."""
        changed, result = self._changed(quota, change, data)
        return (None if changed is None else (self._serialised(changed), changed)), result

    def transact(
        self,
        quota: str,
        change: Callable[[QuotaStatus], tuple[QuotaStatus | None, T]],
        *,
        timeout: float | None,
        wait: bool = True,
    ) -> T:
        """`FileQuotaStore.transact`, worked out before the file lock and published under it (module doc)."""
        with self._threads_taken(timeout, wait=wait) as (limit, give_up):
            seen = self._snapshot()
            planned = None if seen is None else self._planned(quota, change, seen[1])
            if planned is not None and planned[0] is None:
                # Nothing to write (a refusal, a dry run, a reservation kept): the answer holds for the state
                # as it was when read, a moment ago, whole; no other worker need wait for it.
                return planned[1]
            with self._flocked(limit, give_up) if wait else self._flocked_now():
                if planned is None or seen is None or not self._unchanged_since(seen[0]):
                    planned = self._planned(quota, change, self._load())
                written, result = planned
                if written is not None:
                    self._write(written[0])
                    self._parsed = written
                return result

    def _unchanged_since(self, raw: bytes | None) -> bool:
        """Whether the active slot holds `raw` now (call with both locks held); False for a header or slot
        that does not check out, which the `_load` that follows reports."""
        try:
            return self._active_bytes(self._map(followed=True)) == raw
        except (_Unreadable, QuotaUnavailable):
            return False  # the `_load` that follows reports it
