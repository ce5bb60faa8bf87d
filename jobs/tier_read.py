"""Reading one partition of the tier (an executor's side of :mod:`tiered.jobs.tier_scan`): the
run's consumequeue read forward, the commitlog in windows, every unit checked and decoded into
Arrow batches by the kernel (:mod:`tiered.jobs.tier_decode`)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from tiered.jobs.tier_decode import decode_read
from tiered.jobs.tier_scan import DEFAULT_READ_BYTES
from tiered.jobs.tier_scan import Bounds
from tiered.jobs.tier_scan import Partition
from tiered.jobs.tier_scan import QueueTier
from tiered.jobs.tier_scan import Seg
from tiered.jobs.tier_scan import cq_units
from tiered.providers import Provider
from tiered.providers.layout import FileType

from tiered.broker import message as msgcodec
from tiered.broker.unit_fields import as_uint8
from tiered.broker.unit_fields import gather_be
from tiered.errors import ConfigError
from tiered.errors import IntegrityError

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]

_HEAD: Final = 96  # enough for the store timestamp behind an IPv6 born host
_GAP: Final = 1 << 20  # key hits closer than this in one segment are read in one go


@dataclass
class ReadStats:
    """What one task read: ranged reads, objects, bytes, messages out and skipped."""

    reads: int = 0
    bytes: int = 0
    objects: set[str] = field(default_factory=set)
    requests: int = 0
    messages: int = 0
    skipped: int = 0
    seconds: float = 0.0

    def as_json(self, partition: str) -> dict[str, Any]:
        return {
            "partition": partition,
            "reads": self.reads,
            "bytes": self.bytes,
            "objects": sorted(self.objects),
            "requests": self.requests,
            "messages": self.messages,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
        }


class PartitionReader:
    """Reads partitions of one broker's tier into Arrow batches (an executor's side).

    The run's consumequeue is read forward in a few growing ranged reads, each segment narrowed
    by queue offset and, when the time window clips it, by a binary search on store times; the
    commitlog is read in windows of ``read_bytes``, one ranged read each. Every unit is checked
    (TOTALSIZE, magic, queue and flat offsets, field lengths, body CRC); a damaged unit fails the
    task naming the object and offset, or with ``on_corrupt="skip"`` is counted and skipped."""

    def __init__(
        self,
        provider: Provider,
        columns: Sequence[str],
        *,
        on_corrupt: str = "fail",
        read_bytes: int = DEFAULT_READ_BYTES,
    ):
        if on_corrupt not in ("fail", "skip"):
            raise ConfigError(f"option onCorrupt={on_corrupt!r}: give fail or skip")
        self.provider = provider
        self.columns = list(columns)
        self.on_corrupt = on_corrupt
        self.read_bytes = read_bytes
        self.stats = ReadStats()
        provider.add_request_listener(self._count)

    def close(self) -> None:
        """Stop counting the provider's requests (the provider stays open: it is the caller's)."""
        self.provider.remove_request_listener(self._count)

    def _count(self, operation: str) -> None:
        self.stats.requests += 1

    def _read(self, key: str, position: int, length: int) -> bytes:
        data = self.provider.read(key, position, length)
        self.stats.reads += 1
        self.stats.bytes += len(data)
        self.stats.objects.add(key)
        return data

    # -- consumequeue ----------------------------------------------------------------------------

    def cq_units(self, q: QueueTier, start: int, count: int) -> npt.NDArray[Any]:
        """Units ``[start, start + count)`` of the queue's consumequeue (fewer at its end)."""
        return cq_units(self._read, q, start, count)

    def _first_queue_offset(self, q: QueueTier, seg: Seg, key: str) -> int:
        """The queue offset of the segment's first message (a small read of its header)."""
        head = self._read(key, 0, min(seg.size, _HEAD))
        if len(head) < msgcodec.MIN_UNIT_SIZE:
            raise self._damaged(q, key, seg.base, "segment shorter than a message")
        return int(gather_be(as_uint8(head), np.array([msgcodec.QUEUE_OFFSET_POSITION]), 8)[0])

    def _store_time(self, key: str, base: int, offset: int) -> int:
        head = self._read(key, offset - base, _HEAD)
        return msgcodec.store_timestamp_of(head)

    def _lower_bound(self, key: str, base: int, offs: Int64s, lo: int, hi: int, t: int) -> int:
        """The first index in ``[lo, hi)`` whose message was stored at or after ``t`` (store
        times ascend along a queue: the broker stamps them under its append lock)."""
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_time(key, base, int(offs[mid])) < t:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def read(self, part: Partition) -> Iterator[pa.RecordBatch]:
        """The partition's messages that pass its bounds, a batch per ranged read."""
        started = time.perf_counter()
        try:
            if part.hits:
                yield from self._read_hits(part)
            else:
                yield from self._read_segments(part)
        finally:
            self.stats.seconds += time.perf_counter() - started

    def _read_segments(self, part: Partition) -> Iterator[pa.RecordBatch]:
        q = part.queue
        cursor = _CqCursor(self, q)
        for i in part.segments:
            seg = q.commitlog[i]
            key = q.key(FileType.COMMIT_LOG, seg.base)
            first = cursor.next_q
            if first is None or cursor.next_flat != seg.base:  # no consumequeue read yet
                first = self._first_queue_offset(q, seg, key)
            offs, sizes = cursor.take(first, seg)
            if len(offs) and int(offs[0]) != seg.base:
                raise self._damaged(
                    q, key, seg.base, f"the consumequeue puts queue offset {first} at flat "
                    f"offset {int(offs[0])}, not at the segment's start",
                )  # fmt: skip
            yield from self._read_segment(part, seg, key, first, offs, sizes)

    def _read_segment(
        self, part: Partition, seg: Seg, key: str, first: int, offs: Int64s, sizes: Int64s
    ) -> Iterator[pa.RecordBatch]:
        b = part.bounds
        lo, hi = 0, len(offs)
        if part.pieces > 1:  # this piece's bytes of the segment
            cut = seg.base + np.array([part.piece, part.piece + 1]) * seg.size // part.pieces
            lo, hi = (int(x) for x in np.searchsorted(offs, cut, side="left"))
        lo = max(lo, min(hi, b.q_lo - first))
        hi = min(hi, max(lo, b.q_hi - first))
        if lo < hi and b.t_lo > seg.begin:
            lo = self._lower_bound(key, seg.base, offs, lo, hi, b.t_lo)
        if lo < hi and b.t_hi <= seg.end:
            hi = self._lower_bound(key, seg.base, offs, lo, hi, b.t_hi)
        ends = offs + sizes
        while lo < hi:
            limit = int(offs[lo]) + self.read_bytes
            n = max(1, int(np.searchsorted(ends[lo:hi], limit, side="right")))
            a, z = int(offs[lo]), int(offs[lo + n - 1] + sizes[lo + n - 1])
            data = self._read(key, a - seg.base, z - a)
            batch = self._batch(
                part, key, data, offs[lo : lo + n] - a, sizes[lo : lo + n], first + lo, offs[lo:]
            )
            if batch is not None and batch.num_rows:
                yield batch
            lo += n

    def _read_hits(self, part: Partition) -> Iterator[pa.RecordBatch]:
        q = part.queue
        hits = np.array(part.hits, dtype=np.int64).reshape(-1, 2)
        bases = np.array([s.base for s in q.commitlog], dtype=np.int64)
        seg_of = np.searchsorted(bases, hits[:, 0], side="right") - 1
        i = 0
        while i < len(hits):
            s = int(seg_of[i])
            j = i + 1
            while (
                j < len(hits)
                and seg_of[j] == s
                and hits[j, 0] - (hits[j - 1, 0] + hits[j - 1, 1]) < _GAP
            ):
                j += 1
            if s < 0:
                i = j
                continue  # expired from the tier since the index was written
            seg = q.commitlog[s]
            key = q.key(FileType.COMMIT_LOG, seg.base)
            offs, sizes = hits[i:j, 0], hits[i:j, 1]
            inside = offs + sizes <= seg.base + seg.size
            offs, sizes = offs[inside], sizes[inside]
            if len(offs):
                a, z = int(offs[0]), int(offs[-1] + sizes[-1])
                data = self._read(key, a - seg.base, z - a)
                batch = self._batch(part, key, data, offs - a, sizes, None, offs)
                if batch is not None and batch.num_rows:
                    yield batch
            i = j

    def _damaged(self, q: QueueTier, key: str, offset: int, what: str) -> IntegrityError:
        return IntegrityError(
            f"{q.broker}/{q.topic}/{q.queue_id}: {what} at flat commitlog offset {offset} "
            f"(object {key}); the tier copy is damaged",
            key=key,
            offset=offset,
        )

    def _batch(
        self,
        part: Partition,
        key: str,
        data: bytes,
        rel: Int64s,
        sizes: Int64s,
        first_q: int | None,
        flat: Int64s,
    ) -> pa.RecordBatch | None:
        """Check the units at ``rel`` of ``data``, drop what the bounds exclude, decode (one
        kernel call: :func:`tiered.jobs.tier_decode.decode_read`)."""
        q, b = part.queue, part.bounds
        columns = list(self.columns)
        if b.keys is not None or b.uniq_keys is not None:
            columns += [c for c in ("keys", "uniqKey") if c not in columns]
        flat = flat[: len(rel)]
        got = decode_read(
            data, rel, sizes, flat, columns,
            first_queue_offset=first_q, bounds=(b.q_lo, b.q_hi, b.t_lo, b.t_hi),
            topic=q.topic, broker=q.broker, cluster=q.cluster,
            where=lambda i: f"object {key} flat offset {int(flat[i])}",
        )  # fmt: skip
        bad = got.damaged
        if bad.size:
            self._corrupt(q, key, flat[bad], got.queue_offsets[bad], got.verdicts[bad])
        batch = got.batch
        if not batch.num_rows:
            return None
        if b.keys is not None or b.uniq_keys is not None:
            batch = _key_filter(batch, b).select(self.columns)
        self.stats.messages += batch.num_rows
        return batch

    def _corrupt(
        self, q: QueueTier, key: str, flat: Int64s, qoffs: Int64s, why: npt.NDArray[np.uint8]
    ) -> None:
        where = ", ".join(
            f"queue offset {int(a)} at flat offset {int(f)}: {_WHY[int(w)]}"
            for a, f, w in zip(qoffs[:5], flat[:5], why[:5], strict=True)
        )
        if self.on_corrupt == "fail":
            raise IntegrityError(
                f"{q.broker}/{q.topic}/{q.queue_id}: {len(flat)} damaged message(s) in object "
                f"{key} ({where}); the tier copy is damaged (option onCorrupt=skip reads past "
                "them)",
                key=key,
                offset=int(flat[0]),
            )
        self.stats.skipped += len(flat)
        log.warning("skipped %d damaged message(s) in %s (onCorrupt=skip): %s",
                    len(flat), key, where)  # fmt: skip

    def write_stats(self, directory: str | None, partition: str) -> None:
        """Append what this reader read to ``directory`` (one JSON file per task)."""
        if not directory:
            return
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        name = path / f"task-{uuid.uuid4().hex}.json"
        name.write_text(json.dumps(self.stats.as_json(partition)), encoding="utf-8")


_WHY: Final = (  # by verdict (tiered.jobs.tier_decode: BAD_HEADER, BAD_LENGTHS, BAD_CRC)
    "damaged",
    "its header disagrees with its consumequeue unit (TOTALSIZE, magic or offsets)",
    "its field lengths do not add up to TOTALSIZE",
    "body CRC mismatch",
)


class _CqCursor:
    """Reads one queue's consumequeue forward for a run of segments: growing chunks, what one
    segment's read ran past kept for the next segment."""

    def __init__(self, reader: PartitionReader, q: QueueTier) -> None:
        self.reader, self.q = reader, q
        self.at = -1  # the next queue offset to read
        self.offs = np.zeros(0, np.int64)  # units read, not yet taken (from queue offset start)
        self.sizes = np.zeros(0, np.int64)
        self.start = -1
        self.chunk = 0

    @property
    def next_q(self) -> int | None:
        """The queue offset the next segment starts at, when known."""
        return self.start if self.start >= 0 else None

    @property
    def next_flat(self) -> int:
        """The flat offset of the first unit read and not taken (-1: none)."""
        return int(self.offs[0]) if len(self.offs) else -1

    def take(self, first: int, seg: Seg) -> tuple[Int64s, Int64s]:
        """The units of ``seg``, which starts at queue offset ``first``."""
        if first != self.start:
            self.start, self.at = first, first
            self.offs = self.sizes = np.zeros(0, np.int64)
        if not self.chunk:
            self.chunk = max(1024, min(seg.size // 512, 262144))
        end = seg.base + seg.size
        while not (len(self.offs) and self.offs[-1] >= end) and self.at < self.q.cq_end:
            units = self.reader.cq_units(self.q, self.at, self.chunk)
            if not len(units):
                break
            self.offs = np.concatenate([self.offs, units["offset"].astype(np.int64)])
            self.sizes = np.concatenate([self.sizes, units["size"].astype(np.int64)])
            self.at += len(units)
            self.chunk = min(self.chunk * 2, 1 << 20)
        inside = int(np.searchsorted(self.offs, end, side="left"))
        offs, sizes = self.offs[:inside], self.sizes[:inside]
        self.offs, self.sizes = self.offs[inside:], self.sizes[inside:]
        self.start += inside
        return offs, sizes


def _key_filter(batch: pa.RecordBatch, b: Bounds) -> pa.RecordBatch:
    """Rows whose UNIQ_KEY (or, for a key bound, a KEYS token) is one of the wanted keys."""
    keep = pa.array(np.ones(batch.num_rows, dtype=bool))
    uniq = batch.column("uniqKey")
    if b.uniq_keys is not None:
        keep = pc.and_(keep, pc.fill_null(pc.is_in(uniq, pa.array(sorted(b.uniq_keys))), False))
    if b.keys is not None:
        wanted = pa.array(sorted(b.keys))
        keys = batch.column("keys")
        parents = pc.list_parent_indices(keys).to_numpy()
        hit = pc.is_in(pc.list_flatten(keys), wanted).to_numpy(zero_copy_only=False)
        in_keys = np.zeros(batch.num_rows, dtype=bool)
        in_keys[parents[hit]] = True
        by_uniq = pc.fill_null(pc.is_in(uniq, wanted), False).to_numpy(zero_copy_only=False)
        keep = pc.and_(keep, pa.array(in_keys | by_uniq))
    return batch.filter(keep)
