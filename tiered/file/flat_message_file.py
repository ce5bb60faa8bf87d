"""``FlatMessageFile``: one queue in the tier, a flat commitlog and a flat consumequeue (spec §5.8).

Write order (the crash-consistency rule of this package): a batch's commitlog bytes are uploaded
first, its consumequeue units second, and the segment records that count them are written after
both (:meth:`FlatMessageFile.flush_metadata`, once per dispatch round). So every recorded unit
points at uploaded message bytes, and whatever a crash leaves unrecorded is found and judged by
:mod:`tiered.file.restart_reconcile` at the next start.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.unit_fields import encode_cq_units
from tiered.broker.unit_fields import int_sum
from tiered.broker.unit_fields import rewrite_batches
from tiered.errors import IntegrityError
from tiered.errors import MetadataError
from tiered.errors import TieredStoreError
from tiered.metadata import LONG_MAX
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import MessageQueue
from tiered.metadata import MetadataStore
from tiered.metadata import now_ms
from tiered.providers.base import Provider

from .flat_append_file import FlatAddress
from .flat_append_file import FlatAppendFile
from .flat_append_file import real_size
from .flat_append_file import retrying
from .flat_commitlog import FlatCommitLogFile
from .flat_consumequeue import FlatConsumeQueueFile

Int64s = npt.NDArray[np.int64]


@dataclass
class MessageBatch:
    """Consecutive messages of one queue, read from the local store.

    ``data`` holds the units back to back in queue order (``starts[i]`` is unit ``i``'s position,
    ``sizes[i]`` its length); ``tags_codes`` come from the local consumequeue and ``timestamps``
    are store times. ``queue_offset`` is the first unit's queue offset.
    """

    queue_offset: int
    data: bytearray
    starts: Int64s
    sizes: Int64s
    tags_codes: Int64s
    timestamps: Int64s
    time_range: tuple[int, int] | None = None
    """The least and greatest of ``timestamps`` when the reader found them (else computed)."""

    def __len__(self) -> int:
        return len(self.starts)

    def times(self) -> tuple[int, int] | None:
        """The least and greatest store time, None for an empty batch."""
        if self.time_range is None and len(self.timestamps):
            self.time_range = int(self.timestamps.min()), int(self.timestamps.max())
        return self.time_range

    @property
    def nbytes(self) -> int:
        """Message bytes in the batch (also once :meth:`release` has freed them)."""
        return int_sum(self.sizes)

    def release(self) -> bool:
        """Free the message bytes (``data`` becomes empty) once nothing needs them any more;
        False when a view of them is still held, and they stay.

        The storage is freed whole: a ``bytearray`` cleared in place is shrunk by ``realloc``, which
        keeps a few bytes at the head of the old block and so leaves a hole of almost, never quite,
        a batch's size, that the next batch cannot use, so the heap grows batch after batch.
        Dropping the first byte first moves the array's start, and a resize then copies what is left
        to a new block and frees the old one."""
        data = self.data
        if not isinstance(data, bytearray) or not data:
            return True
        try:
            del data[:1]
            data.clear()
        except BufferError:
            return False
        return True


class CommitResult(NamedTuple):
    """What one :meth:`FlatMessageFile.commit` uploaded."""

    commitlog_bytes: int
    consume_queue_bytes: int
    batches: tuple[tuple[MessageBatch, Int64s], ...] = ()
    """The batches (with their flat offsets) this commit completed: both files uploaded."""
    after: tuple[Callable[[], None], ...] = ()
    """What :meth:`FlatMessageFile.after_commit` asked to run once those batches are committed
    (the caller runs it)."""

    @property
    def messages(self) -> int:
        """Units made visible."""
        return self.consume_queue_bytes // CQ_UNIT_SIZE


_NOTHING = CommitResult(0, 0)
_NO_OFFSETS: Int64s = np.zeros(0, np.int64)
_NONE: Mapping[str, int | None] = types.MappingProxyType({})


class FlatMessageFile:
    """One queue's flat files; ``lock`` serialises dispatch, expiry and recovery of the queue."""

    def __init__(
        self,
        provider: Provider,
        metadata: MetadataStore,
        address: FlatAddress,
        *,
        commitlog_max_size: int,
        consume_queue_max_size: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.address = address
        self.topic = address.topic
        """The queue's topic (attributes, not properties: a wide round reads them a dozen times
        for each of thousands of queues)."""
        self.queue_id = address.queue_id
        """The queue id."""
        self.path = address.path
        """The logical path ``{broker}/{topic}/{queueId}``."""
        self.metadata = metadata
        self.lock = threading.RLock()
        self.commitlog = FlatCommitLogFile(provider, metadata, address, commitlog_max_size, clock)
        self.consume_queue = FlatConsumeQueueFile(
            provider, metadata, address, consume_queue_max_size, clock
        )
        self._uncommitted: list[tuple[MessageBatch, Int64s]] = []
        self._after: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return (
            f"FlatMessageFile({self.path!r}, queue offsets [{self.min_offset()}, "
            f"{self.commit_offset}), commitlog {self.commitlog.commit_offset})"
        )

    @property
    def message_queue(self) -> MessageQueue:
        """The metadata ``MessageQueue`` of this file."""
        a = self.address
        return MessageQueue(broker_name=a.broker, queue_id=a.queue_id, topic=a.topic)

    # --- state ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild both files' segment lists from metadata."""
        with self.lock:
            self.commitlog.load()
            self.consume_queue.load()
            self.commitlog.forget_first_queue_offset()

    @property
    def initialized(self) -> bool:
        """Whether the consumequeue has a segment (the queue has a position in the tier)."""
        return bool(self.consume_queue._segments)

    @property
    def commit_offset(self) -> int:
        """The next queue offset to upload (= units uploaded end); -1 when not initialised."""
        return self.consume_queue.commit_queue_offset

    @property
    def append_offset(self) -> int:
        """The next queue offset to append; -1 when not initialised."""
        return self.consume_queue.append_queue_offset

    @property
    def has_pending(self) -> bool:
        """Whether appended bytes wait for upload (a failed commit is retried first)."""
        cl, cq = self.commitlog._segments, self.consume_queue._segments  # (asked per queue often)
        return bool((cl and cl[-1].pending_size) or (cq and cq[-1].pending_size))

    @property
    def settled(self) -> bool:
        """Whether the backend holds exactly what the records say (once they are flushed):
        nothing pending, nothing waiting for a sync, no upload left failed."""
        cl, cq = self.commitlog, self.consume_queue
        return not (
            cl.pending_size
            or cq.pending_size
            or cl.unsynced
            or cq.unsynced
            or cl.upload_failed
            or cq.upload_failed
        )

    def min_offset(self) -> int:
        """The first readable queue offset: the consumequeue's first unit, raised to the queue
        offset of the first message still in the flat commitlog (spec §5.8); -1 when empty."""
        cq_min = self.consume_queue.min_queue_offset
        if cq_min < 0:
            return -1
        return max(cq_min, self.commitlog.first_queue_offset())

    def min_offset_floor(self) -> int:
        """:meth:`min_offset` as far as it is known without a request: the consumequeue's first
        unit, raised to the commitlog's first queue offset once that has been read; never above
        :meth:`min_offset`."""
        cq_min = self.consume_queue.min_queue_offset
        if cq_min < 0:
            return -1
        return max(cq_min, self.commitlog.known_first_queue_offset)

    def min_timestamp(self) -> int:
        """The oldest store time kept (spec §5.8); -1 when unknown."""
        stamps = [
            t
            for t in (self.commitlog.min_timestamp, self.consume_queue.min_timestamp)
            if 0 <= t < 2**63 - 1
        ]
        return max(stamps) if stamps else -1

    # --- writing --------------------------------------------------------------------------------

    def _first_keys(self, queue_offset: int) -> list[tuple[FlatAppendFile, str]]:
        """The objects :meth:`init` at ``queue_offset`` would begin (of the parts with no
        segment yet), each with its part."""
        return [
            (part, part.key(base))
            for part, base in (
                (self.commitlog, 0),
                (self.consume_queue, queue_offset * CQ_UNIT_SIZE),
            )
            if part.empty
        ]

    @staticmethod
    def tier_sizes(starts: Sequence[tuple[FlatMessageFile, int]]) -> dict[str, int | None]:
        """The tier's sizes of the objects :meth:`init` of each ``(flat, queue offset)`` looks
        at, asked at once (``Provider.sizes_many``: a broker's new queues by the thousand);
        empty when that failed (each ``init`` then asks alone, and fails alone)."""
        if not starts:
            return {}
        provider = starts[0][0].commitlog.provider  # (a flat file store's one provider)
        keys = [
            key
            for flat, offset in starts
            for part, key in flat._first_keys(offset)
            if part.provider is provider
        ]
        if not keys:
            return {}
        try:
            return dict(zip(keys, retrying(lambda: provider.sizes_many(keys)), strict=True))
        except (TieredStoreError, OSError):
            return {}

    def init(
        self, queue_offset: int, *, persist: bool = True, sizes: Mapping[str, int | None] = _NONE
    ) -> None:
        """Give the queue its first position: the flat commitlog at 0, the consumequeue at
        ``queue_offset``. Both records are persisted before any data: now, or with
        ``persist=False`` at the end of the caller's ``MetadataStore.batch()``. ``sizes``: the
        tier's sizes of the objects it begins, where :meth:`tier_sizes` asked them already.

        Raises:
            MetadataError: the backend already holds objects there that no record names (the
                local metadata was lost: rebuild it with ``rmq-tiered recover``).
        """
        with self.lock:
            for part, key in self._first_keys(queue_offset):
                size = sizes[key] if key in sizes else real_size(part.provider, key)
                if size:
                    raise MetadataError(
                        f"{key} exists in the backend but the tiered metadata has no "
                        f"record of queue {self.path}: the local metadata was lost or replaced; "
                        "run `rmq-tiered recover` before dispatching"
                    )
            if self.commitlog.empty:
                self.commitlog.init_offset(0, persist=persist)
            self.consume_queue.init_queue_offset(queue_offset, persist=persist)

    def steady(self, now: int, rolling_hours: int, rolling_min: int) -> tuple[int, int, int] | None:
        """``(commit offset, commitlog room in bytes, consumequeue room in units)`` when the
        next batch may be planned with many queues' at once: nothing is pending and the
        commitlog would not roll by time first (:meth:`FlatCommitLogFile.try_time_roll`); None
        otherwise. Changes nothing."""
        cl_room = self.commitlog.room_before_time_roll(now, rolling_hours, rolling_min)
        cq_room = self.consume_queue.free_room()
        if cl_room < 0 or cq_room < 0:
            return None
        return self.consume_queue.commit_queue_offset, cl_room, cq_room // CQ_UNIT_SIZE

    def plan_batch(self, sizes: Int64s, size_limit: int) -> tuple[int, bool, bool]:
        """How many of the next messages (``sizes``) go into one batch, and whether the
        commitlog and consumequeue must roll first (:meth:`roll_for_batch`). Changes nothing.

        A batch stops before the message that would bring it to ``size_limit`` bytes and fits
        the segments it goes to, but always holds at least one message (a message bigger than
        the limit, or than a whole segment, goes alone). Nothing may be pending.
        """
        if not len(sizes):
            return 0, False, False
        total = int_sum(sizes)  # (a wide round's usual batch, a message or two, fits whole)
        cum = np.cumsum(sizes) if total >= size_limit else None
        n = len(sizes) if cum is None else max(int(cum.searchsorted(size_limit)), 1)
        cl, cq = self.commitlog, self.consume_queue
        cl_room = cl.room()
        roll_cl = int(sizes[0]) > cl_room and cl.last_size > 0
        if roll_cl:
            cl_room = cl.max_size
        if total > cl_room:
            cum = np.cumsum(sizes) if cum is None else cum
            n = min(n, max(int(cum.searchsorted(cl_room, side="right")), 1))
        units = cq.room_units()
        roll_cq = units == 0
        if roll_cq:
            units = cq.max_size // CQ_UNIT_SIZE
        return min(n, max(units, 1)), roll_cl, roll_cq

    def plan_following(
        self,
        sizes: Int64s,
        first: int,
        size_limit: int,
        count_limit: int,
        batches: int,
        *,
        partial: bool = False,
    ) -> list[int]:
        """The message counts of up to ``batches`` batches after a first one of ``first``
        messages that rolls nothing (``sizes`` from its first message on): each what
        :meth:`plan_batch` would give once the ones before it are committed, as long as no
        segment must roll first. A batch cut short by the end of ``sizes`` -- the messages
        known so far -- is planned only when ``partial`` (a flush); otherwise planning stops."""
        out: list[int] = []
        cl_room = self.commitlog.room() - int(sizes[:first].sum())
        cq_room = self.consume_queue.room_units() - first
        at = first
        while len(out) < batches and at < len(sizes):
            rest = sizes[at : at + count_limit]
            cum = np.cumsum(rest)
            n = max(int(np.searchsorted(cum, size_limit, side="left")), 1)
            if n == len(rest) and len(rest) < count_limit and not partial:
                break  # neither full nor flushed: the next round decides on it
            if int(rest[0]) > cl_room or cq_room <= 0:
                break  # a segment rolls first: planned by the next round
            n = min(n, int(np.searchsorted(cum, cl_room, side="right")), cq_room)
            out.append(n)
            cl_room -= int(cum[n - 1])
            cq_room -= n
            at += n
        return out

    def roll_for_batch(self, roll_commitlog: bool, roll_consume_queue: bool) -> None:
        """Roll what :meth:`plan_batch` said must roll."""
        if roll_commitlog:
            self.commitlog.roll()
        if roll_consume_queue:
            self.consume_queue.roll()

    def fit(self, sizes: Int64s, size_limit: int) -> int:
        """:meth:`plan_batch` and :meth:`roll_for_batch` in one: roll, return the count."""
        n, roll_cl, roll_cq = self.plan_batch(sizes, size_limit)
        self.roll_for_batch(roll_cl, roll_cq)
        return n

    def append_batch(self, batch: MessageBatch) -> Int64s:
        """Append a batch to both files (pending until :meth:`commit`); returns flat offsets.

        Raises:
            IntegrityError: the batch does not start at the consumequeue's append offset.
        """
        if batch.queue_offset != self.append_offset:
            raise self._misplaced(batch)
        times = batch.times()
        offsets = self.commitlog.append_units(batch.data, batch.starts, times)
        self.consume_queue.append_units(offsets, batch.sizes, batch.tags_codes, times)
        self._uncommitted.append((batch, offsets))
        return offsets

    def _misplaced(self, batch: MessageBatch) -> IntegrityError:
        return IntegrityError(
            f"{self.path}: batch starts at queue offset {batch.queue_offset} but the flat "
            f"consumequeue continues at {self.append_offset}"
        )

    @staticmethod
    def append_many(
        flats: Sequence[FlatMessageFile], batches: Sequence[MessageBatch]
    ) -> list[Int64s | IntegrityError]:
        """:meth:`append_batch` of each queue's batch (a wide round's wave, ``batches[i]`` of
        ``flats[i]``, each ``data`` writable): every batch's physical offsets rewritten by one
        call of the kernel (:func:`~tiered.broker.unit_fields.rewrite_batches`), every unit
        encoded by one more. A batch that does not start at its consumequeue's append offset
        is the error ``append_batch`` raises, in its place (nothing of it appended)."""
        out: list[Int64s | IntegrityError] = []
        ok: list[int] = []
        for i, (flat, batch) in enumerate(zip(flats, batches, strict=True)):
            if batch.queue_offset == flat.append_offset:
                ok.append(i)
                out.append(_NO_OFFSETS)  # (replaced below)
            else:
                out.append(flat._misplaced(batch))
        if not ok:
            return out
        counts = np.fromiter((len(batches[i]) for i in ok), np.int64, len(ok))
        bases = np.fromiter((flats[i].commitlog.append_offset for i in ok), np.int64, len(ok))
        starts = np.concatenate([batches[i].starts for i in ok]).astype(np.int64, copy=False)
        offsets = starts + np.repeat(bases, counts)
        rewrite_batches([batches[i].data for i in ok], starts, offsets, counts)
        units = memoryview(encode_cq_units(
            offsets,
            np.concatenate([batches[i].sizes for i in ok]),
            np.concatenate([batches[i].tags_codes for i in ok]),
        ))  # fmt: skip
        at = 0
        for i, n in zip(ok, counts.tolist(), strict=True):
            flat, batch = flats[i], batches[i]
            begin, end = batch.times() or (LONG_MAX, LONG_MAX)
            got = offsets[at : at + n]
            flat.commitlog.append(batch.data, begin, end)
            flat.consume_queue.append(
                units[at * CQ_UNIT_SIZE : (at + n) * CQ_UNIT_SIZE], begin, end
            )
            flat._uncommitted.append((batch, got))
            out[i] = got
            at += n
        return out

    def after_commit(self, call: Callable[[], None]) -> None:
        """Have the :class:`CommitResult` of the commit that completes the batches appended so
        far carry ``call`` (forgotten with them by :meth:`drop_pending`)."""
        self._after.append(call)

    def commit(self, *, written: Callable[[], None] | None = None) -> CommitResult:
        """Upload the commitlog's pending bytes and make them durable, then (only if that
        succeeded) the units'.

        The commitlog's bytes are written first and synced after (on a file backend; elsewhere
        an append is durable when it returns); with ``written``, the batches' message bytes are
        freed in between (:meth:`MessageBatch.release`: the flat commitlog holds them now) and
        ``written`` is called, so a batch does not hold its memory while the disk syncs it --
        most of a batch's time in a catch-up. Units are uploaded only after the sync, so units
        beyond a record always point at durable commitlog bytes.

        Raises:
            ProviderError: an upload or the sync failed; what is pending (or written and not
                yet synced) stays for the next call.
        """
        cl = self.write_commitlog(written=written)
        self.commitlog.sync()
        return self._result(cl, self.consume_queue.commit())

    def _result(self, commitlog_bytes: int, consume_queue_bytes: int) -> CommitResult:
        """What a commit that uploaded these bytes completed: every batch appended, once
        nothing is pending any more."""
        done: tuple[tuple[MessageBatch, Int64s], ...] = ()
        after: tuple[Callable[[], None], ...] = ()
        if not self.has_pending:
            done, self._uncommitted = tuple(self._uncommitted), []
            after, self._after = tuple(self._after), []
        return CommitResult(commitlog_bytes, consume_queue_bytes, done, after)

    @staticmethod
    def write_commitlogs(
        flats: Sequence[FlatMessageFile], written: Sequence[Callable[[], None] | None]
    ) -> list[int | TieredStoreError | OSError]:
        """:meth:`write_commitlog` of every queue (``written[i]`` as there for ``flats[i]``),
        the uploads made at once (:meth:`FlatAppendFile.commit_many`); returns, for each, the
        bytes uploaded or the error (its pending bytes stay)."""
        done = FlatAppendFile.commit_many([flat.commitlog for flat in flats])
        for flat, then, got in zip(flats, written, done, strict=True):
            if isinstance(got, int):
                flat._release(then)
        return done

    @staticmethod
    def commit_many(
        flats: Sequence[FlatMessageFile],
    ) -> list[CommitResult | TieredStoreError | OSError]:
        """:meth:`commit` of every queue, meant for those whose commitlog bytes were written
        and made durable already (by :meth:`write_commitlogs` and a ``sync_many``): what is
        left of each commitlog is written and synced queue by queue, then the units of every
        queue whose commitlog is durable are uploaded at once. Returns, for each queue, its
        :class:`CommitResult` or the error its commit raised (what is pending stays)."""
        out: list[CommitResult | TieredStoreError | OSError] = []
        ready: list[tuple[int, FlatMessageFile, int]] = []
        for i, flat in enumerate(flats):
            commitlog, cl = flat.commitlog, 0
            try:  # (a wide round's were all written and synced already)
                if commitlog.pending_size:
                    cl = flat.write_commitlog()
                if commitlog.unsynced:
                    commitlog.sync()
            except (TieredStoreError, OSError) as e:
                out.append(e)
                continue
            out.append(_NOTHING)  # (replaced below)
            ready.append((i, flat, cl))
        units = FlatAppendFile.commit_many([flat.consume_queue for _, flat, _ in ready])
        for (i, flat, cl), cq in zip(ready, units, strict=True):
            out[i] = flat._result(cl, cq) if isinstance(cq, int) else cq
        return out

    def write_commitlog(self, *, written: Callable[[], None] | None = None) -> int:
        """Upload the commitlog's pending bytes without the sync (the first half of
        :meth:`commit`; ``written`` as there); returns how many were uploaded. A round of many
        queues writes every queue's commitlog so, makes them durable at once
        (:meth:`~tiered.providers.base.Provider.sync_many`, then ``commitlog.synced()``), and
        only then commits each (whose commitlog sync then has nothing to do).

        Raises:
            ProviderError: the upload failed; the pending bytes stay for the next call.
        """
        cl = self.commitlog.commit()
        self._release(written)
        return cl

    def _release(self, written: Callable[[], None] | None) -> None:
        """With ``written``, once the commitlog holds every pending byte: free the batches'
        message bytes and call it (see :meth:`commit`)."""
        if written is not None and not self.commitlog.pending_size:
            for batch, _ in self._uncommitted:
                batch.release()
            written()

    def drop_pending(self) -> None:
        """Forget pending bytes of both files (they are re-read from the local store)."""
        self.commitlog.drop_pending()
        self.consume_queue.drop_pending()
        self._uncommitted = []
        self._after = []

    def jump(self, queue_offset: int) -> int:
        """Continue the consumequeue at ``queue_offset`` (local messages before it are gone).

        Returns how many queue offsets were skipped. The committed units stay; a new segment
        starts at the new position (an empty last segment is replaced).
        """
        cq = self.consume_queue
        skipped = queue_offset - cq.commit_queue_offset
        if skipped <= 0:
            return 0
        if self.has_pending:
            self.drop_pending()
        cq.roll(queue_offset * CQ_UNIT_SIZE)
        return skipped

    def flush_metadata(self) -> bool:
        """Record committed sizes and timestamps of both files (run inside a batch)."""
        records = self.changed_records()
        self.metadata.update_segments(records)
        return bool(records)

    def changed_records(self) -> list[FileSegmentMetadata]:
        """Both files' records that changed since they were last recorded (see
        :meth:`FlatAppendFile.changed_records`), for the caller to record."""
        return self.commitlog.changed_records() + self.consume_queue.changed_records()

    def drop_records(self) -> list[str]:
        """Forget both files' segments and remove their records (see
        :meth:`FlatAppendFile.drop_records`); returns the keys to delete once persisted."""
        keys = self.consume_queue.drop_records() + self.commitlog.drop_records()
        self.commitlog.forget_first_queue_offset()
        return keys
