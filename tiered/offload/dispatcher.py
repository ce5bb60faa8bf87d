"""The dispatcher: local store -> tier, in rounds of a batch or two per ready queue (spec §8).

A **round** lists the local queues, skips filtered topics, gives a new queue its start position
(``tieredStoreDispatchStartPolicy``), runs one step per queue (:mod:`.offload_step`) on a bounded
thread pool, and records every queue's committed sizes with **one** metadata persist. A **pass**
runs rounds back to back while some queue still has ready work; a queue that keeps failing is
retried a few times with backoff, then left for the next pass. After a round, cold commitlog
ranges every queue is past are released from the page cache (:data:`COLD_AGE_MS`). Only a master
uploads (``brokerRole`` != SLAVE and ``brokerId`` == 0, or ``tieredStoreUploadOnSlave``); otherwise
a pass does nothing and the role is ``standby`` (``read-only`` with ``tieredStoreReadOnly``). While
uploads are paused (:mod:`.pause`, looked at before every round) a pass only refreshes the lag
gauges. See docs/design/offload.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tiered import metrics
from tiered.closeable import Closeable
from tiered.config import DispatchStartPolicy
from tiered.config import TieredConfig
from tiered.errors import ProviderError
from tiered.errors import TieredStoreError
from tiered.file.flat_append_file import FlatAppendFile
from tiered.file.flat_append_file import durable
from tiered.file.flat_file_store import FlatFileStore
from tiered.file.flat_message_file import FlatMessageFile
from tiered.metadata import now_ms
from tiered.offload.commit_notifier import Held
from tiered.offload.commit_notifier import Notifier
from tiered.offload.commit_notifier import freed
from tiered.offload.commit_notifier import held_all
from tiered.offload.commit_notifier import waves
from tiered.offload.commit_notifier import wide_slices
from tiered.offload.dispatch_state import PassReport
from tiered.offload.dispatch_state import QueueState
from tiered.offload.dispatch_state import StateFile
from tiered.offload.dispatch_state import StateSnapshot
from tiered.offload.listeners import CommitListener
from tiered.offload.listeners import StagedListener
from tiered.offload.listeners import StagedMany
from tiered.offload.offload_step import Limits
from tiered.offload.offload_step import Plan
from tiered.offload.offload_step import Sent
from tiered.offload.offload_step import StepResult
from tiered.offload.offload_step import commit_wave
from tiered.offload.offload_step import execute
from tiered.offload.offload_step import execute_after
from tiered.offload.offload_step import measure
from tiered.offload.offload_step import plan
from tiered.offload.offload_step import prepare_staged
from tiered.offload.offload_step import stage_many
from tiered.offload.offload_step import write_commitlogs
from tiered.offload.pass_queues import PassQueues
from tiered.offload.pass_queues import QueueProgress
from tiered.offload.pause import PauseFile
from tiered.offload.pause import PauseWatch
from tiered.offload.wide_plan import plan_many
from tiered.process.background import in_background
from tiered.process.collector import collector_paused
from tiered.process.logs import error_fields
from tiered.process.offload_priority import with_nice
from tiered.source.batch_request import BatchRequest
from tiered.source.local_source import LocalSource
from tiered.source.local_source import UncheckedBatch
from tiered.source.topic_filter import TopicFilter

log = logging.getLogger(__name__)
_Batch = UncheckedBatch | TieredStoreError | None
"""A step's batch as read for it (an error: it could not be read; None: a retry reads none)."""

COLD_AGE_MS = 300_000
"""Commitlog data older than this is cold: its pages are released once every queue is past it."""
RECENT_LOOKBACK_MS = 120_000
"""``RECENT`` start policy: a new queue starts at the first message of the last 2 minutes."""
MAX_WORKERS = 8
MEMORY_WORKERS = 2
"""Workers for the ``memory`` backend: its appends are memory copies, so more threads only
contend for the interpreter lock. A ``posix`` append waits in ``fdatasync`` for the disk, which
more workers overlap with the other batches' work (see docs/benchmarks.md)."""
WAVE_BYTES = 64 << 20
"""Message bytes read at once (the batches of several queues; at least two batches); the next
wave is read once no more than an eighth of this one's bytes are held
(:class:`~.commit_notifier.Held`: a batch's are freed when the flat commitlog holds them,
before their sync), so at most 1.125 times this is in memory."""
ROUND_BATCHES = 2
"""Batches a round may send per queue on a file backend (:attr:`~.offload_step.Plan.follow`; one
on an object store, see ``Dispatcher.round_batches``): a queue's second batch is read, with every
other queue's, while the first ones upload, so the workers do not wait for each round's read."""
MIRROR_INTERVAL_S = 5.0
"""While offloading the metadata's backend mirror is put at most this often (seconds), at the end
of a pass too only once due (close puts what is left); the local file is still written every
round. A catch-up's rounds come every few hundred milliseconds, a live tail's passes every
second: a mirror put each would cost a file write or a PUT each time."""
STATE_REFRESH_S = 10.0
"""The state file is written after a round that changed what ``status`` shows of a queue (its
last upload, error or gaps) or the role, else at most this often while local offsets move (its
local offsets, round count and time): a write per idle pass would cost more than the pass."""
STATE_IDLE_REFRESH_S = 60.0
"""... and at most this often when nothing moved (the round count and the time)."""
LEARN_BOUNDS_QUEUES = 64
"""New queues (not yet in the tier) in a round from which their local bounds are read all at
once (:meth:`~tiered.source.local_source.LocalSource.learn_bounds`) before each is given its
start; fewer are read queue by queue."""
WIDE_ROUND_QUEUES = 256
"""A round of at least this many queues on a backend that defers syncs (posix) is *wide*: one
batch per queue, every queue's commitlog bytes written before any is synced, all of them made
durable at once, then every queue's units (:meth:`Dispatcher._run_wide`): a round of many small
batches otherwise waits for two ``fdatasync`` calls per queue. Fewer queues keep the pipelined
round, whose syncs overlap the next batches' reads."""
WIDE_WAVE_QUEUES = 4096
"""A wide round holds at most this many queues' batches at once, in two waves (each wave's
commitlogs are made durable with one ``sync_many`` while the next is written)."""
WIDE_TAIL_QUEUES = 256
"""A wide round's waves shrink by halves towards its end, to about this many queues: the syncs
of the last wave's commitlogs and units wait with nothing left to overlap them, so they should
have little to write."""
SYNC_MANY_FILES = 64
"""From this many files a round syncs them with one ``sync_many`` of the provider."""
PAUSED_MEASURE_S = 30.0
"""While uploads are paused, the queues' lag gauges are refreshed at most this often (a few
local reads per queue), so they and the FallingBehind alert keep showing the lag that builds."""
FILES_MEASURE_S = 10.0
"""The behind-files gauge is set at most this often when rounds move nothing."""
MAX_FAILURES = 10
"""Consecutive failures of one queue within a pass before the pass stops retrying it."""
_BACKOFF_S = 0.05


class Dispatcher(Closeable):
    """Moves messages from the broker's store to the tier; see the module docstring."""

    def __init__(
        self,
        cfg: TieredConfig,
        local: LocalSource,
        store: FlatFileStore,
        *,
        topic_filter: TopicFilter | None = None,
        state_file: StateFile | None = None,
        clock: Callable[[], int] = now_ms,
        workers: int | None = None,
        uploads: bool | None = None,
        pause: PauseFile | None = None,
    ) -> None:
        self.cfg = cfg
        self.local = local
        self.flat_store = store
        self.filter = topic_filter or TopicFilter.from_config(cfg)
        self.state_file = state_file
        self.clock = clock
        objects = store.provider.object_per_append
        self.limits = Limits.of(cfg, objects=objects)
        self.wave_bytes = max(WAVE_BYTES, self.limits.size_bytes)
        self.round_batches = 1 if objects else ROUND_BATCHES
        """Batches a round sends per queue: one on an object store, whose batches (each an
        object of ``objectStoreGroupCommitSize``) fill a wave each, so the next is read while one
        uploads anyway, and whose consumequeue units for a second batch would double what a
        round holds (up to 10 MiB a queue)."""
        self.uploading = cfg.uploads if uploads is None else uploads
        self._held = Held()
        in_memory = cfg.tiered_backend_service_provider == "memory"
        cap = MEMORY_WORKERS if in_memory else MAX_WORKERS
        self.workers = workers or max(1, min(cfg.tiered_store_max_pending_limit // 4, cap))
        nice = with_nice(cfg.tiered_offload_nice)
        self._pool = ThreadPoolExecutor(self.workers, "tiered-dispatch", initializer=nice)
        self._pass_lock = threading.Lock()
        snapshot = state_file.load() if state_file else StateSnapshot()
        self.states: dict[tuple[str, int], QueueState] = snapshot.queues
        self.rounds = snapshot.rounds
        self.released_upto = 0
        self.released_bytes = 0
        self.commit_listeners: list[CommitListener] = []
        self.staged_listeners: list[StagedListener] = []
        self._notifier = Notifier(self.commit_listeners, self.staged_listeners, nice)
        self._state_saved = -STATE_REFRESH_S
        self._state_asked: set[tuple[str, int]] = set()
        """Queues whose state was asked for since the state file was last saved: the only ones
        whose rows in it can have changed."""
        self._state_shown: dict[tuple[str, int], tuple[int, str, int]] = {}
        self._state_offsets: dict[tuple[str, int], tuple[int, int]] = {}
        self._state_role = ""
        self._state_moved = False
        self._state_stale = False
        self.unreadable: dict[str, str] = {}
        """Queues skipped because their local files cannot be read: queue path -> why."""
        self.listed: list[tuple[str, int]] = []
        """The local queues to offload, as the last look at every one listed them."""
        scan_ms = cfg.tiered_store_queue_scan_interval_ms
        self.pass_queues = (
            PassQueues(
                local,
                self.filter,
                scan_interval_ms=scan_ms,
                pass_interval_ms=cfg.tiered_store_dispatch_interval_ms,
            )
            if scan_ms > 0
            else None
        )
        """Which queues a following pass looks at (None: every queue, every pass)."""
        self._pause = PauseWatch(pause, self._resumed) if pause is not None else None
        self._measured = -PAUSED_MEASURE_S
        self._files_measured = -FILES_MEASURE_S
        read_only = cfg.tiered_store_read_only
        metrics.DISPATCH_STANDBY.set(0 if self.uploading or read_only else 1)
        metrics.READ_ONLY.set(1 if read_only else 0)

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Call ``listener(flat, batch, flat_offsets)`` after each batch is uploaded whole
        (commitlog and consumequeue), e.g. to index its keys: on one thread, in the order the
        batches were committed (so a queue's batches in queue order), every batch of a pass
        before :meth:`run_pass` returns. A batch uploaded but not yet told when the process dies
        is not told again after the restart."""
        self.commit_listeners.append(listener)

    def add_staged_listener(
        self,
        listener: StagedListener,
        round_scope: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
        many: StagedMany | None = None,
    ) -> None:
        """Call ``listener(flat, batch, flat_offsets)`` in the worker that uploads each batch,
        before its uploads (the batch is appended: its flat offsets are known), and the step it
        returns (if not None) once both uploads succeeded, as a commit listener is called: on
        one thread, a queue's batches in queue order, all before :meth:`run_pass` returns. An
        upload that fails keeps the step for the retry that completes the batch. The step
        holds what the listener took from the batch (e.g. index items), not the batch: with
        only staged listeners, the batch's message bytes are freed as soon as the flat
        commitlog holds them, before its sync (a plain commit listener is handed the batch
        after the uploads, bytes included). ``round_scope``: entered around a wide round's
        steps, which are told on the dispatching thread (e.g. to gather the round's puts).
        ``many``: the listener's form for many queues' batches at once, called with a wide
        round's wave (e.g. to hash all their keys in one call)."""
        self.staged_listeners.append(listener)
        if many is not None:
            self._notifier.many[listener] = many
        if round_scope is not None:
            self._notifier.scopes.append(round_scope)

    @property
    def role(self) -> str:
        """``master`` when this sidecar uploads, else ``read-only`` (``tieredStoreReadOnly``)
        or ``standby``."""
        if self.uploading:
            return "master"
        return "read-only" if self.cfg.tiered_store_read_only else "standby"

    def paused(self) -> bool:
        """Whether uploads are paused now (:class:`~.pause.PauseWatch`: a ``stat`` of its
        file)."""
        return self._pause is not None and self._pause.paused()

    def _resumed(self) -> None:
        """Uploads resumed: the next following pass looks at every queue (the commitlog went on
        while nobody followed it)."""
        if self.pass_queues is not None:
            self.pass_queues.feed.stop()

    def close(self, *, cancel: bool = False) -> None:
        """Wait for running steps and stop the worker threads (``cancel``: drop queued ones),
        then write the state file as it is."""
        self._pool.shutdown(wait=True, cancel_futures=cancel)
        self._notifier.close()
        if self._state_stale:
            self._save_state(sync=False, force=True)

    def state(self, topic: str, queue_id: int) -> QueueState:
        """The run-time state of a queue (created on first use)."""
        key = (topic, queue_id)
        self._state_asked.add(key)  # (what changes a queue's state asks for it here first)
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = QueueState(topic, queue_id)
        return st

    def forget(self, topic: str, queue_id: int) -> bool:
        """Drop the run-time state of a queue the broker deleted (see
        :mod:`.topic_retire`); whether there was any."""
        key = (topic, queue_id)
        held = self.states.pop(key, None) is not None
        self._state_shown.pop(key, None)
        self._state_offsets.pop(key, None)
        if self.pass_queues is not None:
            held = self.pass_queues.work.pop(key, None) is not None or held
        self._state_stale = self._state_stale or held
        return held

    # --- targets --------------------------------------------------------------------------------

    def targets(self, only: list[tuple[str, int]] | None = None) -> list[FlatMessageFile]:
        """The flat files of every local queue to offload (of the queues ``only`` names, those
        the broker has), initialised on first sight."""
        self.local.refresh()
        if only is None:
            wanted = self.listed = [k for k in self.local.queues() if self.filter.allows(k[0])]
        else:
            asked = [k for k in dict.fromkeys(only) if self.filter.allows(k[0])]
            wanted = [
                k for k, here in zip(asked, self.local.has_queues(asked), strict=True) if here
            ]
        # new queues' records: persisted once, by _init; the collector paused while thousands of
        # queues get their long-lived records (it would traverse them again and again)
        with collector_paused(len(wanted) >= WIDE_ROUND_QUEUES), durable(self.flat_store.metadata):
            return self._targets(wanted)

    def _targets(self, wanted: list[tuple[str, int]]) -> list[FlatMessageFile]:
        found: list[FlatMessageFile] = []
        fresh: list[tuple[FlatMessageFile, int]] = []
        flats = self.flat_store.get_or_create_many(wanted)
        new = [(f.topic, f.queue_id) for f in flats if not f.initialized]
        if len(new) >= LEARN_BOUNDS_QUEUES:  # their bounds at once, not a listing each
            self.local.learn_bounds(new)
        with self.local.scanned_ahead(new):  # (their max offsets at once, from those bounds)
            for flat in flats:
                if not flat.initialized:
                    start = self._start_offset(flat.topic, flat.queue_id)
                    if start is None:
                        self.unreadable[flat.path] = self.state(flat.topic, flat.queue_id).error
                        continue
                    self.unreadable.pop(flat.path, None)
                    fresh.append((flat, start))
                found.append(flat)
        if fresh:
            failed = self._init(fresh)
            found = [f for f in found if f.initialized and (f.topic, f.queue_id) not in failed]
        return found

    def _start_offset(self, topic: str, qid: int) -> int | None:
        """Where a new queue's offload starts (recorded in its state), or None (the local queue
        cannot be read; its state says why)."""
        st = self.state(topic, qid)
        try:
            st.local_min, st.local_max, start = self._start_of(topic, qid)
        except (TieredStoreError, OSError) as e:
            st.error = f"cannot read the local queue: {e}"
            return None
        return start

    def _start_of(self, topic: str, qid: int) -> tuple[int, int, int]:
        """``(local min, local max, start)`` of a queue not yet in the tier, by
        ``tieredStoreDispatchStartPolicy``; only reads."""
        lmin = self.local.min_offset(topic, qid)
        lmax = self.local.max_offset(topic, qid)
        if self.cfg.tiered_store_dispatch_start_policy is DispatchStartPolicy.EARLIEST:
            return lmin, lmax, lmin
        since = self.clock() - RECENT_LOOKBACK_MS
        return lmin, lmax, min(max(self.local.offset_by_time(topic, qid, since), lmin), lmax)

    def _init(self, fresh: list[tuple[FlatMessageFile, int]]) -> set[tuple[str, int]]:
        """Initialise new queues, their records persisted once before any data."""
        failed: set[tuple[str, int]] = set()
        sizes = FlatMessageFile.tier_sizes(fresh)  # (is anything there yet: asked at once)
        with durable(self.flat_store.metadata):
            for flat, start in fresh:
                try:
                    flat.init(start, persist=False, sizes=sizes)
                    log.info("%s: first seen, offloading from queue offset %d", flat.path, start)
                except TieredStoreError as e:
                    failed.add((flat.topic, flat.queue_id))
                    self.state(flat.topic, flat.queue_id).error = str(e)
                    fields = error_fields(e, topic=flat.topic, queue_id=flat.queue_id)
                    log.error("%s: %s", flat.path, e, extra=fields)
        return failed

    # --- rounds and passes ----------------------------------------------------------------------

    def run_round(
        self,
        *,
        flush: bool = False,
        skip: set[tuple[str, int]] | None = None,
        only: list[tuple[str, int]] | None = None,
    ) -> list[tuple[FlatMessageFile, StepResult]]:
        """One step for every target queue (of ``only``, when given), then one metadata persist.

        Steps are planned queue by queue, their batches read together (one pread per commitlog
        range, in waves of at most :data:`WAVE_BYTES`) and carried out concurrently. The round
        holds every target queue's lock (expiry waits for it).
        """
        now = self.clock()
        skipped = skip or ()
        flats = [f for f in self.targets(only) if (f.topic, f.queue_id) not in skipped]
        results: list[tuple[FlatMessageFile, StepResult]] = []
        wide = len(flats) >= WIDE_ROUND_QUEUES and self.flat_store.provider.defers_sync
        batches = 1 if wide else self.round_batches
        with collector_paused(wide):
            with held_all([flat.lock for flat in flats]):  # (until the units are durable)
                follow: list[Plan] = []  # every queue's second batch, then every third...
                if wide:
                    results += self._run_wide(flats, results, now, flush)
                else:
                    plans = self._plan(flats, results, now, flush, batches)
                    for level in range(batches - 1):  # a level's batches lie side by side
                        follow += [p.follow[level] for p in plans if len(p.follow) > level]
                    # the next wave is read while the workers upload this one, once no more
                    # than an eighth of a wave's bytes are still held (memory: see WAVE_BYTES)
                    running: list[tuple[Plan, Future[StepResult]]] = []
                    before: dict[tuple[str, int], tuple[Plan, Future[StepResult]]] = {}
                    for wave in waves(plans, self.wave_bytes) + waves(follow, self.wave_bytes):
                        self._held.wait_below(self.wave_bytes // 8)
                        running += self._start_wave(wave, now, before)
                    results += [(p.flat, f.result()) for p, f in running]
                self._sync_files([flat.consume_queue for flat, _ in results], "consumequeue")
            self.flat_store.flush_metadata([flat for flat, _ in results])
            self.rounds += 1
            metrics.DISPATCH_ROUNDS.inc()
            self._release_cold(results, now)
            self._measure_files(force=any(r.messages for _, r in results))
        return results

    def _plan(
        self, flats: list[FlatMessageFile], results: list[tuple[FlatMessageFile, StepResult]],
        now: int, flush: bool, batches: int,
    ) -> list[Plan]:  # fmt: skip
        """The plans of ``flats``' queues that send (the others' results go to ``results``)."""
        plans: list[Plan] = []
        sending = [f for f in flats if not f.has_pending]
        queues = [(f.topic, f.queue_id) for f in sending]
        with self.local.scanned_ahead(queues, [self._reads_from(f) for f in sending]):
            if batches == 1:  # (many queues' plans at once: a wide round's, an object store's)
                states = [self.state(f.topic, f.queue_id) for f in flats]
                planned_all = plan_many(flats, states, self.local, self.limits, now, flush=flush)
                self.local.drop_tails((f.topic, f.queue_id) for f in flats)
                for flat, planned in zip(flats, planned_all, strict=True):
                    if isinstance(planned, Plan):
                        plans.append(planned)
                    else:
                        results.append((flat, planned))
                return plans
            for flat in flats:
                state = self.state(flat.topic, flat.queue_id)
                planned = plan(flat, state, self.local, self.limits, now, flush=flush,
                               batches=batches)  # fmt: skip
                self.local.drop_tail(flat.topic, flat.queue_id)  # (the plan holds what it needs)
                if isinstance(planned, Plan):
                    plans.append(planned)
                else:
                    results.append((flat, planned))
        return plans

    def _reads_from(self, flat: FlatMessageFile) -> int:
        """The queue offset from which the plan of ``flat``'s queue reads consumequeue units:
        its commit offset, or past the units its held batch remembers."""
        current = flat.commit_offset
        held = self.state(flat.topic, flat.queue_id).held
        return (
            current + len(held.sizes) if held is not None and held.current == current else current
        )

    def _run_wide(
        self, flats: list[FlatMessageFile], results: list[tuple[FlatMessageFile, StepResult]],
        now: int, flush: bool,
    ) -> list[tuple[FlatMessageFile, StepResult]]:  # fmt: skip
        """A wide round's steps (:data:`WIDE_ROUND_QUEUES`), in waves of queues: each wave's
        queues planned, every batch appended (:func:`~.offload_step.stage_many`), every
        commitlog's bytes written at once (:func:`~.offload_step.write_commitlogs`), those made
        durable at once (:meth:`_sync_files`), then every queue's units written at once and
        every step finished (:func:`~.offload_step.commit_wave`): a batch's units only once its
        commitlog bytes are durable, as in :func:`~.offload_step.execute`. A wave's sync runs
        on a thread from when its commitlogs are written, while the wave before is committed
        and the next one planned, read and written; it makes durable too the units of the wave
        committed before it began (the round's own sync of units then has the last two waves'
        left; the waves shrink towards the end, :func:`~.commit_notifier.wide_slices`, so that
        sync and the last wave's have little to write). That sync runs before the listeners'
        gathered work (the key index's puts) is done as the block ends. Two waves' steps are
        held: a wave is half of :data:`WIDE_WAVE_QUEUES` queues (and at most
        :attr:`wave_bytes`, freed once written). The steps and the listeners (the key index)
        run on this thread (:meth:`~.commit_notifier.Notifier.inline`): small steps are
        interpreter work, and threads would only trade the interpreter lock. Results of queues
        that send nothing go to ``results``; the steps' are returned."""
        done: list[tuple[FlatMessageFile, StepResult]] = []
        step = max(1, WIDE_WAVE_QUEUES // 2)
        pending: tuple[list[Sent], Callable[[], None]] | None = None  # (its sync running)
        units: list[FlatAppendFile] = []
        with self._notifier.inline() as listeners:
            try:
                for i, j in wide_slices(len(flats), step, WIDE_TAIL_QUEUES):
                    plans = self._plan(flats[i:j], results, now, flush, 1)
                    for wave in waves(plans, self.wave_bytes, step) if plans else []:
                        sent = self._write_wave(wave, now, listeners, done)
                        files: list[FlatAppendFile] = [s.plan.flat.commitlog for s in sent]
                        files += units  # (the units of the wave committed last)
                        before, pending = pending, (sent, self._sync_in_background(files))
                        if before is not None:  # its sync ran while this wave was written
                            done += commit_wave(*before, now, listeners)
                            units = [s.plan.flat.consume_queue for s in before[0]]
                if pending is not None:
                    done += commit_wave(*pending, now, listeners)
                    pending = None
                self._sync_files([flat.consume_queue for flat, _ in done], "consumequeue")
            finally:
                if pending is not None:  # (raising: the sync's own outcome is not wanted)
                    with contextlib.suppress(BaseException):
                        pending[1]()
        return done

    def _write_wave(
        self, wave: list[tuple[Plan, int]], now: int, listeners: tuple[Notifier, ...],
        results: list[tuple[FlatMessageFile, StepResult]],
    ) -> list[Sent]:  # fmt: skip
        """A wide round's wave read, staged and its commitlogs written: the steps sent (their
        sync is the caller's). Failed steps go to ``results``."""
        plans = [p for p, _ in wave]
        staged = stage_many(plans, self._read_wave(plans), self.local, now, listeners, results)
        prepare_staged(staged, listeners)  # (before the writes free the batches' bytes)
        return write_commitlogs(staged, results, freed)

    def _sync_in_background(self, files: list[FlatAppendFile]) -> Callable[[], None]:
        """:meth:`_sync_files` of a wave's commitlogs (and the wave before's consumequeues)
        begun on a thread; what waits for it."""
        return in_background(lambda: self._sync_files(files, "wave"), "wave-sync")

    def _sync_files(self, files: Sequence[FlatAppendFile], what: str) -> None:
        """Make the deferred appends of the round's ``files`` durable before the round records
        them: many at once with the provider's :meth:`~tiered.providers.base.Provider.sync_many`
        (posix: one ``syncfs``), else (or when that fails) side by side on the workers (their
        ``fdatasync`` calls share the disk's cache flushes, where one per batch waited for its
        own). A failed sync leaves a file's record at what is durable; it is synced again before
        anything more is recorded (a commitlog's by the step's own commit)."""
        waiting = [f for f in dict.fromkeys(files) if f.unsynced]
        if len(waiting) >= SYNC_MANY_FILES:
            keys = [key for key in (f.unsynced_key for f in waiting) if key is not None]
            try:
                self.flat_store.provider.sync_many(keys)
            except (ProviderError, OSError) as e:
                log.warning("syncing %d %s files at once failed, one by one now: %s",
                            len(keys), what, e)  # fmt: skip
            else:
                for f in waiting:
                    f.synced()
                return
        for f, done in zip(waiting, [self._pool.submit(f.sync) for f in waiting], strict=True):
            try:
                done.result()
            except (ProviderError, OSError) as e:
                log.warning("%s: %s sync failed (its record waits): %s", f.path, what, e)

    def _start_wave(
        self,
        sized: list[tuple[Plan, int]],
        now: int,
        before: dict[tuple[str, int], tuple[Plan, Future[StepResult]]],
        step: Callable[..., Any] = execute,
    ) -> list[tuple[Plan, Future[Any]]]:
        """Read the wave's batches (one pread per commitlog range; the header of the message
        after each batch comes with them, for the dispatch latency) and hand them to workers
        (``step``: :func:`~.offload_step.execute`); a follow-on batch goes after the step
        ``before`` it of its queue (each queue's last step started is recorded there)."""
        reads = self._read_wave([p for p, _ in sized])
        listeners = (self._notifier,) if self.commit_listeners or self.staged_listeners else ()
        started = []
        for (p, nbytes), (batch, next_time) in zip(sized, reads, strict=True):
            written = self._held.hold(nbytes)
            try:
                if p.queue in before:
                    prev, prior = before[p.queue]
                    assert prev.units is not None
                    done = self._pool.submit(
                        execute_after, prior, len(prev.units), p, batch, next_time, now,
                        listeners, written,
                    )  # fmt: skip
                else:
                    done = self._pool.submit(step, p, batch, next_time, now, listeners, written)
            except BaseException:  # not handed over (the pool shut down): nothing holds them
                written()
                raise
            done.add_done_callback(written)  # however the step ended
            before[p.queue] = (p, done)  # a queue's next batch may be in the same wave
            started.append((p, done))
        return started

    def _read_wave(self, wave: list[Plan]) -> list[tuple[_Batch, int | None]]:
        """Each plan's batch (None for a retry, which reads nothing) and the store time of the
        message after it, read together: one pread per commitlog range."""
        sends = [i for i, p in enumerate(wave) if p.units is not None]
        requests = [
            BatchRequest(p.flat.topic, p.flat.queue_id, p.current, p.units, p.read_ahead)
            for p in (wave[i] for i in sends)
            if p.units is not None
        ]
        read, next_times = self.local.read_unchecked(requests)
        out: list[tuple[_Batch, int | None]] = [(None, None)] * len(wave)
        for i, got, next_time in zip(sends, read, next_times, strict=True):
            out[i] = (got, next_time)
        return out

    def run_pass(
        self,
        *,
        flush: bool = False,
        stop: threading.Event | None = None,
        on_progress: Callable[[int], None] | None = None,
        follow: bool = False,
    ) -> PassReport:
        """Rounds until no queue has ready work (or ``stop`` is set); see the module docstring.
        The first round looks at every local queue, or with ``follow`` (``run``'s passes) only
        at those :class:`~.pass_queues.PassQueues` chooses; each further round at the queues
        the round before sent from or must retry. A following pass goes on only with the queues
        whose batch left more ready work: what reaches a queue meanwhile is the next pass's (the
        commitlog shows it), so a wide pass does not look at every queue it moved twice."""
        report = PassReport(role=self.role)
        if not self.uploading:
            self._save_state(sync=False)
            return report
        if self.paused():
            report.paused = True
            self._measure_paused()
            self._measure_files()
            self._save_state(sync=False)
            return report
        started = time.perf_counter()
        with self._pass_lock, self._mirror_spaced():
            gave_up: set[tuple[str, int]] = set()
            chosen = self.pass_queues.choose() if follow and self.pass_queues else None
            only = chosen
            progress: dict[tuple[str, int], QueueProgress] = {}
            while not (stop and stop.is_set()):
                if report.rounds and self.paused():  # after the running round: no new one
                    report.paused = True
                    break
                results = self.run_round(flush=flush, skip=gave_up, only=only)
                report.rounds += 1
                with collector_paused(len(results) >= WIDE_ROUND_QUEUES):  # (as the round)
                    progressed = retry = False
                    again: list[tuple[str, int]] = []
                    for flat, r in results:
                        key = (flat.topic, flat.queue_id)
                        st = self.state(*key)
                        busy = flat.has_pending or st.held is not None or bool(st.error)
                        progress[key] = QueueProgress(flat.commit_offset, st.local_max, busy)
                        # (following, what reached a queue meanwhile shows in the commitlog)
                        retries = r.failed and st.failures < MAX_FAILURES
                        if r.more or retries or (r.messages and not follow):
                            again.append(key)
                        if r.messages:
                            report.queues.add(key)
                            report.messages += r.messages
                            report.bytes += r.bytes
                        if r.gap is not None:
                            report.gaps.append((flat.topic, flat.queue_id, r.gap))
                        if r.failed:
                            report.failures += 1
                            st = self.state(*key)
                            if st.failures >= MAX_FAILURES:
                                gave_up.add(key)
                                report.errors[flat.path] = st.error
                            else:
                                retry = True
                        progressed = progressed or r.more or bool(r.messages)
                    if on_progress is not None:
                        on_progress(sum(r.messages for _, r in results))
                    gap = any(r.gap is not None for _, r in results)
                    self._save_state(sync=gap, touched=results)
                if not again or (not progressed and not retry):
                    break
                if retry and not progressed:
                    time.sleep(_BACKOFF_S * min(report.rounds, 20))
                only = list(dict.fromkeys(again))  # a queue's follow-on batches: once
            self._notifier.drain()
            if follow and self.pass_queues is not None and not (stop and stop.is_set()):
                with collector_paused(len(progress) >= WIDE_ROUND_QUEUES):
                    listed = self.listed if chosen is None else None
                    self.pass_queues.settle(progress, listed=listed)
                report.looked_at = len(progress)
        for path, why in self.unreadable.items():  # skipped, not offloaded: the caller must know
            report.errors.setdefault(path, why)
        report.seconds = time.perf_counter() - started
        return report

    @contextlib.contextmanager
    def _mirror_spaced(self) -> Iterator[None]:
        """A pass mirrors the metadata at most every :data:`MIRROR_INTERVAL_S` (see
        :meth:`~tiered.metadata.MetadataStore.mirror_spaced`); a failed put at its end is logged
        and counted there and retried by the next persist, as a round's is."""
        spaced = self.flat_store.metadata.mirror_spaced(MIRROR_INTERVAL_S)
        try:
            with spaced:
                yield
        except ProviderError as e:
            log.debug("metadata mirror failed (the local file was written): %s", e)

    def backlog(self) -> int:
        """Messages the local store holds beyond the tier, over all target queues (a queue not
        yet in the tier counts from where its offload would start). Only reads: no queue or
        record is created to answer."""
        self.local.refresh()
        total = 0
        for topic, qid in self.local.queues():
            if not self.filter.allows(topic):
                continue
            flat = self.flat_store.get(topic, qid)
            try:
                if flat is not None and flat.initialized:
                    done, lmax = flat.commit_offset, self.local.max_offset(topic, qid)
                else:
                    _, lmax, done = self._start_of(topic, qid)
            except (TieredStoreError, OSError):
                continue
            total += max(lmax - done, 0)
        return total

    def _measure_paused(self) -> None:
        """Refresh every offloaded queue's lag gauges (:func:`~.offload_step.measure`), at most
        every :data:`PAUSED_MEASURE_S`."""
        now = time.monotonic()
        if now - self._measured < PAUSED_MEASURE_S:
            return
        self._measured = now
        self.local.refresh()
        clock = self.clock()
        for flat in self.flat_store.files():
            if flat.initialized and self.filter.allows(flat.topic):
                state = self.state(flat.topic, flat.queue_id)
                measure(flat, state, self.local, self.limits.messages, clock)

    def behind_files(self) -> int:
        """The broker's commitlog files from the one holding the oldest message not yet
        offloaded (of the queues stepped or measured) to the newest; 0 when caught up."""
        states = list(self.states.values())
        pending = [st.next_physical for st in states if st.next_physical is not None]
        if not pending:
            return 0
        oldest = min(pending)
        return sum(1 for f in self.local.commitlog.files if f.end > oldest)

    def _measure_files(self, *, force: bool = True) -> None:
        """Set the behind-files gauge: after a round that moved messages (``force``), else at
        most every :data:`FILES_MEASURE_S` (a walk over every queue's state)."""
        now = time.monotonic()
        if force or now - self._files_measured >= FILES_MEASURE_S:
            self._files_measured = now
            metrics.DISPATCH_BEHIND_FILES.set(self.behind_files())

    # --- page cache and state -------------------------------------------------------------------

    def _release_cold(self, results: list[tuple[FlatMessageFile, StepResult]], now: int) -> None:
        uploaded = [
            (r.physical, r.timestamps)
            for _, r in results
            if r.physical is not None and r.timestamps is not None
        ]
        if not uploaded:
            return
        pending = [st.next_physical for st in self.states.values() if st.next_physical is not None]
        # every queue's batch at once: a wide round has thousands of one-message batches
        phys = np.concatenate([p for p, _ in uploaded])
        stamps = np.concatenate([t for _, t in uploaded])
        frontier = min(pending) if pending else (int(phys.max()) + 1 if len(phys) else 0)
        if frontier <= self.released_upto:
            return
        below = phys < frontier
        newest = int(stamps[below].max()) if below.any() else -1
        if 0 <= newest < now - COLD_AGE_MS:
            self.released_bytes += self.local.release(self.released_upto, frontier)
            self.released_upto = frontier

    def _save_state(
        self,
        *,
        sync: bool,
        force: bool = False,
        touched: list[tuple[FlatMessageFile, StepResult]] | None = None,
    ) -> None:
        """Write the state file when what ``status`` shows of a queue changed (its last upload,
        error or gaps; only the queues ``touched`` can have: the round's), or the role, else at
        most every :data:`STATE_REFRESH_S` while some queue's local offsets moved and every
        :data:`STATE_IDLE_REFRESH_S` when none did (what changed is looked for only among the
        queues a round touched: never a walk over every queue's state)."""
        if self.state_file is None:
            return
        changed = self.role != self._state_role
        for flat, _ in touched or ():
            key = (flat.topic, flat.queue_id)
            st = self.states.get(key)
            if st is None:
                continue
            shown = (st.last_upload_ms, st.error, len(st.gaps))
            offsets = (st.local_min, st.local_max)
            if self._state_shown.get(key) != shown:
                self._state_shown[key] = shown
                changed = True
            if self._state_offsets.get(key) != offsets:
                self._state_offsets[key] = offsets
                self._state_moved = True
        now = time.monotonic()
        due = now - self._state_saved >= (
            STATE_REFRESH_S if self._state_moved else STATE_IDLE_REFRESH_S
        )
        if not (sync or force or changed or due):
            self._state_stale = True
            return
        self._state_role, self._state_saved = self.role, now
        self._state_stale = self._state_moved = False
        snapshot = StateSnapshot(
            role=self.role,
            pid=os.getpid(),
            updated_ms=self.clock(),
            rounds=self.rounds,
            queues=dict(self.states),
        )
        asked, self._state_asked = self._state_asked, set()
        try:  # (a dict per queue, gone at the end)
            with collector_paused(len(snapshot.queues) >= WIDE_ROUND_QUEUES):
                self.state_file.save(snapshot, sync=sync, changed=asked)
        except OSError as e:
            log.warning("cannot write %s: %s", self.state_file.path, e)
