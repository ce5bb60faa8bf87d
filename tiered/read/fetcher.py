"""Cold reads from the tier: consumequeue then commitlog, one ranged read each (spec §9.2–9.5).

Every unit read from the tier is checked before it is returned: its TOTALSIZE, magic and queue
offset against the consumequeue unit that pointed at it, and its body against BODYCRC. A mismatch
is an :class:`~tiered.errors.IntegrityError` naming the segment and offset, counted in a metric —
never data.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from contextlib import nullcontext
from dataclasses import dataclass
from dataclasses import field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.unit_fields import as_uint8
from tiered.broker.unit_fields import check_units
from tiered.broker.unit_fields import gather_be
from tiered.errors import IntegrityError
from tiered.errors import ReadBusyError
from tiered.errors import ReadPastEndError
from tiered.errors import TieredStoreError
from tiered.file.flat_message_file import FlatMessageFile
from tiered.process.native import kernel
from tiered.read.read_cache import ReadAheadCache
from tiered.read.read_gate import ReadGate
from tiered.read.read_unit import Buffer
from tiered.read.read_unit import Run
from tiered.read.read_unit import Unit
from tiered.read.tag_filter import TagFilter

__all__ = [
    "DEFAULT_MAX_TRANSFER_BYTES",
    "Fetcher",
    "GetResult",
    "GetStatus",
    "Run",
    "TieredReader",
    "Unit",
    "crc_mismatches",
    "matching",
    "next_readable",
]

Int64s = npt.NDArray[np.int64]
DEFAULT_MAX_TRANSFER_BYTES = 262144
"""The broker's ``maxTransferBytesOnMessageInMemory``: bytes one read returns by default."""
CODA_SIZE = 16  # legacy tiered writers put [16, BLANK magic, timestamp] between units


class GetStatus(StrEnum):
    """``GetMessageStatus`` values a read can end with (spec §9.2)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


@dataclass(slots=True)
class GetResult:
    """What a read returns: a status, the runs of units read, and where the next read should
    begin. The units stay in the buffers they were read into until a caller asks for
    :attr:`units` (decoded messages) or :meth:`body` (bytes to send)."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    runs: list[Run] = field(default_factory=list)
    tier: str = "tiered"

    @property
    def count(self) -> int:
        """Messages returned."""
        runs = self.runs
        return len(runs[0]) if len(runs) == 1 else sum(len(r) for r in runs)

    @property
    def units(self) -> list[Unit]:
        """One :class:`Unit` per message (a copy of each)."""
        return [u for r in self.runs for u in r.units()]

    def body_parts(self) -> list[Buffer]:
        """The stored units back to back as buffers to write one after the other: views of
        what was read where the units are contiguous in it."""
        return [b for b in (r.body() for r in self.runs) if len(b)]

    def body(self) -> Buffer:
        """The stored units back to back in one buffer (a view when they are one contiguous
        run, else one joined copy)."""
        parts = self.body_parts()
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)


def crc_mismatches(data: bytes | bytearray | memoryview, starts: Int64s) -> list[int]:
    """Indexes of units whose body does not match BODYCRC (hosts located from each sysflag): one
    compiled loop over the batch (``tiered._kernel``, CRC-32 with carry-less multiplication),
    without the GIL."""
    if not len(starts):
        return []
    raw = kernel().crc_mismatches(data, np.ascontiguousarray(starts, dtype=np.int64))
    bad: list[int] = np.frombuffer(raw, dtype=np.int64).tolist()
    return bad


IntegrityHook = Callable[[FlatMessageFile, IntegrityError], None]


BULK_UNITS = 256
"""A read of at least this many messages is a bulk read (a consumer's read-ahead or catch-up)."""
PREFETCH_WORKERS = 2
"""Threads that load the next read-ahead window of catch-ups ahead of their readers."""
PREFETCH_PENDING = 8
"""Windows at most loading or waiting to load ahead of readers; more catch-ups than this at once
load their next window when they reach it, as without prefetching."""

log = logging.getLogger(__name__)


class TieredReader:
    """Reads runs of messages of one queue from its flat file, verified.

    ``bulk_index_bytes``: on a backend that bills per request, a bulk read that does not continue
    the queue's previous one (a consumer's first pull) asks the consumequeue for at least this
    many bytes (and keeps what it needs), so the provider takes it for the sequential read it is
    and answers from read-ahead windows from the first read on; the reads that continue it ask
    for what they need.
    """

    def __init__(
        self, size_limit: int, on_integrity_error: IntegrityHook, bulk_index_bytes: int = 0
    ):
        self.size_limit = size_limit
        self.on_integrity_error = on_integrity_error
        self.bulk_index_units = -(-bulk_index_bytes // CQ_UNIT_SIZE)  # rounded up
        self._next: dict[str, int] = {}  # queue (flat file path) -> where its last run ended

    def run(self, flat: FlatMessageFile, offset: int, count: int, *, report: bool = True) -> Run:
        """Up to ``count`` units from ``offset``: one consumequeue read, one commitlog read.

        The commitlog read is trimmed to ``readAheadMessageSizeThreshold`` bytes (at least one
        message is always read); it spans at most two segments, and the run ends with the last
        message it holds whole.

        A message that fails its checks is reported (``on_integrity_error``, unless not
        ``report``: a read ahead of any reader) and ends the run; when it is the first one, the
        error is raised.

        Raises:
            IntegrityError: the message at ``offset`` disagrees with its consumequeue entry or its
                body CRC.
            ReadPastEndError: ``offset`` is outside the uploaded range.
        """
        ask = count
        if count >= BULK_UNITS and self._next.get(flat.path) != offset:
            ask = max(count, self.bulk_index_units)
        units = flat.consume_queue.read_units(offset, ask)[:count]
        if len(units) == 0:
            return Run.empty()
        offs = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        first = int(offs[0])
        ends = offs + sizes - first
        keep = max(1, int(np.searchsorted(ends, self.size_limit, side="right")))
        # a unit whose offset goes backwards ends the run (never seen; would be a corrupt CQ)
        backwards = np.flatnonzero(offs[1:keep] < offs[: keep - 1])
        if backwards.size:
            keep = int(backwards[0]) + 1
        length = int(offs[keep - 1] + sizes[keep - 1]) - first
        data = flat.commitlog.read_view(first, length)  # a read-ahead window's bytes: no copy
        if len(data) < length:  # the read stops at the second segment's end: keep what came
            keep = max(1, int(np.searchsorted(ends[:keep], len(data), side="right")))
        offs, sizes, tags = offs[:keep], sizes[:keep], units["tags_code"][:keep].astype(np.int64)
        rel = offs - first
        rel = self._skip_codas(data, rel)
        qoffs = offset + np.arange(len(rel), dtype=np.int64)
        good = check_units(data, rel, sizes, qoffs, offs)
        bad_crc = crc_mismatches(data, rel[:good])
        if good < len(rel) or bad_crc:
            i = min([good, *bad_crc])
            what = "body CRC mismatch" if i in bad_crc else "header disagrees with its CQ unit"
            key = flat.commitlog.key_at(int(offs[i]))
            err = IntegrityError(
                f"{flat.path} queue offset {offset + i}: {what} at flat commitlog offset "
                f"{int(offs[i])} (object {key}); the tier copy is damaged",
                key=key,
                offset=int(offs[i]),
            )
            if report:
                self.on_integrity_error(flat, err)
            if i == 0:
                raise err
            rel, sizes, tags = rel[:i], sizes[:i], tags[:i]  # the good ones
        if rel[0] == 0:  # checked: when it is the commitlog's first message, its queue offset
            flat.commitlog.learn_first_queue_offset(first, offset)  # is the tier's min
        if self.bulk_index_units:
            self._next[flat.path] = offset + len(rel)
        return Run(data, rel, sizes, tags, qoffs[: len(rel)])

    @staticmethod
    def _skip_codas(data: Buffer, rel: Int64s) -> Int64s:
        if not len(rel):
            return rel
        buf = as_uint8(data)
        inside = rel + 8 <= len(data)
        pos = rel[inside]
        coda = np.zeros(len(rel), dtype=bool)
        coda[inside] = gather_be(buf, pos + 4, 4) == msgcodec.BLANK_MAGIC
        return np.where(coda, rel + CODA_SIZE, rel)


def next_readable(flat: FlatMessageFile, offset: int) -> int | None:
    """The first queue offset after ``offset`` the tier holds, when ``offset`` lies in a gap
    between two consumequeue segments (local data deleted before it was offloaded)."""
    for seg in flat.consume_queue.segments:
        start = seg.base // CQ_UNIT_SIZE
        if start > offset and seg.size > 0:
            return start
    return None


class Fetcher:
    """``getMessage`` on the tier side: range checks, the read-ahead cache, tag filtering -- all
    over runs of units, never one object per message.

    A reader that has gone past the middle of a bulk read-ahead window (a catch-up) has the
    window after it loaded ahead of it, on one of :data:`PREFETCH_WORKERS` threads, and once it
    reads in a window loaded ahead, the next one at once (it stays a whole window ahead): its
    next pulls find it cached (or wait for that one read, never a second) instead of stopping
    for the backend, and the checks of one window run while the last one is sent. Only when the
    cache is not busy, at most :data:`PREFETCH_PENDING` windows at a time; a prefetch that
    fails is dropped unreported (the reader's own read meets the error and reports it).

    ``gate`` bounds the reads that go to the backend (:mod:`.read_gate`): a reader's own load of
    a window, or its direct read, passes it; a cache hit, a wait for a window another reader is
    loading, and a prefetch (bounded by :data:`PREFETCH_PENDING`) do not. A read refused after
    some messages were already taken from the cache returns those.
    """

    def __init__(
        self,
        reader: TieredReader,
        cache: ReadAheadCache | None,
        read_ahead_count: int,
        gate: ReadGate | None = None,
    ):
        self.reader = reader
        self.cache = cache
        self.gate = gate
        self.read_ahead_count = read_ahead_count
        self.prefetch = cache is not None
        self._lock = threading.Lock()
        self._pending: set[tuple[str, int, int]] = set()
        self._asked: dict[tuple[str, int], int] = {}  # queue -> the start last prefetched
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.prefetched = 0
        """Windows loaded ahead of their reader (for tests and the debug log)."""

    @property
    def prefetching(self) -> int:
        """Windows loading or waiting to load ahead of their readers now."""
        with self._lock:
            return len(self._pending)

    def close(self) -> None:
        """Stop prefetching: windows not yet loading are dropped, loading ones finish."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def get(
        self,
        flat: FlatMessageFile | None,
        offset: int,
        max_count: int,
        tags: TagFilter,
        max_bytes: int = DEFAULT_MAX_TRANSFER_BYTES,
    ) -> GetResult:
        """Up to ``max_count`` matching messages from ``offset`` and about ``max_bytes`` (at
        least one), with the statuses of spec §9.2.

        Raises:
            IntegrityError: a message read from the tier failed its checks.
            ReadBusyError: the read must go to the backend and ``gate`` has no place for it.
            ProviderError: the backend failed (a :class:`~tiered.errors.SegmentNotFoundError` or
                a :class:`~tiered.errors.ReadPastEndError` naming its ``key`` included: the
                object is gone or shorter than its record, e.g. expired during the read).
        """
        if flat is None or not flat.initialized:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset, -1, -1)
        hi = flat.commit_offset
        # the min as far as it is known without a request bounds it from below; the min itself
        # (raised to the commitlog's first queue offset, read once) is taken after the read: a
        # read that checked the commitlog's first message has taught it that offset, so a
        # consumer that starts at the queue's first offset costs no GET of the commitlog's head
        below = _outside(flat.min_offset_floor(), hi, offset)
        if below is not None:  # outside the true bounds too: answered with them
            return _outside(flat.min_offset(), hi, offset) or below
        want = _Want(max_count, max_bytes, tags)
        try:
            if self.cache is not None and not self.cache.busy:
                runs, nxt = self._through_cache(flat, offset, hi, want)
            else:
                runs, nxt = self._direct(flat, offset, hi, want, kept=False)
        except ReadPastEndError as e:
            if e.key is not None:  # the backend's object is shorter than its record: not a gap
                raise
            lo = flat.min_offset()
            outside = _outside(lo, hi, offset)
            if outside is not None:  # below the commitlog's first message: expired
                return outside
            after_gap = next_readable(flat, offset)
            return GetResult(GetStatus.OFFSET_FOUND_NULL, after_gap or offset, lo, hi)
        lo = flat.min_offset()
        outside = _outside(lo, hi, offset)
        if outside is not None:  # (the commitlog expired under the read)
            return outside
        if nxt == offset:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, lo, hi)
        status = GetStatus.FOUND if runs else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, nxt, lo, hi, runs)

    def _cold(self, flat: FlatMessageFile, offset: int) -> AbstractContextManager[None]:
        """A place at the gate for a reader's backend read at ``offset``."""
        gate = self.gate
        return nullcontext() if gate is None else gate.admit(f"{flat.path} offset {offset}")

    def _direct(
        self, flat: FlatMessageFile, offset: int, hi: int, want: _Want, *, kept: bool
    ) -> tuple[list[Run], int]:
        with self._cold(flat, offset):
            got = self.reader.run(flat, offset, min(want.count, hi - offset))
        taken, stop = take(got, want, kept=kept)
        return ([taken] if len(taken) else []), (offset + len(got) if stop is None else stop)

    def _through_cache(
        self, flat: FlatMessageFile, offset: int, hi: int, want: _Want
    ) -> tuple[list[Run], int]:
        """Serve runs of cached units from ``offset``, loading a read-ahead window on a miss
        (unless what is left of ``want.bytes`` is less than the units taken so far average:
        a window loaded for a message that would not fit waits for the backend for nothing,
        and the prefetch below could not start before it)."""
        assert self.cache is not None
        cache = self.cache
        topic, qid = flat.topic, flat.queue_id
        runs: list[Run] = []
        count = size = 0
        q = offset
        wide = self._span(want.count)
        limit = min(hi, offset + wide)
        start = end = -1
        while q < limit and count < want.count and size < want.bytes:
            # a filter may skip messages: then look at the rest of the window
            need = limit - q if want.tags.tags is not None else want.count - count
            run, at, until = cache.lookup(topic, qid, q, need)
            if not len(run) and count and (want.bytes - size) * count < size:
                break  # the next message would not fit: no load to take nothing from
            start, end = at, until
            if not len(run):
                span = min(32 if want.count == 1 else wide, hi - q)
                try:
                    cache.load_once(
                        topic, qid, q, span, functools.partial(self._fill, flat, q, span)
                    )
                except (ReadPastEndError, IntegrityError, ReadBusyError):
                    if q == offset:
                        raise
                    break  # a gap, a damaged message, a full gate: the next call starts there
                run, start, end = cache.lookup(topic, qid, q, need)
                if not len(run):  # not cacheable (too big, cache full): read what is needed
                    rest = _Want(want.count - count, want.bytes - size, want.tags)
                    try:
                        more, nxt = self._direct(flat, q, hi, rest, kept=count > 0)
                    except ReadBusyError:
                        if q == offset:
                            raise
                        break
                    return runs + more, nxt
            rest = _Want(want.count - count, want.bytes - size, want.tags)
            taken, stop = take(run, rest, kept=count > 0)
            if len(taken):
                runs.append(taken)
                count += len(taken)
                size += taken.nbytes
            if stop is not None:
                q = stop
                break
            q += len(run)
        if start >= 0 and q >= end >= hi:  # the queue's last window, read to its end
            cache.done_with(topic, qid, start)
        if (
            self.prefetch
            and end < hi
            and end - start >= BULK_UNITS
            # past the middle, or in a window loaded ahead: a catch-up stays a window ahead
            and (2 * (q - start) > end - start or self._asked.get((topic, qid)) == start)
        ):
            self._prefetch(flat, end, min(wide, hi - end))
        return runs, q

    def _span(self, count: int) -> int:
        """How many units a window loaded for a read of ``count`` spans: the read-ahead count,
        or ``count`` when it asks for more (an HTTP raw catch-up: a window, and an answer, of
        up to ``readAheadMessageSizeThreshold`` bytes, where the reader trims it)."""
        return max(self.read_ahead_count, count)

    def _fill(self, flat: FlatMessageFile, start: int, span: int, *, report: bool = True) -> None:
        """Load a window into the cache: a reader's own load (``report``) passes the gate, a
        prefetch (not ``report``) does not."""
        assert self.cache is not None
        if report:
            with self._cold(flat, start):
                run = self.reader.run(flat, start, span)
        else:
            run = self.reader.run(flat, start, span, report=False)
        self.cache.put_window(flat.topic, flat.queue_id, start, run)

    def _prefetch(self, flat: FlatMessageFile, start: int, span: int) -> None:
        """Have the window of ``span`` units from ``start`` loaded ahead of its reader, unless it
        was asked for already."""
        queue = (flat.topic, flat.queue_id)
        if self._asked.get(queue) == start:  # asked on every pull past the middle: once is enough
            return
        key = (*queue, start)
        with self._lock:
            if self._closed or key in self._pending or len(self._pending) >= PREFETCH_PENDING:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(PREFETCH_WORKERS, "tiered-prefetch")
            try:
                self._pool.submit(self._load_ahead, flat, key, span)
            except RuntimeError:  # the interpreter is shutting down: the reader reads it itself
                return
            self._asked[queue] = start
            self._pending.add(key)

    def _load_ahead(self, flat: FlatMessageFile, key: tuple[str, int, int], span: int) -> None:
        topic, qid, start = key
        cache = self.cache
        assert cache is not None

        def fill() -> None:  # in the flight: a reader's load of it has put it or waits for this
            if not cache.holds(topic, qid, start):
                self._fill(flat, start, span, report=False)
                with self._lock:
                    self.prefetched += 1

        try:
            if not cache.busy:
                cache.load_once(topic, qid, start, span, fill)
        except TieredStoreError as e:  # the reader's own read meets it again, and reports it
            log.debug("prefetch of %s/%d from %d dropped: %s", topic, qid, start, e)
        except Exception:  # a bug: the reader still reads the window itself
            log.exception("prefetch of %s/%d from %d failed", topic, qid, start)
        finally:
            with self._lock:
                self._pending.discard(key)


def take(run: Run, want: _Want, *, kept: bool) -> tuple[Run, int | None]:
    """The units of ``run`` the subscription takes, at most ``want.count`` of them and about
    ``want.bytes`` (at least one unless some were ``kept`` before), and the queue offset where
    the next read begins when the limits stopped it inside the run (``None``: the run was used
    whole). Over the batch: a slice when nothing is filtered, else one selection."""
    if want.tags.tags is None:
        n = min(len(run), want.count)
        if n == len(run) and run.nbytes <= want.bytes:  # the usual pull: one sum, no copies
            return run, None
        sizes = run.sizes
        matched = run
    else:
        ok = want.tags.match_run(run)
        matched = run.select(ok)
        sizes = matched.sizes
    n = min(len(matched), want.count)
    ends = np.cumsum(sizes[:n])
    fit = int(np.searchsorted(ends, want.bytes, side="right"))  # those within the byte budget
    if fit < n:
        n = max(fit, 0 if kept else 1)
    if n == want.count and n < len(matched):  # the count is reached: on after the last taken
        stop = int(matched.qoffs[n - 1]) + 1
    elif n < len(matched):  # the byte budget is reached: on from the first one not taken
        stop = int(matched.qoffs[n])
    else:
        stop = None
    return matched.slice(0, n), stop


def out_of_range(offset: int, lo: int, hi: int) -> tuple[GetStatus, int] | None:
    """The status of a read at ``offset`` of a queue holding ``[lo, hi)`` when the offset is
    outside it, with the offset the reader should ask for next (spec §9.2); else None. The one
    ladder of the tier's and the broker's reads."""
    if offset < lo:
        return GetStatus.OFFSET_TOO_SMALL, lo
    if offset == hi:
        return GetStatus.OFFSET_OVERFLOW_ONE, hi
    if offset > hi:
        return GetStatus.OFFSET_OVERFLOW_BADLY, hi
    return None


def _outside(lo: int, hi: int, offset: int) -> GetResult | None:
    """The status of a read at ``offset`` outside what the tier holds, ``[lo, hi)`` (spec
    §9.2), else None."""
    if hi <= 0 or lo < 0 or hi <= lo:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, offset, lo, hi)
    outside = out_of_range(offset, lo, hi)
    return None if outside is None else GetResult(outside[0], outside[1], lo, hi)


@dataclass(slots=True)  # not frozen: five times cheaper to make, one per read
class _Want:
    count: int
    bytes: int
    tags: TagFilter


def matching(units: Sequence[Unit], tags: TagFilter) -> Iterable[bool]:
    """Which units the subscription takes (units read one by one: the broker's local reads)."""
    if tags.tags is None:
        return itertools.repeat(True, len(units))
    ok: list[bool] = tags.match_run(Run.of_units(units)).tolist()
    return ok
