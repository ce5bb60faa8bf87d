"""The broker's store as the dispatcher sees it: queues, offsets and bulk batches, read-only.

Everything goes through :mod:`tiered.broker` (files opened ``O_RDONLY``). A batch is read with
one ``pread`` per contiguous commitlog run (:meth:`CommitLog.read_many`), its headers checked
against the consumequeue units and its store times gathered in one compiled pass
(:func:`~tiered.broker.unit_fields.check_batch`). The broker may delete files at any moment:
that surfaces as :class:`~tiered.errors.OffsetNotInStoreError` /
:class:`~tiered.errors.StoreFileNotFoundError`, which the dispatcher turns into "the local min
offset moved".

The read path (:class:`~tiered.read.message_store.TieredMessageStore`) asks the same view whether an
offset is still on the broker's disk (:meth:`LocalSource.in_store`), whether its commitlog bytes
are in the page cache (:meth:`LocalSource.residency`), and reads runs of messages with the same
coalesced reads (:meth:`LocalSource.read`).
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tiered.broker import coalesce
from tiered.broker import consumequeue as cqmod
from tiered.broker import message as msgcodec
from tiered.broker import page_cache
from tiered.broker.commitlog import CommitLog
from tiered.broker.cq_bounds import queue_bounds
from tiered.broker.cq_bounds import start_many_bounds
from tiered.broker.page_cache import Residency
from tiered.broker.page_cache import residency
from tiered.broker.read_only import open_sized
from tiered.broker.read_only import pread_exact
from tiered.broker.read_only import read_sized_part
from tiered.broker.store_layout import mapped_sizes
from tiered.broker.store_layout import sizes_found
from tiered.broker.unit_fields import check_batch
from tiered.broker.unit_fields import check_batches
from tiered.broker.unit_fields import int_min
from tiered.config import TieredConfig
from tiered.errors import BrokerStoreError
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.errors import StoreFileNotFoundError
from tiered.file.flat_message_file import MessageBatch
from tiered.file.restart_reconcile import LocalUnits
from tiered.process import native
from tiered.source.batch_request import HEADER_BYTES
from tiered.source.batch_request import NO_UNIT
from tiered.source.batch_request import BatchRequest
from tiered.source.batch_request import first_after
from tiered.source.batch_request import head_time
from tiered.source.listing import Listing

Units = npt.NDArray[np.void]
Int64s = npt.NDArray[np.int64]
Key = tuple[str, int]
MIN_OFFSET_TTL_S = 1.0
"""How long the read path reuses a queue's local min offset (it scans the first CQ file)."""
CQ_HANDLES = 4096
"""Local consumequeue handles kept (the queues used last)."""
REFRESH_S = 1.0
"""The read path re-lists the commitlog files when the listing is older than this."""
RESIZE_S = 1.0
"""While a new broker has written no file to tell the mapped file sizes, look this often."""
HAS_QUEUE_TTL_S = 1.0
"""How long a queue directory once seen is taken to exist (the broker removes a topic rarely)."""
TAIL_CHUNK_UNITS = 512
"""A live queue's max offset is found by reading its last file from the previous answer in
chunks growing 4x from this many units (a second of a busy queue's units in the first)."""
SCAN_AHEAD_QUEUES = 64
"""Queues planned at once from which :meth:`LocalSource.scanned_ahead` reads their max offsets
with one call of the kernel (fewer are read one by one)."""
SCAN_AHEAD_KEPT_UNITS = 65
"""Units from its last answer a queue keeps from that call (a tailed queue's few new ones; a
busy queue's batch is read when planned, and a wave holds at most 1.3 KB a queue)."""
SCAN_THREADS = min(len(os.sched_getaffinity(0)), 4)
"""Threads of that call (system calls on a warm page cache: a thread per core, at most 4)."""


@dataclass(slots=True, eq=False)  # arrays: no value equality
class UncheckedBatch:
    """A batch's bytes as :meth:`LocalSource.read_unchecked` read them, not yet checked against
    its consumequeue units: the dispatcher's worker that uploads it checks it (the check runs
    without the interpreter lock, beside the next round's read)."""

    source: LocalSource
    request: BatchRequest
    data: bytearray
    offsets: Int64s
    sizes: Int64s

    def check(self) -> MessageBatch:
        """The batch, its units checked and timestamped (``CorruptStoreFileError``: a message
        does not match its consumequeue unit)."""
        return self.source._batch(self.request, self.data, self.offsets, self.sizes)


def _mismatch(r: BatchRequest, good: int, offs: Int64s, sizes: Int64s) -> CorruptStoreFileError:
    """The error of a batch whose unit ``good`` does not match its consumequeue unit."""
    return CorruptStoreFileError(
        f"{r.topic}/{r.queue_id} queue offset {r.queue_offset + good}: the message at "
        f"physical offset {int(offs[good])} does not match its consumequeue unit (size "
        f"{int(sizes[good])}); the broker may be rewriting it, retried next round",
        offset=int(offs[good]),
    )


class LocalSource:
    """Read-only view of one broker store (``storePathRootDir`` and its commitlog dirs)."""

    def __init__(self, cfg: TieredConfig) -> None:
        self.root = cfg.store_path_root_dir
        explicit = cfg.model_fields_set
        self._configured_sizes = {
            "commitlog": (
                cfg.mapped_file_size_commit_log_bytes,
                "mapped_file_size_commit_log_bytes" in explicit,
            ),
            "consume_queue": (
                cfg.effective_cq_file_size_bytes,
                "mapped_file_size_consume_queue_bytes" in explicit,
            ),
        }
        cl_size, cq_size = mapped_sizes(
            cfg.commitlog_dirs, cfg.consume_queue_dir, **self._configured_sizes
        )
        self._unsized = not all(sizes_found(cfg.commitlog_dirs, cfg.consume_queue_dir))
        """No file told a size yet (a new broker): looked at again by :meth:`refresh`."""
        self._sized_at = time.monotonic()
        self.commitlog = CommitLog(cfg.commitlog_dirs, cl_size)
        self.cq_root = cfg.consume_queue_dir
        self.ext_root = self.root / "consumequeue_ext"
        self.cq_file_size = cq_size
        self._queues: OrderedDict[tuple[str, int], cqmod.ConsumeQueue] = OrderedDict()
        """Consumequeue handles: the :data:`CQ_HANDLES` used last (not one per queue at rest)."""
        self._max_hint: dict[tuple[str, int], int] = {}
        self._tail: dict[tuple[str, int], tuple[int, Units]] = {}
        """Per queue: the units the last max offset scan found past its previous answer."""
        self._live: set[tuple[str, int]] = set()
        """Queues whose last max offset scan found new units."""
        self._scanned: dict[tuple[str, int], int] = {}  # scanned_ahead's, each answered once
        self._learned: dict[tuple[str, int], int] = {}  # max offsets learn_bounds just read
        self._known_times = (NO_UNIT, NO_UNIT)
        """Store times the commitlog feed read: (commitlog offsets, times)."""
        self._min_memo: dict[tuple[str, int], tuple[float, int, int]] = {}
        self._has_memo: dict[tuple[str, int], float] = {}
        self._listed = time.monotonic()
        self._lock = threading.Lock()
        self.preads = 0
        self._commitlog_dirs = Listing()
        self._queue_dirs = Listing()
        self._queues_listed: list[tuple[str, int]] = []

    def refresh(self) -> None:
        """Re-list the commitlog files (the broker creates and deletes them) -- unless their
        directories' mtimes say nothing was created or deleted since the last listing. While no
        file has told the mapped file sizes (a new, empty broker store), look for them (at most
        every :data:`RESIZE_S`)."""
        self._listed = time.monotonic()
        if self._unsized and self._listed - self._sized_at >= RESIZE_S:
            self._learn_sizes()
        if self._commitlog_dirs.holds():
            return
        self.commitlog.refresh()
        files = self.commitlog.files
        last = [str(files[-1].path)] if files else []  # a file the broker still extends
        self._commitlog_dirs.listed([str(d) for d in self.commitlog.dirs], last)

    def _learn_sizes(self) -> None:
        """Take the mapped file sizes from the files the broker has written since the start
        (the configured or default sizes were assumed until then)."""
        self._sized_at = time.monotonic()
        dirs, cq_dir = self.commitlog.dirs, self.cq_root
        found = sizes_found(dirs, cq_dir)
        if not any(found):
            return
        cl_size, cq_size = mapped_sizes(dirs, cq_dir, **self._configured_sizes)
        self._unsized = not all(found)
        with self._lock:
            self.commitlog.file_size = cl_size
            if cq_size != self.cq_file_size:
                self.cq_file_size = cq_size
                self._queues.clear()  # built with the size assumed before
                self._max_hint.clear()
                self._tail.clear()
                self._live.clear()
        self._commitlog_dirs = Listing()  # list again

    def _fresh(self) -> None:
        """Re-list the commitlog files if the listing is older than :data:`REFRESH_S`."""
        if time.monotonic() - self._listed > REFRESH_S:
            self.refresh()

    def queues(self) -> list[tuple[str, int]]:
        """Every ``(topic, queue id)`` with a consumequeue directory (none when there is none)."""
        if self._queue_dirs.holds():  # no topic or queue directory came or went
            return list(self._queues_listed)
        if not self.cq_root.is_dir():
            return []
        found = cqmod.list_queues(self.cq_root)
        self._queues_listed = found
        root = str(self.cq_root)
        with os.scandir(root) as entries:
            topics = sorted(e.path for e in entries if e.is_dir())
        self._queue_dirs.listed([root, *topics])
        return list(found)

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
                if len(self._queues) > CQ_HANDLES:
                    self._queues.popitem(last=False)
            else:
                self._queues.move_to_end(key)
            return cq

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset the broker will write (cheap: scans from the last answer, or
        answers what :meth:`scanned_ahead` read); -1 for an unknown queue."""
        key = (topic, queue_id)
        found = self._scanned.pop(key, None)
        if found is not None:  # (its file was opened by name: the queue is there)
            self._max_hint[key] = found
            return found
        if not self.has_queue(topic, queue_id):
            return -1
        hint = self._max_hint.get(key)
        self._tail.pop(key, None)
        if hint is not None:
            found = self._scan_from(topic, queue_id, hint)
            if found is not None:
                self._max_hint[key] = found
                return found
        try:
            value = self.consume_queue(topic, queue_id).max_offset(hint=hint)
        except OffsetNotInStoreError:
            value = self.consume_queue(topic, queue_id).max_offset()
        self._max_hint[key] = value
        return value

    def _cq_file(self, topic: str, queue_id: int, offset: int) -> tuple[str, int, int]:
        """``(path, first queue offset, units)`` of the consumequeue file that would hold
        ``offset``, by name (no listing)."""
        per_file = cqmod.effective_cq_file_size(self.cq_file_size) // cqmod.CQ_UNIT_SIZE
        base = offset - offset % per_file
        return (
            f"{self.cq_root}/{topic}/{queue_id}/{base * cqmod.CQ_UNIT_SIZE:020d}",
            base,
            per_file,
        )

    def _scan_from(self, topic: str, queue_id: int, hint: int) -> int | None:
        """The max offset found by reading on from ``hint`` (the last answer) in the file that
        holds it, without listing the queue's directory (a listing per queue per dispatch pass
        costs more than the scan); ``None`` when only the listing can tell: ``hint`` is at a file's
        start (is there a next file yet?), the file is full, gone or not of the configured
        size. A queue with nothing new costs one 20-byte read; a queue that had new units at the
        last scan is read from ``hint`` with a chunk at once (one read, not two, while it is
        live). The units found from ``hint`` in the first read or chunk are kept for
        :meth:`tail_units`."""
        path, base, per_file = self._cq_file(topic, queue_id, hint)
        pos = hint - base
        if pos == 0 and hint:
            return None
        fd = open_sized(path, per_file * cqmod.CQ_UNIT_SIZE)
        if fd is None:
            return None
        try:  # one open for the probe and the chunks after it
            return self._scan_open(fd, (topic, queue_id), hint, base, per_file)
        finally:
            os.close(fd)

    def _scan_open(
        self, fd: int, key: tuple[str, int], hint: int, base: int, per_file: int
    ) -> int | None:
        """:meth:`_scan_from` in the consumequeue file open as ``fd`` (of ``per_file`` units,
        the first at queue offset ``base``)."""
        pos = hint - base
        unit = cqmod.CQ_UNIT_SIZE
        n = min(1 + TAIL_CHUNK_UNITS, per_file - pos) if key in self._live else 1
        head = pread_exact(fd, pos * unit, n * unit)
        if head is None:
            return None
        offset, size = _OFFSET_SIZE.unpack_from(head)
        if offset < 0 or size <= 0:  # not written yet (the broker's recovery test)
            self._live.discard(key)
            return hint
        self._live.add(key)
        chunk = TAIL_CHUNK_UNITS
        if n > 1:  # the unit at hint and a chunk after it: the end may be in it
            units = cqmod.decode_units(head)
            k = cqmod.first_invalid(units)
            self._tail[key] = (hint, units[:k].copy())  # (not the chunk's buffer: kept)
            if k < n:
                return hint + k
            head, chunk = b"", 4 * TAIL_CHUNK_UNITS
        pos += n
        while pos < per_file:
            n = min(chunk, per_file - pos)
            raw = pread_exact(fd, pos * unit, n * unit)
            if raw is None:
                return None
            units = cqmod.decode_units(head + raw)
            k = cqmod.first_invalid(units) - len(head) // unit
            if head:  # the probe's unit and this chunk's
                self._tail[key] = (hint, units[: len(head) // unit + k].copy())
            if k < n:
                return base + pos + k
            head = b""
            pos += n
            chunk *= 4
        return None

    @contextlib.contextmanager
    def scanned_ahead(
        self, queues: Sequence[tuple[str, int]], starts: Sequence[int] | None = None
    ) -> Iterator[None]:
        """Within the block, the first :meth:`max_offset` of each of ``queues`` answers what
        one call of the kernel read for them all as the block began (``queue_tails``: each
        queue's consumequeue file read by name on from its last answer, or from its reader's
        next offset in ``starts`` when that lies at most :data:`SCAN_AHEAD_KEPT_UNITS` units
        before it in the same file), the units found kept for :meth:`tail_units`. Fewer than
        :data:`SCAN_AHEAD_QUEUES` queues, a queue with no answer yet, and one the kernel leaves
        to the reader (file missing, full or of another size) are scanned as usual; a max
        offset :meth:`learn_bounds` just read is answered from that."""
        learned, self._learned = self._learned, {}
        known = {key: learned[key] for key in queues if key in learned}
        rest = [key for key in queues if key not in known] if known else queues
        self._scanned = known
        if len(rest) >= SCAN_AHEAD_QUEUES:
            froms = dict(zip(queues, starts, strict=True)) if starts is not None else {}
            self._scanned.update(self._scan_many(rest, froms))
        try:
            yield
        finally:
            self._scanned = {}

    def _scan_many(self, queues: Sequence[Key], starts: dict[Key, int]) -> dict[Key, int]:
        keys: list[tuple[Key, int, int]] = []  # (queue, offset read from, last answer)
        paths: list[str] = []
        sizes: list[int] = []
        positions: list[int] = []
        for key in queues:
            hint = self._max_hint.get(key)
            if hint is None:
                continue
            path, base, per_file = self._cq_file(key[0], key[1], hint)
            start = starts.get(key, hint)
            if not (base <= start < hint and hint - start <= SCAN_AHEAD_KEPT_UNITS):
                start = hint  # (else read on from where the reader wants the units)
                if hint == base and hint:  # at a file's start: is there a next file yet?
                    continue
            keys.append((key, start, hint))
            paths.append(path)
            sizes.append(per_file * cqmod.CQ_UNIT_SIZE)
            positions.append(start - base)
        if not keys:
            return {}
        cap = SCAN_AHEAD_KEPT_UNITS
        counts, raw = native.kernel().queue_tails(
            paths, np.array(sizes, np.int64), np.array(positions, np.int64), cap, SCAN_THREADS
        )
        units = cqmod.decode_units(raw)
        found: dict[tuple[str, int], int] = {}
        at, counted = 0, np.frombuffer(counts, np.int64).tolist()
        for (key, start, hint), n in zip(keys, counted, strict=True):
            if n < 0:
                continue
            found[key] = start + n
            if n:
                kept = min(n, cap)
                self._tail[key] = (start, units[at : at + kept])
                at += kept
            live = self._live.add if start + n > hint else self._live.discard
            live(key)  # (none new: maybe not written yet, as in the broker's recovery test)
        return found

    def tail_units(self, topic: str, queue_id: int, start: int, count: int) -> Units | None:
        """The ``count`` consumequeue units from ``start`` when the queue's last
        :meth:`max_offset` read them all, else None. That scan decodes the units written since
        the answer before it; a dispatch pass that holds a queue's batch needs exactly those
        next, so they are not read from the file a second time. Units once written never
        change."""
        tail = self._tail.get((topic, queue_id))
        if tail is None or count <= 0:
            return None
        first, units = tail
        if start < first or start + count > first + len(units):
            return None
        return units[start - first : start - first + count]

    def tails(
        self, queues: Sequence[tuple[str, int]], starts: Sequence[int], counts: Sequence[int]
    ) -> list[Units | None]:
        """:meth:`tail_units` of many queues at once."""
        out: list[Units | None] = []
        kept = self._tail
        for key, start, count in zip(queues, starts, counts, strict=True):
            tail = kept.get(key)
            if tail is None or count <= 0:
                out.append(None)
                continue
            first, units = tail
            at = start - first
            out.append(units[at : at + count] if at >= 0 and at + count <= len(units) else None)
        return out

    def drop_tails(self, queues: Iterable[tuple[str, int]]) -> None:
        """:meth:`drop_tail` of many queues."""
        pop = self._tail.pop
        for key in queues:
            pop(key, None)

    def drop_tail(self, topic: str, queue_id: int) -> None:
        """Forget the units :meth:`max_offset` kept for :meth:`tail_units`, once the queue's
        step is planned (a queue at rest keeps none)."""
        self._tail.pop((topic, queue_id), None)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset whose message the broker still has (spec §3.4); -1 for an
        unknown queue. Reused for :data:`MIN_OFFSET_TTL_S` while the commitlog's first file
        stays the same (it only moves when the broker deletes that file)."""
        if not self.has_queue(topic, queue_id):
            return -1
        self._fresh()
        key, now, clmin = (topic, queue_id), time.monotonic(), self.commitlog.min_offset
        memo = self._min_memo.get(key)
        if memo is not None and memo[0] > now and memo[1] == clmin:
            return memo[2]
        value = self.consume_queue(topic, queue_id).min_offset(clmin if clmin >= 0 else None)
        self._min_memo[key] = (now + MIN_OFFSET_TTL_S, clmin, value)
        return value

    def forget(self, topic: str, queue_id: int) -> bool:
        """Drop what is remembered of a queue (the broker deleted it); whether anything was."""
        key = (topic, queue_id)
        with self._lock:
            held = self._queues.pop(key, None) is not None
        found = [
            memo.pop(key, None) is not None
            for memo in (self._max_hint, self._tail, self._min_memo, self._has_memo)
        ]
        self._live.discard(key)
        return held or any(found)

    def bounds(self, topic: str, queue_id: int, hint: int | None = None) -> tuple[int, int]:
        """``(min_offset, max_offset)`` from one listing of the queue's directory, as a reader
        that looks at each queue once wants them (``status``); ``(-1, -1)`` for an unknown
        queue. ``hint``: a queue offset written before (the tier's commit offset), from which the
        max is read (:func:`~tiered.broker.cq_bounds.queue_bounds`). Nothing is remembered."""
        self._fresh()
        clmin = self.commitlog.min_offset
        directory = os.path.join(self.cq_root, topic, str(queue_id))
        found = queue_bounds(directory, self.cq_file_size, clmin if clmin >= 0 else None, hint)
        return (-1, -1) if found is None else found

    def many_bounds(
        self, queues: Sequence[Key], hints: Sequence[int | None]
    ) -> list[tuple[int, int, int] | None]:
        """:meth:`bounds` of many queues at once (``hints`` as there, one per queue), the usual
        ones in one call of the kernel, with the bytes from the hint to the max (see
        :func:`~tiered.broker.cq_bounds.many_bounds`); None for a queue to ask :meth:`bounds`
        about (it names what is unusual about it, or raises)."""
        return self.start_many_bounds(queues, hints)()

    def start_many_bounds(
        self, queues: Sequence[tuple[str, int]], hints: Sequence[int | None]
    ) -> Callable[[], list[tuple[int, int, int] | None]]:
        """:meth:`many_bounds` begun on a thread; the function returned waits for the answer."""
        self._fresh()
        clmin = self.commitlog.min_offset
        root = str(self.cq_root)
        directories = [os.path.join(root, topic, str(queue_id)) for topic, queue_id in queues]
        return start_many_bounds(
            directories, self.cq_file_size, clmin if clmin >= 0 else None, hints
        )

    def learn_bounds(self, queues: Sequence[tuple[str, int]]) -> None:
        """Read the min and max offset of many queues at once (:meth:`many_bounds`, one call of
        the kernel) into what :meth:`min_offset` and :meth:`max_offset` remember, so that their
        next answers for these queues take no listing each (the first offload of thousands of
        new queues), and the max offsets for the next :meth:`scanned_ahead` block. A queue the
        kernel leaves to the per-queue methods is left to them."""
        if not queues:
            return
        found = self.many_bounds(queues, [None] * len(queues))
        now, clmin = time.monotonic(), self.commitlog.min_offset
        self._learned = {}
        for key, got in zip(queues, found, strict=True):
            if got is None or got[0] < 0:
                continue
            self._max_hint[key] = self._learned[key] = got[1]
            self._min_memo[key] = (now + MIN_OFFSET_TTL_S, clmin, got[0])
            self._has_memo[key] = now + HAS_QUEUE_TTL_S  # (its directory was just listed)

    def read_units(self, topic: str, queue_id: int, start: int, count: int) -> Units:
        """Up to ``count`` consumequeue units from ``start`` (see ``ConsumeQueue.read_units``).

        Units within one file of the configured size are read from it by name, without listing
        the queue's directory; anything else (another file, a missing or odd-sized file) goes
        through ``ConsumeQueue.read_units``, which says what is wrong."""
        if start >= 0 and count > 0:
            path, base, per_file = self._cq_file(topic, queue_id, start)
            if start + count <= base + per_file:
                unit = cqmod.CQ_UNIT_SIZE
                raw = read_sized_part(path, per_file * unit, (start - base) * unit, count * unit)
                if raw is not None:
                    units = cqmod.decode_units(raw)
                    return units[: cqmod.first_invalid(units)]
        return self.consume_queue(topic, queue_id).read_units(start, count)

    def units_lookup(self, topic: str, queue_id: int) -> LocalUnits:
        """A ``(start, count) -> units`` lookup for reconciliation: ``None`` where the broker no
        longer has them (or never had the queue). Nothing is looked at until it is called (a
        start makes one per queue, and few are ever called)."""

        def lookup(start: int, count: int) -> Units | None:
            if not (self.cq_root / topic / str(queue_id)).is_dir():
                return None
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
        except (OffsetNotInStoreError, StoreFileNotFoundError):
            return None
        if not len(unit):
            return None
        return self.store_time_at(int(unit["offset"][0]), int(unit["size"][0]))

    def remember_store_times(self, offsets: Sequence[int], times: Sequence[int]) -> None:
        """The store times of the messages at commitlog ``offsets`` (ascending), read already
        (the commitlog feed walked them): until the next call :meth:`store_time_at` answers
        these without a read."""
        self._known_times = (np.asarray(offsets, np.int64), np.asarray(times, np.int64))

    def store_times_at(self, physicals: Int64s, sizes: Int64s) -> list[int | None]:
        """:meth:`store_time_at` of many messages: those the commitlog feed walked answered
        with one search, the others read one by one."""
        offsets, times = self._known_times
        found = offsets.searchsorted(physicals).clip(max=max(len(offsets) - 1, 0))
        known = (offsets[found] == physicals) if len(offsets) else np.zeros(len(physicals), bool)
        got = np.where(known, times[found] if len(offsets) else 0, -1).tolist()
        out: list[int | None] = got
        for i in np.flatnonzero(~known).tolist():
            out[i] = self.store_time_at(int(physicals[i]), int(sizes[i]))
        return out

    def store_time_at(self, physical: int, size: int) -> int | None:
        """Store time of the message at commitlog offset ``physical`` (``size`` bytes, from its
        consumequeue unit); ``None`` if it is no longer there."""
        offsets, times = self._known_times
        i = int(offsets.searchsorted(physical))
        if i < len(offsets) and offsets[i] == physical:
            return int(times[i])
        try:
            head = self.commitlog.read(physical, min(size, HEADER_BYTES))
        except (OffsetNotInStoreError, StoreFileNotFoundError, CorruptStoreFileError):
            return None
        return msgcodec.store_timestamp_of(head)

    def offset_by_time(
        self, topic: str, queue_id: int, timestamp: int, *, upper: bool = False
    ) -> int:
        """The first queue offset whose store time is at or after ``timestamp`` (upstream's
        ``getOffsetInQueueByTime(ts, LOWER)``), clamped to ``[min, max]``: a binary search.

        With ``upper``, when messages are stored exactly at ``timestamp``, the last of them.
        """
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        first = self._lower_bound(topic, queue_id, lo, hi, timestamp)
        if upper and first < hi and self.store_time(topic, queue_id, first) == timestamp:
            return self._lower_bound(topic, queue_id, first, hi, timestamp + 1) - 1
        return first

    def _lower_bound(self, topic: str, queue_id: int, lo: int, hi: int, timestamp: int) -> int:
        while lo < hi:
            mid = (lo + hi) // 2
            t = self.store_time(topic, queue_id, mid)
            if t is None or t < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def read_batches(
        self, requests: list[BatchRequest]
    ) -> tuple[list[MessageBatch | BrokerStoreError], list[int | None]]:
        """The batches of many queues at once, and the store time of each request's first
        ``after`` unit: :meth:`read_unchecked`, each batch checked here. A batch whose bytes
        could not be read (the broker deleted the file) or do not match its units is an error in
        its place."""
        read, times = self.read_unchecked(requests)
        out: list[MessageBatch | BrokerStoreError] = []
        for got in read:
            try:
                out.append(got if isinstance(got, BrokerStoreError) else got.check())
            except BrokerStoreError as e:
                out.append(e)
        return out, times

    def read_unchecked(
        self, requests: list[BatchRequest]
    ) -> tuple[list[UncheckedBatch | BrokerStoreError], list[int | None]]:
        """The bytes of many queues' batches at once, each to be checked by
        :meth:`UncheckedBatch.check` in whichever thread uploads it, and the store time of each
        request's first ``after`` unit.

        One pread per commitlog range (see :mod:`tiered.broker.coalesce`), each batch's units
        gathered in queue order. A batch whose bytes could not be read (the broker deleted the
        file) is an error in its place. The store time after a batch is ``None`` without an
        ``after`` unit, or when its header could not be read or does not match it; the headers
        are gathered in the same preads (the message after a batch usually lies inside a range
        read anyway)."""
        if not requests:
            return [], []
        offs = [r.units["offset"].astype(np.int64) for r in requests]
        sizes = [r.units["size"].astype(np.int64) for r in requests]
        nexts = [first_after(r) for r in requests]
        self._listed_past(offs, sizes)
        got = coalesce.gather(
            self.commitlog,
            offs + [o for o, _ in nexts],
            sizes + [z for _, z in nexts],
        )
        self.preads += got.calls
        n = len(requests)
        out: list[UncheckedBatch | BrokerStoreError] = [
            error if error is not None else UncheckedBatch(self, r, data, o, z)
            for r, data, error, o, z in zip(
                requests, got.data[:n], got.errors[:n], offs, sizes, strict=True
            )
        ]
        times = [
            head_time(head, r.queue_offset + len(r.units), int(o[0]), int(r.after["size"][0]))
            if error is None and len(o) and r.after is not None
            else None
            for r, head, error, (o, _) in zip(
                requests, got.data[n:], got.errors[n:], nexts, strict=True
            )
        ]
        return out, times

    def _listed_past(self, offs: list[Int64s], sizes: list[Int64s]) -> None:
        """Re-list the commitlog files when a unit ends past the last one listed: the broker
        rolled to a new file after the listing (a round lists once, then reads the units its
        queues' consumequeues hold by then), which a read must not take for a deleted one.
        A queue's units ascend, so its last unit is the one to look at."""
        files = self.commitlog.files
        listed = files[-1].end if files else 0
        ends = (int(o[-1]) + int(z[-1]) for o, z in zip(offs, sizes, strict=True) if len(o))
        if max(ends, default=0) > listed:
            self.refresh()

    def _batch(self, r: BatchRequest, data: bytearray, offs: Int64s, sizes: Int64s) -> MessageBatch:
        checked = check_batch(data, sizes, r.queue_offset, offs)
        good = checked.good
        if good < len(sizes):
            raise _mismatch(r, good, offs, sizes)
        return MessageBatch(
            queue_offset=r.queue_offset,
            data=data,
            starts=checked.starts,
            sizes=sizes,
            tags_codes=self._tags(r, r.units["tags_code"].astype(np.int64)),
            timestamps=checked.timestamps,
            time_range=checked.time_range,
        )

    def _tags(self, r: BatchRequest, tags: Int64s) -> Int64s:
        """``tags`` (a copy of the request's tags codes, changed in place), the ones that are
        addresses in the consumequeue's ext file replaced by the tags codes kept there."""
        if len(tags) and int_min(tags) <= cqmod.EXT_MAX_ADDRESS:  # some are ext addresses
            ext = cqmod.is_ext_tags_code(tags)
            ext_queue = cqmod.ConsumeQueueExt(self.ext_root / r.topic / str(r.queue_id))
            tags[ext], _ = ext_queue.lookup(tags[ext])
        return tags

    def check_many(
        self, batches: Sequence[UncheckedBatch]
    ) -> list[MessageBatch | BrokerStoreError]:
        """:meth:`UncheckedBatch.check` of each of many queues' batches (a wide round's wave):
        their units checked and timestamped by one call of the kernel
        (:func:`~tiered.broker.unit_fields.check_batches`); a batch that does not match its
        units is the error ``check`` raises, in its place."""
        if not batches:
            return []
        counts = np.fromiter((len(b.sizes) for b in batches), np.int64, len(batches))
        sizes = np.concatenate([b.sizes for b in batches])
        offs = np.concatenate([b.offsets for b in batches])
        firsts = np.fromiter((b.request.queue_offset for b in batches), np.int64, len(batches))
        checked = check_batches([b.data for b in batches], sizes, counts, firsts, offs)
        tags = np.concatenate([b.request.units["tags_code"] for b in batches]).astype(np.int64)
        some_ext = len(tags) and int(tags.min()) <= cqmod.EXT_MAX_ADDRESS
        ends = np.cumsum(counts).tolist()
        out: list[MessageBatch | BrokerStoreError] = []
        for b, good, time_range, end, n in zip(
            batches, checked.good, checked.time_ranges, ends, counts.tolist(), strict=True
        ):
            at = end - n
            r = b.request
            if good < n:
                out.append(_mismatch(r, good, b.offsets, b.sizes))
                continue
            unit_tags = tags[at:end]
            out.append(MessageBatch(
                queue_offset=r.queue_offset,
                data=b.data,
                starts=checked.starts[at:end],
                sizes=b.sizes,
                tags_codes=self._tags(r, unit_tags.copy()) if some_ext else unit_tags,
                timestamps=checked.timestamps[at:end],
                time_range=time_range,
            ))  # fmt: skip
        return out

    # --- the read path ----------------------------------------------------------------------------

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Whether the broker has a consumequeue directory for the queue (a yes is remembered for
        :data:`HAS_QUEUE_TTL_S`: every read asks, and a stat per read is not free)."""
        key, now = (topic, queue_id), time.monotonic()
        if self._has_memo.get(key, 0.0) > now:
            return True
        found = os.path.isdir(os.path.join(self.cq_root, topic, str(queue_id)))
        if found:
            self._has_memo[key] = now + HAS_QUEUE_TTL_S
        return found

    def has_queues(self, keys: Sequence[tuple[str, int]]) -> list[bool]:
        """:meth:`has_queue` of each of ``keys``: those not seen lately asked of the kernel at
        once (``dirs_exist``: a stat each, on a few threads without the interpreter lock) where
        they are :data:`SCAN_AHEAD_QUEUES` or more."""
        now = time.monotonic()
        memo = self._has_memo
        unknown = [i for i, k in enumerate(keys) if memo.get(k, 0.0) <= now]
        if len(unknown) < SCAN_AHEAD_QUEUES:
            return [self.has_queue(*k) for k in keys]
        found = [True] * len(keys)
        root = str(self.cq_root)
        paths = [f"{root}/{keys[i][0]}/{keys[i][1]}" for i in unknown]
        until = now + HAS_QUEUE_TTL_S
        for i, here in zip(unknown, native.kernel().dirs_exist(paths, SCAN_THREADS), strict=True):
            found[i] = bool(here)
            if here:
                memo[keys[i]] = until
        return found

    def _units(self, topic: str, queue_id: int, offset: int, count: int) -> Units | None:
        """The leading units from ``offset`` whose messages are still in the commitlog; ``None``
        when the unit at ``offset`` is not (or no longer) there (or the broker has no such queue:
        an unknown queue is never remembered, whatever names requests bring)."""
        if not self.has_queue(topic, queue_id):
            return None
        self._fresh()
        try:
            units = self.read_units(topic, queue_id, offset, count)
        except (OffsetNotInStoreError, StoreFileNotFoundError):
            return None
        clmin = self.commitlog.min_offset
        if clmin < 0 or not len(units):
            return None
        ok = (units["offset"] >= clmin) & ~cqmod.is_blank_unit(units)
        keep = len(units) if ok.all() else int(np.argmin(ok))
        return units[:keep] if keep else None

    def in_store(self, topic: str, queue_id: int, offset: int) -> bool:
        """The queue's unit at ``offset`` exists and its message is still in the commitlog
        (upstream ``checkInStoreByConsumeOffset``, except that a missing unit is not "in")."""
        return self._units(topic, queue_id, offset, 1) is not None

    def residency(self, topic: str, queue_id: int, offset: int, batch: int) -> Residency | None:
        """Page-cache residency of exactly the commitlog bytes of ``batch`` messages from
        ``offset`` (first unit's start to the last unit's end, across file boundaries); ``None``
        when the unit at ``offset`` is not in the store. Upstream looks one message further."""
        units = self._units(topic, queue_id, offset, max(batch, 1))
        if units is None:
            return None
        start = int(units["offset"][0])
        end = int(units["offset"][-1]) + int(units["size"][-1])
        if end <= start:  # offsets going backwards: only the first message counts
            end = start + int(units["size"][0])
        resident = total = 0
        pos = start
        try:
            while pos < end:
                f = self.commitlog.file_for(pos)
                n = min(end, f.end) - pos
                part = residency(f.path, pos - f.base, n)
                resident += part.resident_pages
                total += part.total_pages
                pos += n
        except (OffsetNotInStoreError, FileNotFoundError):
            return None
        return Residency(resident, total)

    def read(
        self, topic: str, queue_id: int, offset: int, count: int, max_bytes: int
    ) -> list[tuple[int, bytes, int]]:
        """Up to ``count`` messages from ``offset`` and at most ``max_bytes`` (at least one), as
        ``(queue offset, unit bytes, tags code)``: one consumequeue read, coalesced commitlog
        reads. Empty when the message at ``offset`` is no longer (or not yet) in the store.

        Raises:
            BrokerStoreError: a message does not match its consumequeue unit, or its file was
                deleted while it was read.
        """
        got: MessageBatch | BrokerStoreError = OffsetNotInStoreError("not read")
        for attempt in (0, 1):
            if attempt:  # the listing was stale: the broker created or deleted a file since
                self.refresh()
            units = self._units(topic, queue_id, offset, count)
            if units is None:
                return []
            cum = np.cumsum(units["size"].astype(np.int64))
            units = units[: max(1, int(np.searchsorted(cum, max_bytes, side="right")))]
            got = self.read_batches([BatchRequest(topic, queue_id, offset, units)])[0][0]
            if not isinstance(got, OffsetNotInStoreError):
                break
        if isinstance(got, BrokerStoreError):
            raise got
        view = memoryview(got.data)
        return [
            (offset + i, bytes(view[a : a + n]), t)
            for i, (a, n, t) in enumerate(
                zip(got.starts.tolist(), got.sizes.tolist(), got.tags_codes.tolist(), strict=True)
            )
        ]

    def earliest_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first message still on disk; -1 when there is none."""
        for attempt in (0, 1):
            if attempt:  # the listing was stale: the broker deleted a file since
                self.refresh()
                self._min_memo.pop((topic, queue_id), None)
            lo = self.min_offset(topic, queue_id)
            if lo < 0 or lo >= self.max_offset(topic, queue_id):
                return -1
            t = self.store_time(topic, queue_id, lo)
            if t is not None:
                return t
        return -1

    def release(self, start: int, end: int) -> int:
        """Drop the page cache of physical range ``[start, end)``
        (:func:`tiered.broker.page_cache.release`)."""
        return page_cache.release(self.commitlog, start, end)

    @property
    def path(self) -> Path:
        """The store root."""
        return self.root


_OFFSET_SIZE = struct.Struct(">qi")
"""The leading fields of a consumequeue unit: commitlog offset and size."""
