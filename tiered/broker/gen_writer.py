"""Where the store generator's units go: the commitlog files, then the consumequeues.

:class:`CommitLogWriter` appends units to pre-sized commitlog files, rolling with a BLANK like the
broker; :class:`UnitSink` gives each unit its queue offset and physical offset (patched into the
encoded bytes), remembers its consumequeue unit, index keys and store time, and at the end writes
every queue's consumequeue files (:meth:`UnitSink.write_consume_queues`).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tiered.broker import consumequeue
from tiered.broker import message as msgcodec

_FLUSH_BYTES = 8 << 20
_QOFF_PHYS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET (bytes 20..35)


class CommitLogWriter:
    """Appends units to pre-sized commitlog files, rolling with a BLANK like the broker."""

    def __init__(self, directory: Path, file_size: int, offset: int):
        self.dir = directory
        self.file_size = file_size
        self.offset = offset
        self.fd = -1
        self.file_base = -1
        self.buf = bytearray()
        self.buf_at = offset
        self._open(offset - offset % file_size)

    def _open(self, base: int) -> None:
        path = self.dir / f"{base:020d}"
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size < self.file_size:
            os.ftruncate(self.fd, self.file_size)
        self.file_base = base

    def _flush(self) -> None:
        if self.buf:
            os.pwrite(self.fd, self.buf, self.buf_at - self.file_base)
        self.buf.clear()
        self.buf_at = self.offset

    def reserve(self, size: int) -> int:
        """The physical offset ``size`` bytes of units will start at (rolling the file if they
        and a BLANK header do not fit: a batch is never split across files)."""
        remaining = self.file_base + self.file_size - self.offset
        if size + msgcodec.BLANK_HEADER_SIZE > remaining:
            self.buf += msgcodec.blank_unit(remaining)
            self.offset += remaining
            self._flush()
            os.close(self.fd)
            self._open(self.offset)
        return self.offset

    def write(self, unit: bytes | bytearray) -> None:
        """Append a unit at the reserved offset."""
        self.buf += unit
        self.offset += len(unit)
        if len(self.buf) >= _FLUSH_BYTES:
            self._flush()

    def close(self) -> None:
        """Flush and close the current file."""
        self._flush()
        os.close(self.fd)


@dataclass(slots=True)
class UnitSink:
    """Writes units and remembers, per unit: queue, queue offset, physical offset, size, tag
    code, store time; per index key: (topic, key, unit number)."""

    writer: CommitLogWriter
    next_offsets: dict[tuple[str, int], int]
    manifest: dict[tuple[str, int, int], tuple[str, str]] | None = None
    index: bool = True  # keep the index keys
    queue_ids: dict[tuple[str, int], int] = field(default_factory=dict)
    queue_l: list[int] = field(default_factory=list)
    qoff_l: list[int] = field(default_factory=list)
    phys_l: list[int] = field(default_factory=list)
    sizes_l: list[int] = field(default_factory=list)
    tags_l: list[int] = field(default_factory=list)
    store_l: list[int] = field(default_factory=list)
    index_keys: list[tuple[str, str, int]] = field(default_factory=list)
    last_store_ms: int = 0

    def put(
        self,
        unit: bytearray,
        topic: str,
        queue_id: int,
        tag_code: int,
        store_ms: int,
        keys: Sequence[str] = (),
        sent: bytes = b"",
    ) -> tuple[int, int]:
        """Write one encoded unit of ``topic``/``queue_id``; returns (physical, queue offset).

        ``keys`` are indexed under ``topic`` (UNIQ_KEY first, then the KEYS tokens); ``sent`` is
        the body the producer sent (for the manifest)."""
        pos = self.writer.reserve(len(unit))
        return self._append(unit, (topic, queue_id), pos, tag_code, store_ms, keys, sent)

    def put_batch(
        self,
        units: Sequence[bytearray],
        topic: str,
        queue_id: int,
        tag_codes: Sequence[int],
        store_ms: int,
        keys: Sequence[Sequence[str]],
        sent: Sequence[bytes],
    ) -> list[tuple[int, int]]:
        """Write ``units`` back to back in one queue, as the broker stores a batch: in one file
        (a BLANK first if they do not all fit), at consecutive queue offsets."""
        pos = self.writer.reserve(sum(len(u) for u in units))
        out = []
        queue = (topic, queue_id)
        for unit, code, unit_keys, body in zip(units, tag_codes, keys, sent, strict=True):
            out.append(self._append(unit, queue, pos, code, store_ms, unit_keys, body))
            pos += len(unit)
        return out

    def _append(
        self,
        unit: bytearray,
        queue: tuple[str, int],
        pos: int,
        tag_code: int,
        store_ms: int,
        keys: Sequence[str],
        sent: bytes,
    ) -> tuple[int, int]:
        off = self.next_offsets.get(queue, 0)
        self.next_offsets[queue] = off + 1
        _QOFF_PHYS.pack_into(unit, msgcodec.QUEUE_OFFSET_POSITION, off, pos)
        self.writer.write(unit)
        if self.manifest is not None:
            self.manifest[(*queue, off)] = (
                hashlib.sha256(unit).hexdigest(),
                hashlib.sha256(sent).hexdigest(),
            )
        if keys and self.index:
            number = len(self.phys_l)
            self.index_keys.extend((queue[0], k, number) for k in keys)
        qidx = self.queue_ids.get(queue)
        if qidx is None:
            qidx = self.queue_ids[queue] = len(self.queue_ids)
        self.queue_l.append(qidx)
        self.qoff_l.append(off)
        self.phys_l.append(pos)
        self.sizes_l.append(len(unit))
        self.tags_l.append(tag_code)
        self.store_l.append(store_ms)
        self.last_store_ms = max(self.last_store_ms, store_ms)
        return pos, off

    @property
    def phys(self) -> npt.NDArray[np.int64]:
        """Physical offset of every unit, in write order."""
        return np.array(self.phys_l, dtype=np.int64)

    @property
    def store_ms(self) -> npt.NDArray[np.int64]:
        """Store time of every unit, in write order."""
        return np.array(self.store_l, dtype=np.int64)

    @property
    def total_bytes(self) -> int:
        """Commitlog bytes of the units (BLANKs excluded)."""
        return sum(self.sizes_l)

    def write_consume_queues(
        self, root: Path, cq_file_entries: int, empty: Sequence[tuple[str, int]] = ()
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """Write the units into ``root/consumequeue`` (files of ``cq_file_entries`` units), also
        making the directories of the ``empty`` queues; returns each written queue's new
        [first, end) offsets."""
        for topic, qid in empty:
            (root / "consumequeue" / topic / str(qid)).mkdir(parents=True, exist_ok=True)
        written: dict[tuple[str, int], tuple[int, int]] = {}
        if not self.phys_l:
            return written
        queue = np.array(self.queue_l, dtype=np.int64)
        qoff = np.array(self.qoff_l, dtype=np.int64)
        phys = self.phys
        sizes = np.array(self.sizes_l, dtype=np.int32)
        tcodes = np.array(self.tags_l, dtype=np.int64)
        for (topic, qid), q in self.queue_ids.items():
            idx = np.flatnonzero(queue == q)
            d = root / "consumequeue" / topic / str(qid)
            d.mkdir(parents=True, exist_ok=True)
            data = consumequeue.encode_units(phys[idx], sizes[idx], tcodes[idx])
            _write_cq_data(d, data, int(qoff[idx[0]]), cq_file_entries)
            written[(topic, qid)] = (int(qoff[idx[0]]), int(qoff[idx[-1]]) + 1)
        return written


def _write_cq_data(d: Path, data: bytes, first: int, cq_file_entries: int) -> None:
    file_bytes = cq_file_entries * consumequeue.CQ_UNIT_SIZE
    byte_at = first * consumequeue.CQ_UNIT_SIZE
    done = 0
    while done < len(data):
        base = (byte_at + done) // file_bytes * file_bytes
        pos = byte_at + done - base
        chunk = data[done : done + file_bytes - pos]
        fd = os.open(d / f"{base:020d}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < file_bytes:
                os.ftruncate(fd, file_bytes)
            os.pwrite(fd, chunk, pos)
        finally:
            os.close(fd)
        done += len(chunk)
