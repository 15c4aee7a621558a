"""Quota status shared by the workers of one `kgwe serve` through one memory-mapped file.

`FileQuotaStore`'s contract and lock (an `flock` on a lock file beside the state, waits bounded by the
deadline, one transaction per reservation), with the state in a shared mapping instead of a file
rewritten and renamed per reservation: the lock is held for a parse, a change and a copy into memory
(tens of microseconds, no file system calls), so workers that take turns on it spend little time
waiting, also when the one holding it is preempted.

Layout: a 64-byte header, then two slots of `SLOT_BYTES`. The header names the active slot and holds
each slot's length and CRC-32, and a write counter (`GENERATION`, bumped before anything else a write
changes). A write fills the inactive slot, records its length and CRC, and only then flips the active
index (one byte): a worker that dies mid-write leaves the previous state whole. A header or active slot
that does not check out is corrupt: every read and write refuses (`QuotaStateCorrupt`) and nothing
overwrites it, as with the file store. Every read checks the active slot's CRC, but parses it only when
the counter, slot, length or CRC moved since this worker last parsed or wrote it: a transaction parses the
state only after another worker wrote it. The file lives in the runtime directory for the server's life
(never durable: a restarted server starts a new one).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson

from policies.quota.file_store import QUOTA_STORE_ERRORS, FileQuotaStore
from policies.quota.store import QuotaUnavailable

MAGIC = b"KGWEQS01"
# magic, active slot, 7 bytes of padding, the two slots' lengths, their CRC-32s; padded to 64 bytes.
HEADER = struct.Struct("<8sB7xQQII")
HEADER_BYTES = 64
ACTIVE_OFFSET = 8
# The write counter, after HEADER's 40 bytes. Bumped first: a writer that dies after it changed nothing else
# only costs readers a parse; one that dies later leaves a new counter beside whatever it wrote.
GENERATION = struct.Struct("<Q")
GENERATION_OFFSET = 40
# Per slot: room for tens of thousands of reservations. The file is sparse; only pages written use memory.
SLOT_BYTES = 16 * 1024 * 1024


class MappedQuotaStore(FileQuotaStore):
    """`FileQuotaStore` with its state in a shared mapping: see the module doc."""

    def __init__(self, path: str | Path, *, max_lock_wait: float = 5.0, slot_bytes: int = SLOT_BYTES) -> None:
        super().__init__(path, max_lock_wait=max_lock_wait, durable=False)
        self.slot_bytes = slot_bytes
        self._mapping: tuple[mmap.mmap | None, int] = (None, 0)
        # ((pid, generation, active slot, length, CRC), state) of the last state this process parsed or
        # wrote; used under the lock only.
        self._parsed: tuple[tuple[int, int, int, int, int], dict[str, dict[str, Any]]] | None = None

    def _map(self) -> mmap.mmap:
        """This process's mapping of the state file (call with the lock held); made at the first use."""
        mapped, pid = self._mapping
        if mapped is not None and pid == os.getpid() and not mapped.closed:
            return mapped
        size = HEADER_BYTES + 2 * self.slot_bytes
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size < size:
                    os.ftruncate(fd, size)  # zeros: an empty state until the first write
                mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:
            QUOTA_STORE_ERRORS.labels("io").inc()
            raise QuotaUnavailable(f"quota state {self.path} could not be mapped: {exc}") from exc
        self._mapping = (mapped, os.getpid())
        return mapped

    def _header(self, mapped: mmap.mmap) -> tuple[bytes, int, list[int], list[int]]:
        magic, active, first, second, first_crc, second_crc = HEADER.unpack_from(mapped, 0)
        return magic, active, [first, second], [first_crc, second_crc]

    def _load(self) -> dict[str, dict[str, Any]]:
        """The state (call with the lock held). The active slot is checked against its CRC on every read;
        it is parsed again only when the write counter, slot, length or CRC moved. A top-level copy: a
        transaction replaces entries in it, never changes one, so the entries are shared with the kept
        state."""
        mapped = self._map()
        magic, active, lengths, crcs = self._header(mapped)
        if magic == bytes(8):
            return {}  # never written
        if magic != MAGIC or active not in (0, 1) or lengths[active] > self.slot_bytes:
            raise self._corrupt("the header is not one this store wrote", None)
        start = HEADER_BYTES + active * self.slot_bytes
        raw = mapped[start:start + lengths[active]]
        if zlib.crc32(raw) != crcs[active]:
            raise self._corrupt("the active slot does not match its checksum", None)
        key = (os.getpid(), GENERATION.unpack_from(mapped, GENERATION_OFFSET)[0], active, lengths[active], crcs[active])
        kept = self._parsed
        if kept is not None and kept[0] == key:
            return dict(kept[1])
        data = self._parse(raw, None)
        self._parsed = (key, data)
        return dict(data)

    def _store(self, data: dict[str, dict[str, Any]]) -> None:
        raw = orjson.dumps(data)
        if len(raw) > self.slot_bytes:
            QUOTA_STORE_ERRORS.labels("io").inc()
            raise QuotaUnavailable(f"quota state {self.path}: {len(raw)} bytes do not fit a slot of {self.slot_bytes}")
        mapped = self._map()
        self._parsed = None
        generation = GENERATION.unpack_from(mapped, GENERATION_OFFSET)[0] + 1
        GENERATION.pack_into(mapped, GENERATION_OFFSET, generation)
        magic, active, lengths, crcs = self._header(mapped)
        fresh = magic != MAGIC
        target = 0 if fresh else 1 - active
        start = HEADER_BYTES + target * self.slot_bytes
        mapped[start:start + len(raw)] = raw
        lengths[target], crcs[target] = len(raw), zlib.crc32(raw)
        # The slot and its length and checksum first, under the index still naming the other slot...
        HEADER.pack_into(mapped, 0, MAGIC, target if fresh else active, *lengths, *crcs)
        # ...then the index: one byte, so a reader sees the old state or the new one whole.
        mapped[ACTIVE_OFFSET] = target
        self._parsed = ((os.getpid(), generation, target, lengths[target], crcs[target]), dict(data))
