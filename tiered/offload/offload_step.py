"""One dispatch step of one queue: decide, read one batch in bulk, append, upload (spec §8.2).

A step is planned (:func:`plan`, cheap reads of the local consumequeue), its batch is read
together with every other queue's (:meth:`LocalSource.read_unchecked`, one pread per commitlog
range), then carried out in a worker thread (:func:`execute`: appended to the flat commitlog and
consumequeue, uploaded commitlog first); the dispatcher holds the queue's lock throughout and
writes the segment records after the round (one persist per round). See docs/design/offload.md.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Concatenate
from typing import NamedTuple
from typing import ParamSpec

import numpy as np
import numpy.typing as npt

from tiered import metrics
from tiered.broker.consumequeue import BLANK_FILL_SIZE
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.unit_fields import int_sum
from tiered.config import TieredConfig
from tiered.errors import OffsetNotInStoreError
from tiered.errors import StoreFileNotFoundError
from tiered.errors import TieredStoreError
from tiered.file.flat_message_file import CommitResult
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch
from tiered.offload.dispatch_state import Gap
from tiered.offload.dispatch_state import Held
from tiered.offload.dispatch_state import QueueState
from tiered.offload.listeners import CommitListener
from tiered.offload.listeners import Int64s
from tiered.offload.listeners import all_early
from tiered.offload.listeners import notify
from tiered.offload.listeners import prepare_early
from tiered.offload.listeners import prepare_many
from tiered.process.logs import error_fields
from tiered.process.logs import traceback_if_debug
from tiered.source.local_source import LocalSource
from tiered.source.local_source import UncheckedBatch

log = logging.getLogger(__name__)

P = ParamSpec("P")

OBJECT_UNIT_BYTES = 256
"""On object stores a batch holds at most ``objectStoreGroupCommitSize / 256`` messages (so the
consumequeue units a plan reads stay a few MiB)."""


class Limits(NamedTuple):
    """The group-commit thresholds."""

    messages: int  # a batch holds at most this many (tieredStoreGroupCommitCount)
    size_bytes: int
    timeout_ms: int
    group_commit: bool = True
    rolling_hours: int = 24
    rolling_min_bytes: int = 16 << 20

    @classmethod
    def of(cls, cfg: TieredConfig, *, objects: bool) -> Limits:
        """The group-commit limits: upstream's keys, or on a backend where every append is one
        object (S3) the ``objectStoreGroupCommit*`` keys, so a queue uploads a few large objects
        (the broker's store keeps the messages until then; see docs/guides/providers.md)."""
        if not objects:
            count = cfg.tiered_store_group_commit_count
            size = cfg.tiered_store_group_commit_size_bytes
            timeout = cfg.tiered_store_group_commit_timeout_ms
        else:
            size = cfg.object_store_group_commit_size_bytes
            count = max(cfg.tiered_store_group_commit_count, size // OBJECT_UNIT_BYTES)
            timeout = cfg.object_store_group_commit_timeout_ms
        return cls(
            messages=count,
            size_bytes=size,
            timeout_ms=timeout,
            group_commit=cfg.tiered_store_group_commit,
            rolling_hours=cfg.commit_log_rolling_interval_hours,
            rolling_min_bytes=cfg.commit_log_rolling_minimum_size_bytes,
        )


class StepResult(NamedTuple):
    """What one step did."""

    messages: int = 0
    bytes: int = 0
    failed: bool = False
    more: bool = False
    gap: Gap | None = None
    physical: Int64s | None = None  # local physical offsets of the uploaded units
    timestamps: Int64s | None = None


class Plan(NamedTuple):
    """What a step will do for one queue, decided once: retry a failed upload (no ``units``), or
    send ``units`` (read from the local store between planning and :func:`execute`), rolling
    segments first as told."""

    flat: FlatMessageFile
    state: QueueState
    current: int = 0
    lmax: int = 0
    units: npt.NDArray[np.void] | None = None
    read_ahead: npt.NDArray[np.void] | None = None  # the units after the batch (for metrics)
    roll_commitlog: bool = False
    roll_consume_queue: bool = False
    follow: tuple[Plan, ...] = ()
    """The queue's next batches, planned with this one: each is carried out after the one
    before it uploaded whole (:func:`execute_after`), in the same round."""

    @property
    def queue(self) -> tuple[str, int]:
        """``(topic, queue id)``: what plans are keyed by."""
        return self.flat.topic, self.flat.queue_id

    @property
    def retry(self) -> bool:
        """Whether this plan only finishes a failed upload."""
        return self.units is None


def _recorded_in_state(
    step: Callable[Concatenate[FlatMessageFile, QueueState, P], Plan | StepResult],
) -> Callable[Concatenate[FlatMessageFile, QueueState, P], Plan | StepResult]:
    """A queue-level problem ``step`` raises (``TieredStoreError``, ``OSError``) is recorded in
    the queue's state and returned as a failed result, never raised."""

    @functools.wraps(step)
    def recorded(
        flat: FlatMessageFile, state: QueueState, /, *args: P.args, **kwargs: P.kwargs
    ) -> Plan | StepResult:
        try:
            return step(flat, state, *args, **kwargs)
        except (TieredStoreError, OSError) as e:
            return failed(flat, state, e)

    return recorded


@_recorded_in_state
def plan(
    flat: FlatMessageFile,
    state: QueueState,
    local: LocalSource,
    limits: Limits,
    now: int,
    *,
    flush: bool,
    batches: int = 1,
    lmax: int | None = None,
) -> Plan | StepResult:
    """Decide the queue's step (the caller holds the queue's lock): a :class:`Plan`, or the
    result of a step that has nothing to send (idle, holding, caught up, a gap skipped). A
    queue-level problem is recorded in ``state`` and returned as a failed result.

    A previous upload that failed is retried first, from exactly where it stopped. Messages
    below the broker's min offset (deleted before they were offloaded) are skipped as a gap
    (upstream drops the queue's whole tiered history instead). A batch goes when its first
    message is ``tieredStoreGroupCommitTimeout`` old, the backlog reaches
    ``tieredStoreGroupCommitCount`` messages or ``tieredStoreGroupCommitSize`` bytes, or on
    flush; a queue that holds remembers the sizes it read and its first message's store time
    (:class:`~.dispatch_state.Held`), so its next pass reads only the units written since.

    With ``batches`` > 1 a plan that sends may carry up to ``batches - 1`` further full batches
    of the queue (:attr:`Plan.follow`): exactly the batches the next steps would plan once this
    one is uploaded, read with this round's consumequeue units -- none when the segments must
    roll in between (by size, or by time: the commitlog segment is older than
    ``commitLogRollingInterval``), and a partial batch only with ``flush``. ``lmax``: the
    queue's local max offset when the caller asked for it already."""
    topic, qid = flat.topic, flat.queue_id
    state.error = ""
    if flat.has_pending:
        return Plan(flat=flat, state=state)
    current = flat.commit_offset
    held, state.held = state.held, None
    if held is not None and held.current != current:
        held = None
    if lmax is None:
        lmax = local.max_offset(topic, qid)
    state.local_max = lmax
    if current > lmax:
        state.error = (
            f"the tier is ahead of the local store (tiered {current} > local max {lmax}): the "
            "broker store was replaced or reset; the queue is left alone"
        )
        return StepResult()
    if current == lmax:
        _caught_up(flat, state)
        return StepResult()
    want = min(limits.messages, lmax - current)
    # one unit more: where the messages left waiting begin
    need = min(want * batches + 1, lmax - current)
    got = _read_from(local, topic, qid, current, need, held)
    if got is None:
        return _skip_deleted(flat, state, local, now, current)
    if not len(got.sizes):
        return StepResult()  # the broker has not finished writing the unit at `current`
    sizes = got.sizes[:want]
    state.next_physical = got.first_offset
    ready = (
        flush
        or not limits.group_commit
        or lmax - current >= limits.messages
        or int_sum(sizes) >= limits.size_bytes
        or limits.timeout_ms == 0
    )
    if not ready:
        first = (  # (without held, the unit at `current` was just read)
            held.first_time
            if held is not None
            else local.store_time_at(got.first_offset, int(got.sizes[0]))
        )
        ready = first is None or first + limits.timeout_ms <= now
        if not ready:  # (a batch that goes now sets the lag gauges once it is uploaded)
            assert first is not None
            set_behind(flat, state, lmax - current, sizes, now - first)
            state.held = Held(current, got.sizes, got.first_offset, first)
            return StepResult()
    # decided on units earlier passes read: the batch goes as the consumequeue has it now
    if got.units is None:
        got = _read_from(local, topic, qid, current, need, None)
        if got is None:
            return _skip_deleted(flat, state, local, now, current)
        if not len(got.sizes):
            return StepResult()
        sizes = got.sizes[:want]
    units = got.units
    assert units is not None
    if flat.commitlog.try_time_roll(now, limits.rolling_hours, limits.rolling_min_bytes):
        log.info("%s: flat commitlog rolled by time", flat.path)
    n, roll_cl, roll_cq = flat.plan_batch(sizes, limits.size_bytes)
    follow: list[Plan] = []
    # not when a roll comes first, or the segment is old enough to roll by time once it grows
    rolls = roll_cl or roll_cq or flat.commitlog.time_roll_due(now, limits.rolling_hours)
    if batches > 1 and not rolls:
        counts = flat.plan_following(
            got.sizes[:need],
            n,
            limits.size_bytes,
            limits.messages,
            batches - 1,
            partial=flush and need == lmax - current,
        )
        at = n
        for m in counts:
            follow.append(
                Plan(
                    flat=flat,
                    state=state,
                    current=current + at,
                    lmax=lmax,
                    units=units[at : at + m],
                    read_ahead=units[at + m :],
                )
            )
            at += m
    return Plan(
        flat=flat,
        state=state,
        current=current,
        lmax=lmax,
        units=units[:n],
        read_ahead=units[n:],
        roll_commitlog=roll_cl,
        roll_consume_queue=roll_cq,
        follow=tuple(follow),
    )


class _Read(NamedTuple):
    """Consumequeue units from a queue's commit offset: their sizes, the first's commitlog
    offset, and the units themselves when they were all read in this pass."""

    sizes: Int64s
    first_offset: int
    units: npt.NDArray[np.void] | None


def _read_from(
    local: LocalSource, topic: str, qid: int, current: int, count: int, held: Held | None
) -> _Read | None:
    """Up to ``count`` consumequeue units from ``current`` -- only those past the ``held``
    ones read from the store -- or ``None`` when the message at ``current`` is gone (deleted by
    the broker, or a pre-blank fill)."""
    try:
        if held is None:
            units = local.tail_units(topic, qid, current, count)  # what the max offset read
            if units is None:
                units = local.read_units(topic, qid, current, count)
            if not len(units):
                return _Read(np.zeros(0, np.int64), -1, units)
            first = units[0]  # by field: units spanning two files come in a promoted dtype
            offset, size, tags = int(first["offset"]), int(first["size"]), int(first["tags_code"])
            if offset == 0 and size == BLANK_FILL_SIZE and tags == 0:  # a pre-blank fill
                return None
            sizes = units["size"].astype(np.int64)
        else:
            offset, sizes, units = held.first_offset, held.sizes[:count], None
            if len(sizes) < count:
                start = current + len(sizes)
                more = local.tail_units(topic, qid, start, count - len(sizes))
                if more is None:  # not what the max offset's scan just read
                    more = local.read_units(topic, qid, start, count - len(sizes))
                if len(more):
                    sizes = np.concatenate((sizes, more["size"].astype(np.int64)))
    except (OffsetNotInStoreError, StoreFileNotFoundError):
        if held is not None:  # whatever it is, a read from `current` tells it as before
            return _read_from(local, topic, qid, current, count, None)
        return None
    if offset < local.commitlog.min_offset:  # the broker deleted its commitlog file
        return None
    return _Read(sizes, offset, units)


def prepare_staged(staged: Sequence[Sent], listeners: Sequence[object]) -> None:
    """The listeners prepared for many batches staged with ``prepare=False`` (a wide round's
    wave) at once (:func:`~.listeners.prepare_many`)."""
    items = [(s.plan.flat, s.batch, s.offsets) for s in staged if s.offsets is not None]
    for s in staged:
        s.offsets = None
    if items:
        prepare_many(items, listeners)


def execute(
    p: Plan,
    read: UncheckedBatch | MessageBatch | TieredStoreError | None,
    next_store_time: int | None,
    now: int,
    listeners: Sequence[CommitListener] = (),
    written: Callable[[], None] | None = None,
) -> StepResult:
    """Carry out a plan: check the batch read for it (``read``, see
    :meth:`~.local_source.UncheckedBatch.check`), append it and upload (commitlog, then
    consumequeue), then tell ``listeners``. ``next_store_time``: the store time of the first
    message after the batch, read with it (the dispatch latency). Runs in a worker thread while
    the caller holds the queue's lock.

    When the listeners can do their share before the upload (:class:`EarlyListener`), the
    batch's bytes are freed as soon as the flat commitlog holds them, before its sync, and
    ``written`` is called then (:meth:`FlatMessageFile.commit`)."""
    sent = send(p, read, next_store_time, now, listeners, written)
    return sent if isinstance(sent, StepResult) else finish(sent, now, listeners)


@dataclass
class Sent:
    """A batch appended to its queue's flat files by :func:`stage`, its commitlog bytes then
    written by :func:`send` (or, a wide round's all at once,
    :meth:`~tiered.file.flat_message_file.FlatMessageFile.write_commitlogs`) and not yet known
    durable: :func:`finish` completes it (commitlog sync, consumequeue units, bookkeeping)."""

    plan: Plan
    batch: MessageBatch
    next_store_time: int | None
    started: float
    early: bool
    """The listeners did their share already (:func:`~.listeners.prepare_early`), or do it
    with the wave's (:func:`prepare_staged`): nothing needs the batch's bytes once the flat
    commitlog holds them."""
    commitlog_bytes: int = 0
    offsets: Int64s | None = None
    """The batch's flat commitlog offsets while :func:`prepare_staged` has yet to prepare it."""


def send(
    p: Plan,
    read: UncheckedBatch | MessageBatch | TieredStoreError | None,
    next_store_time: int | None,
    now: int,
    listeners: Sequence[CommitListener] = (),
    written: Callable[[], None] | None = None,
) -> StepResult | Sent:
    """The first half of :func:`execute`: check and append the batch (:func:`stage`), write
    its commitlog bytes (``written`` as there); a retry of a failed upload is carried out
    whole. A round of many queues stages every queue's batch, writes and makes their
    commitlogs durable at once, then finishes them (:func:`finish`)."""
    staged = stage(p, read, next_store_time, now, listeners)
    if isinstance(staged, StepResult):
        return staged
    flat = p.flat
    try:
        staged.commitlog_bytes = flat.write_commitlog(written=written if staged.early else None)
    except (TieredStoreError, OSError) as e:
        return failed(flat, p.state, e)
    return staged


def stage(
    p: Plan,
    read: UncheckedBatch | MessageBatch | TieredStoreError | None,
    next_store_time: int | None,
    now: int,
    listeners: Sequence[CommitListener] = (),
    *,
    prepare: bool = True,
) -> StepResult | Sent:
    """Check the batch read for a plan and append it to the queue's flat files (nothing
    uploaded yet), the listeners prepared where they can be (with ``prepare=False``, by the
    caller's :func:`prepare_staged` of many at once); a retry of a failed upload is carried
    out whole (its result returned)."""
    flat, state = p.flat, p.state
    try:
        if p.retry:  # a previous upload failed: finish it, from where it stopped
            started = time.perf_counter()
            done = flat.commit()
            _log_batches(flat, done, started)
            _count(flat, state, done.messages, done.commitlog_bytes, now)
            state.failures = 0
            notify(flat, done, listeners)
            return StepResult(messages=done.messages, bytes=done.commitlog_bytes, more=True)
        if isinstance(read, TieredStoreError):
            raise read  # deleted under us: the next round plans again
        # checked here, not where it was read: a batch being rewritten raises, planned again
        batch = read.check() if isinstance(read, UncheckedBatch) else read
        assert batch is not None and p.units is not None
        flat.roll_for_batch(p.roll_commitlog, p.roll_consume_queue)
        offsets = flat.append_batch(batch)
        if not prepare and all_early(listeners):
            return Sent(p, batch, next_store_time, time.perf_counter(), True, offsets=offsets)
        early = prepare_early(flat, batch, offsets, listeners)
    except (TieredStoreError, OSError) as e:
        return failed(flat, state, e)
    return Sent(p, batch, next_store_time, time.perf_counter(), early)


def stage_many(
    wave: Sequence[Plan],
    reads: Sequence[tuple[UncheckedBatch | MessageBatch | TieredStoreError | None, int | None]],
    local: LocalSource,
    now: int,
    listeners: Sequence[CommitListener],
    results: list[tuple[FlatMessageFile, StepResult]],
) -> list[Sent]:
    """:func:`stage` of each plan of a wide round's wave (one plan per queue) with
    ``prepare=False`` (``reads[i]``: plan ``i``'s batch and the store time after it): when the
    listeners may be prepared early, the batches of the plans that send are checked at once
    (:meth:`~.local_source.LocalSource.check_many`) and appended at once
    (:meth:`~tiered.file.flat_message_file.FlatMessageFile.append_many`), the others one by
    one. The steps staged are returned in wave order; the failed ones' results go to
    ``results``."""
    out: list[Sent | StepResult | None] = [None] * len(wave)
    bulk: list[int] = []
    unchecked: list[UncheckedBatch] = []
    early = all_early(listeners)
    for i, (p, (read, _)) in enumerate(zip(wave, reads, strict=True)):
        if early and not p.retry and isinstance(read, UncheckedBatch):
            bulk.append(i)
            unchecked.append(read)
    started = time.perf_counter()
    ready: list[tuple[int, MessageBatch]] = []
    for i, got in zip(bulk, local.check_many(unchecked), strict=True):
        p = wave[i]
        try:
            if not isinstance(got, MessageBatch):
                raise got  # checked here, as stage checks: planned again next round
            p.flat.roll_for_batch(p.roll_commitlog, p.roll_consume_queue)
        except (TieredStoreError, OSError) as e:
            out[i] = failed(p.flat, p.state, e)
            continue
        ready.append((i, got))
    appended = FlatMessageFile.append_many([wave[i].flat for i, _ in ready], [b for _, b in ready])
    for (i, batch), offsets in zip(ready, appended, strict=True):
        p = wave[i]
        if isinstance(offsets, TieredStoreError):
            out[i] = failed(p.flat, p.state, offsets)
        else:
            out[i] = Sent(p, batch, reads[i][1], started, True, offsets=offsets)
    staged: list[Sent] = []
    for i, p in enumerate(wave):
        done = out[i]
        if done is None:
            done = stage(p, reads[i][0], reads[i][1], now, listeners, prepare=False)
        if isinstance(done, Sent):
            staged.append(done)
        else:
            results.append((p.flat, done))
    return staged


def write_commitlogs(
    staged: list[Sent],
    results: list[tuple[FlatMessageFile, StepResult]],
    written: Callable[[], None] | None = None,
) -> list[Sent]:
    """Write the commitlog bytes of many queues' staged batches at once (a wide round's,
    :meth:`~tiered.file.flat_message_file.FlatMessageFile.write_commitlogs`; ``written`` as
    :func:`execute` has it, for each batch whose listeners were prepared early). The batches
    written are returned; a failed step's result is added to ``results``."""
    flats = [s.plan.flat for s in staged]
    done = FlatMessageFile.write_commitlogs(flats, [written if s.early else None for s in staged])
    sent: list[Sent] = []
    for s, got in zip(staged, done, strict=True):
        if isinstance(got, int):
            s.commitlog_bytes = got
            sent.append(s)
        else:
            results.append((s.plan.flat, failed(s.plan.flat, s.plan.state, got)))
    return sent


def commit_wave(
    sent: list[Sent],
    synced: Callable[[], None],
    now: int,
    listeners: Sequence[CommitListener] = (),
) -> list[tuple[FlatMessageFile, StepResult]]:
    """A wide round's wave once its commitlogs are durable (``synced`` waits for that, and
    raises what their sync raised): its queues' units written at once
    (:meth:`~tiered.file.flat_message_file.FlatMessageFile.commit_many`), then each step
    finished (:func:`finish`)."""
    synced()
    commits = FlatMessageFile.commit_many([s.plan.flat for s in sent])
    counts = Counts()  # (the wave's metrics at once)
    try:
        return [
            (s.plan.flat, finish(s, now, listeners, c, counts))
            for s, c in zip(sent, commits, strict=True)
        ]
    finally:
        counts.write()


def finish(
    sent: Sent,
    now: int,
    listeners: Sequence[CommitListener] = (),
    committed: CommitResult | TieredStoreError | OSError | None = None,
    counts: Counts | None = None,
) -> StepResult:
    """The second half of :func:`execute`: sync the commitlog (nothing to do when the round
    synced it), upload the units, tell ``listeners``, record what the queue has left.
    ``committed``: that commit's outcome when the caller made it (a wide round commits every
    queue at once, :meth:`~tiered.file.flat_message_file.FlatMessageFile.commit_many`);
    ``counts``: where the upload is counted for the caller to write to the metrics."""
    p, batch = sent.plan, sent.batch
    flat, state = p.flat, p.state
    try:
        done = flat.commit() if committed is None else committed
        if not isinstance(done, CommitResult):
            raise done
    except (TieredStoreError, OSError) as e:
        return failed(flat, state, e)
    _log_batches(flat, done, sent.started)
    state.failures = 0
    _count(flat, state, done.messages, sent.commitlog_bytes + done.commitlog_bytes, now, counts)
    notify(flat, done, listeners)
    n = len(batch)
    units = p.units
    assert units is not None
    remaining = p.lmax - p.current - n
    after = p.read_ahead
    if after is not None and len(after):
        state.next_physical = int(after["offset"][0])
    elif remaining:
        state.next_physical = int(units["offset"][-1]) + int(units["size"][-1])
    else:
        state.next_physical = None
    ahead = after["size"].astype(np.int64) if remaining > 0 and after is not None else _NO_SIZES
    waiting = _waiting_ms(sent.next_store_time, batch, remaining, now)
    set_behind(flat, state, remaining, ahead, waiting)
    return StepResult(
        messages=n,
        bytes=batch.nbytes,
        more=remaining > 0,
        physical=units["offset"].astype(np.int64),
        timestamps=batch.timestamps,
    )


_NO_SIZES: Int64s = np.zeros(0, np.int64)
_NO_SIZES.flags.writeable = False


def execute_after(
    before: Future[StepResult],
    expected: int,
    p: Plan,
    read: UncheckedBatch | TieredStoreError | None,
    next_store_time: int | None,
    now: int,
    listeners: Sequence[CommitListener] = (),
    written: Callable[[], None] | None = None,
) -> StepResult:
    """:func:`execute` a follow-on plan (:attr:`Plan.follow`) once the step ``before`` it has
    uploaded all of its ``expected`` messages; when that step failed or sent less, nothing is
    done (its batch is read again by a later round) and the result asks for more.

    ``before`` was handed to the workers ahead of this one, so it is running or done when this
    starts: the wait is for one upload at most, never for a queued task."""
    done = before.result()
    if done.failed or done.messages != expected:
        return StepResult(more=True)
    return execute(p, read, next_store_time, now, listeners, written)


def _waiting_ms(next_store_time: int | None, batch: MessageBatch, remaining: int, now: int) -> int:
    """Dispatch latency after a batch (spec §13): the age of the first message not yet
    offloaded, 0 when none waits. Its store time was read with the batch; should it be unknown
    (the broker was rewriting it), the newest message just sent gives a lower bound."""
    if remaining <= 0:
        return 0
    if next_store_time is not None:
        return now - next_store_time
    return now - int(batch.timestamps.max()) if len(batch) else 0


def failed(flat: FlatMessageFile, state: QueueState, error: BaseException) -> StepResult:
    """Record a failed step (retried next round): one WARNING line naming the object (its
    traceback only at DEBUG)."""
    state.failures += 1
    state.error = str(error)
    metrics.child(metrics.DISPATCH_ERRORS, *metrics.queue_labels(flat.topic, flat.queue_id)).inc()
    fields = error_fields(error, topic=flat.topic, queue_id=flat.queue_id)
    log.warning(
        "%s: dispatch failed (attempt %d, object %s): %s",
        flat.path,
        state.failures,
        fields.get("objectKey", "-"),
        error,
        extra=fields,
        exc_info=traceback_if_debug(log, error),
    )
    return StepResult(failed=True)


def _log_batches(flat: FlatMessageFile, done: CommitResult, started: float) -> None:
    """One DEBUG line per batch this commit completed (both files uploaded)."""
    if not done.batches or not log.isEnabledFor(logging.DEBUG):
        return
    ms = round((time.perf_counter() - started) * 1000.0, 1)
    for batch, offsets in done.batches:
        n = len(batch)
        first = batch.queue_offset
        commitlog_key = flat.commitlog.key_at(int(offsets[0]) if n else 0)
        consume_queue_key = flat.consume_queue.key_at(first * CQ_UNIT_SIZE)
        log.debug(
            "uploaded batch %s offsets [%d, %d) %d messages %.1f KiB in %.1f ms to %s and %s",
            flat.path,
            first,
            first + n,
            n,
            batch.nbytes / 1024,
            ms,
            commitlog_key,
            consume_queue_key,
            extra={
                "topic": flat.topic,
                "queueId": flat.queue_id,
                "fromOffset": first,
                "toOffset": first + n,
                "messages": n,
                "bytes": batch.nbytes,
                "commitLogKey": commitlog_key,
                "consumeQueueKey": consume_queue_key,
                "ms": ms,
            },
        )


def _skip_deleted(
    flat: FlatMessageFile, state: QueueState, local: LocalSource, now: int, current: int
) -> StepResult:
    """The broker deleted local data at ``current`` before it was offloaded: record the gap and
    continue at the local min offset."""
    local.refresh()
    lmin = local.min_offset(flat.topic, flat.queue_id)
    state.local_min = lmin
    if lmin <= current:
        raise OffsetNotInStoreError(
            f"{flat.path}: queue offset {current} could not be read but the local min offset is "
            f"{lmin}; retried next round"
        )
    skipped = flat.jump(lmin)
    gap = Gap(current, lmin, now)
    state.gaps.append(gap)
    labels = metrics.queue_labels(flat.topic, flat.queue_id)
    metrics.child(metrics.DISPATCH_GAP_MESSAGES, *labels).inc(skipped)
    log.warning(
        "%s: the broker deleted queue offsets [%d, %d) (%d messages) before they were "
        "offloaded; they are not in the tier (a gap), offloading continues at %d",
        flat.path,
        current,
        lmin,
        skipped,
        lmin,
    )
    return StepResult(gap=gap, more=True)


class Counts:
    """Many steps' uploads, counted in the metrics at once (:meth:`write`): a wide round's
    thousands of steps would each take the families' locks four times."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, str], int] = {}
        self.bytes: dict[tuple[str, str], int] = {}
        self.sizes: list[tuple[str, float, str]] = []

    def add(self, flat: FlatMessageFile, messages: int, nbytes: int) -> None:
        """Count a step of ``flat``'s queue (as :func:`_count` does)."""
        labels = metrics.queue_labels(flat.topic, flat.queue_id)
        if messages:
            self.messages[labels] = self.messages.get(labels, 0) + messages
        self.bytes[labels] = self.bytes.get(labels, 0) + nbytes
        path = flat.path
        self.sizes.append((path, flat.commitlog.committed_bytes, "commit_log"))
        self.sizes.append((path, flat.consume_queue.committed_bytes, "consume_queue"))

    def write(self) -> None:
        """Add what was counted to the metric families (once per series), and forget it."""
        messages, nbytes, sizes = self.messages, self.bytes, self.sizes
        self.messages, self.bytes, self.sizes = {}, {}, []
        for labels, n in messages.items():
            metrics.child(metrics.MESSAGES_DISPATCH, *labels, "commit_log").inc(n)
        for labels, n in nbytes.items():
            metrics.child(metrics.DISPATCH_BYTES, *labels).inc(n)
        metrics.QUEUE_STORAGE_SIZE.set_paths(sizes)


def _count(
    flat: FlatMessageFile, state: QueueState, messages: int, nbytes: int, now: int,
    counts: Counts | None = None,
) -> None:  # fmt: skip
    if not messages and not nbytes:
        return
    state.last_upload_ms = now
    if counts is not None:
        counts.add(flat, messages, nbytes)
        return
    labels = metrics.queue_labels(flat.topic, flat.queue_id)
    if messages:
        metrics.child(metrics.MESSAGES_DISPATCH, *labels, "commit_log").inc(messages)
    metrics.child(metrics.DISPATCH_BYTES, *labels).inc(nbytes)
    size = metrics.QUEUE_STORAGE_SIZE
    size.set_path(flat.path, flat.commitlog.committed_bytes, "commit_log")
    size.set_path(flat.path, flat.consume_queue.committed_bytes, "consume_queue")


def set_behind(
    flat: FlatMessageFile, state: QueueState, messages: int, known: Int64s, latency_ms: int
) -> None:
    """Set the queue's lag (``messages`` waiting, their bytes estimated from the ``known``
    sizes of the first ones, the first one's age) in its state and, when it changed, in the
    lag gauges."""
    if messages > 0 and len(known):
        total = int_sum(known)
        estimate = total + (messages - len(known)) * int(total / len(known))
    else:
        estimate = 0
    state.behind, state.behind_bytes = messages, max(estimate, 0)
    shown = (messages, state.behind_bytes, max(latency_ms, 0))
    if shown == state.published:  # an idle queue: the gauges hold these already
        return
    state.published = shown
    topic, qid = flat.topic, flat.queue_id
    metrics.QUEUE_BEHIND.set(topic, qid, shown[0], "consume_queue")
    metrics.QUEUE_BEHIND_BYTES.set(topic, qid, shown[1])
    metrics.QUEUE_LATENCY.set(topic, qid, shown[2], "consume_queue")


def measure(
    flat: FlatMessageFile, state: QueueState, local: LocalSource, count: int, now: int
) -> None:
    """Set the queue's lag gauges without planning a step, while uploads are paused: the
    messages waiting, their bytes (estimated from the first ``count`` units) and the age of the
    first. Only reads; a queue that cannot be read keeps its gauges (the next step says why)."""
    current = flat.commit_offset
    try:
        lmax = local.max_offset(flat.topic, flat.queue_id)
        if current >= lmax:
            state.local_max = lmax
            _caught_up(flat, state)
            return
        units = local.read_units(flat.topic, flat.queue_id, current, min(count, lmax - current))
        first = local.store_time(flat.topic, flat.queue_id, current)
    except (TieredStoreError, OSError):
        return
    state.local_max = lmax
    if len(units):
        state.next_physical = int(units["offset"][0])
    sizes = units["size"].astype(np.int64)
    set_behind(flat, state, lmax - current, sizes, now - first if first is not None else 0)


def _caught_up(flat: FlatMessageFile, state: QueueState) -> None:
    state.next_physical = None
    set_behind(flat, state, 0, _NO_SIZES, 0)
