"""The broker's store as the dispatcher sees it: queues, offsets and bulk batches, read-only.

Everything goes through :mod:`tiered.broker` (files opened ``O_RDONLY``). A batch is read with
one ``pread`` per contiguous commitlog run (:meth:`CommitLog.read_many`), its headers checked
against the consumequeue units with numpy (:func:`~tiered.file.flat_commitlog.check_units`), and
its store times gathered the same way. The broker may delete files at any moment: that surfaces as
:class:`~tiered.errors.OffsetNotInStoreError` / :class:`~tiered.errors.StoreFileNotFoundError`,
which the dispatcher turns into "the local min offset moved".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tiered.broker import coalesce, pagecache
from tiered.broker import consumequeue as cqmod
from tiered.broker import message as msgcodec
from tiered.broker.commitlog import CommitLog
from tiered.config import TieredConfig
from tiered.errors import (
    BrokerStoreError,
    CorruptStoreFileError,
    OffsetNotInStoreError,
    StoreFileNotFoundError,
)
from tiered.file.flat_commitlog import check_units, store_timestamps
from tiered.file.flat_message_file import MessageBatch
from tiered.file.reconcile import LocalUnits

Units = npt.NDArray[np.void]
Int64s = npt.NDArray[np.int64]
_HEADER_BYTES = 96  # enough for the store timestamp behind an IPv6 born host (76 bytes)


@dataclass(frozen=True)
class BatchRequest:
    """Consecutive consumequeue ``units`` of a queue, from ``queue_offset``, to read."""

    topic: str
    queue_id: int
    queue_offset: int
    units: Units


class LocalSource:
    """Read-only view of one broker store (``storePathRootDir`` and its commitlog dirs)."""

    def __init__(self, cfg: TieredConfig) -> None:
        self.root = cfg.store_path_root_dir
        self.commitlog = CommitLog(cfg.commitlog_dirs, cfg.mapped_file_size_commit_log_bytes)
        self.cq_root = cfg.consume_queue_dir
        self.ext_root = self.root / "consumequeue_ext"
        self.cq_file_size = cfg.effective_cq_file_size_bytes
        self._queues: dict[tuple[str, int], cqmod.ConsumeQueue] = {}
        self._max_hint: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self.preads = 0

    def refresh(self) -> None:
        """Re-list the commitlog files (the broker creates and deletes them)."""
        self.commitlog.refresh()

    def queues(self) -> list[tuple[str, int]]:
        """Every ``(topic, queue id)`` with a consumequeue directory (none when there is none)."""
        if not self.cq_root.is_dir():
            return []
        return cqmod.list_queues(self.cq_root)

    def consume_queue(self, topic: str, queue_id: int) -> cqmod.ConsumeQueue:
        """The local consumequeue of a queue."""
        key = (topic, queue_id)
        with self._lock:
            cq = self._queues.get(key)
            if cq is None:
                cq = cqmod.ConsumeQueue.for_queue(
                    self.cq_root, topic, queue_id, file_size=self.cq_file_size
                )
                self._queues[key] = cq
            return cq

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset the broker will write (cheap: scans from the last answer)."""
        key = (topic, queue_id)
        hint = self._max_hint.get(key)
        try:
            value = self.consume_queue(topic, queue_id).max_offset(hint=hint)
        except OffsetNotInStoreError:
            value = self.consume_queue(topic, queue_id).max_offset()
        self._max_hint[key] = value
        return value

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset whose message the broker still has (spec §3.4)."""
        clmin = self.commitlog.min_offset
        return self.consume_queue(topic, queue_id).min_offset(clmin if clmin >= 0 else None)

    def read_units(self, topic: str, queue_id: int, start: int, count: int) -> Units:
        """Up to ``count`` consumequeue units from ``start`` (see ``ConsumeQueue.read_units``)."""
        return self.consume_queue(topic, queue_id).read_units(start, count)

    def units_lookup(self, topic: str, queue_id: int) -> LocalUnits | None:
        """A ``(start, count) -> units`` lookup for reconciliation, or ``None`` if no such queue."""
        if not (self.cq_root / topic / str(queue_id)).is_dir():
            return None

        def lookup(start: int, count: int) -> Units | None:
            try:
                return self.read_units(topic, queue_id, start, count)
            except (OffsetNotInStoreError, StoreFileNotFoundError):
                return None

        return lookup

    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        """Store time of the message at ``queue_offset``; ``None`` if it is not (or no longer)
        there."""
        try:
            unit = self.read_units(topic, queue_id, queue_offset, 1)
            if not len(unit):
                return None
            phys, size = int(unit["offset"][0]), int(unit["size"][0])
            head = self.commitlog.read(phys, min(size, _HEADER_BYTES))
        except (OffsetNotInStoreError, StoreFileNotFoundError, CorruptStoreFileError):
            return None
        return msgcodec.store_timestamp_of(head)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose store time is at or after ``timestamp`` (upstream's
        ``getOffsetInQueueByTime(ts, LOWER)``), clamped to ``[min, max]``: a binary search."""
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            t = self.store_time(topic, queue_id, mid)
            if t is None or t < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def read_batches(self, requests: list[BatchRequest]) -> list[MessageBatch | BrokerStoreError]:
        """The batches of many queues at once: one pread per commitlog range (see
        :mod:`tiered.broker.coalesce`), then each batch's units gathered in queue order, checked
        against their consumequeue units and timestamped. A batch whose bytes could not be read
        (the broker deleted the file) or do not match its units is an error in its place."""
        if not requests:
            return []
        offs = [r.units["offset"].astype(np.int64) for r in requests]
        sizes = [r.units["size"].astype(np.int64) for r in requests]
        got = coalesce.gather(self.commitlog, offs, sizes)
        self.preads += got.calls
        out: list[MessageBatch | BrokerStoreError] = []
        for r, data, error, o, z in zip(requests, got.data, got.errors, offs, sizes, strict=True):
            if error is not None:
                out.append(error)
                continue
            try:
                out.append(self._batch(r, data, o, z))
            except BrokerStoreError as e:
                out.append(e)
        return out

    def _batch(self, r: BatchRequest, data: bytearray, offs: Int64s, sizes: Int64s) -> MessageBatch:
        starts = np.zeros(len(sizes), dtype=np.int64)
        if len(sizes) > 1:
            np.cumsum(sizes[:-1], out=starts[1:])
        queue_offsets = r.queue_offset + np.arange(len(sizes), dtype=np.int64)
        good = check_units(data, starts, sizes, queue_offsets, offs)
        if good < len(sizes):
            raise CorruptStoreFileError(
                f"{r.topic}/{r.queue_id} queue offset {r.queue_offset + good}: the message at "
                f"physical offset {int(offs[good])} does not match its consumequeue unit (size "
                f"{int(sizes[good])}); the broker may be rewriting it, retried next round",
                offset=int(offs[good]),
            )
        tags = r.units["tags_code"].astype(np.int64)
        ext = cqmod.is_ext_tags_code(tags)
        if ext.any():
            ext_queue = cqmod.ConsumeQueueExt(self.ext_root / r.topic / str(r.queue_id))
            tags[ext], _ = ext_queue.lookup(tags[ext])
        return MessageBatch(
            queue_offset=r.queue_offset,
            data=data,
            starts=starts,
            sizes=sizes,
            tags_codes=tags,
            timestamps=store_timestamps(data, starts),
        )

    def release(self, start: int, end: int) -> int:
        """Drop the page cache of physical range ``[start, end)`` (see :mod:`.pagecache`)."""
        return pagecache.release(self.commitlog, start, end)

    @property
    def path(self) -> Path:
        """The store root."""
        return self.root
