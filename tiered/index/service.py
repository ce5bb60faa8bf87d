"""``IndexService``: the tiered key index of one broker, from dispatch to query (spec §6).

A batch's keys are put into the local UNSEALED file once its uploads succeeded
(:meth:`IndexService.prepare_commit`); SEALED files are compacted, uploaded as INDEX segments and
recorded (:meth:`IndexService.compact_sealed`); uploaded files past the longest reserve time are
expired (:meth:`IndexService.expire`); :meth:`IndexService.query` answers key queries. Nothing is
lost by a crash: :meth:`IndexService.catch_up` indexes again, from the tier, what was uploaded
beyond each queue's saved progress, and each lifecycle step converges on restart
(:mod:`.uploaded`). A read-only instance (:meth:`IndexService.reader`) serves ``rmq-tiered
query`` beside a running sidecar, and the queries of a read-only sidecar.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered import metrics
from tiered.broker.javautil import to_i32
from tiered.closeable import Closeable
from tiered.config import TieredConfig
from tiered.errors import InvalidRequestError
from tiered.errors import ProviderError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentNotFoundError
from tiered.errors import TieredStoreError
from tiered.file.flat_file_store import FlatFileStore
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch
from tiered.index.bulk_keys import UnitsOf
from tiered.index.bulk_keys import index_batch_of_units
from tiered.index.bulk_keys import index_batches_of_units
from tiered.index.catch_up import reindex
from tiered.index.compaction import Compacted
from tiered.index.compaction import CompactionResult
from tiered.index.compaction import Compactor
from tiered.index.compaction import Engine
from tiered.index.format import IndexStatus
from tiered.index.format import KeyQuery
from tiered.index.index_batch import BatchPart
from tiered.index.index_batch import IndexBatch
from tiered.index.index_store_file import FILE_DIRECTORY_NAME
from tiered.index.index_store_file import IndexStoreFile
from tiered.index.local_files import LocalIndexFiles
from tiered.index.progress import IndexProgress
from tiered.index.progress import Rows
from tiered.index.progress import backend_key
from tiered.index.progress import decode_rows
from tiered.index.progress import encode_rows
from tiered.index.staging import Staging
from tiered.index.uploaded import UploadedIndex
from tiered.metadata import HOUR_MS
from tiered.metadata import LONG_MAX
from tiered.metadata import MetadataStore
from tiered.metadata import now_ms
from tiered.metadata.state_file import JsonStateFile
from tiered.metrics.labels import KnownTopics
from tiered.process.logs import error_fields
from tiered.process.logs import traceback_if_debug
from tiered.process.offload_priority import lower_thread_priority
from tiered.providers.base import Provider

if TYPE_CHECKING:
    from tiered.index.search import KeyHit

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_MS: Final = 10_000
"""Catch-up of gaps and expiry run this often inside ``rmq-tiered run`` (and the checkpoint when
due)."""
CHECKPOINT_MAX_S: Final = 60.0
"""A maintenance run checkpoints when the last checkpoint is this old (and something was put),
not at every run: a tail's keys land all over the slot table, so each sync writes the whole table
back. The durable copy then lags more, which matters only after a power loss (a ``kill -9``
restarts from the fast copy, :mod:`.progress`)."""
CHECKPOINT_MAX_ITEMS: Final = 1_000_000
"""... or when this many index items were put since it (a fast tail: ~10 s at 100,000 keys/s),
which bounds what a power loss makes the catch-up index again."""
DEFERRED_MAX_ROWS: Final = 1 << 17
"""Items gathered by :meth:`IndexService.deferred_puts` are put once this many wait (about
4.5 MB; putting them takes a few times that again), whatever the block still does: a first
offload's wide round gathers every new queue's keys in one block."""
EXTERNAL_MASTER: Final = "external"
"""``tieredIndexSparkMaster=external``: large files are staged for a ``spark-submit`` job."""

AddJob = Callable[..., None]
"""``Daemon.add_job(func, interval_ms, name=...)``."""


class IndexService(Closeable):
    """The key index of one broker; see the module docstring. Thread-safe."""

    def __init__(
        self,
        cfg: TieredConfig,
        provider: Provider,
        metadata: MetadataStore,
        store: FlatFileStore | None = None,
        *,
        readonly: bool = False,
        engine: Engine = "auto",
        spark_min_items: int | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.cfg = cfg
        self.provider = provider
        self.metadata = metadata
        self.flat_store = store
        self.topics = KnownTopics(
            lambda: [m.topic for m in metadata.topics()], cfg.consume_queue_dir
        )
        """Topics that get their own metric labels (others count as ``_other``)."""
        self.readonly = readonly
        self.clock = clock
        slots = cfg.tiered_store_index_file_max_hash_slot_num
        self.directory = Path(cfg.tiered_data_dir) / FILE_DIRECTORY_NAME
        self.local = LocalIndexFiles(
            self.directory,
            slots=slots,
            max_items=cfg.tiered_store_index_file_max_index_num,
            clock=clock,
            readonly=readonly,
        )
        cluster, broker = cfg.broker_cluster_name, cfg.broker_name
        self.uploaded = UploadedIndex(
            provider, metadata, cluster=cluster, broker=broker, slots=slots, clock=clock
        )
        self.staging = Staging(provider, cluster=cluster, broker=broker, slots=slots)
        self.progress = IndexProgress(self.directory)
        master = cfg.tiered_index_spark_master
        self.external = master == EXTERNAL_MASTER
        self.compactor = Compactor(
            spark_master="local[*]" if self.external else master,
            engine=engine,
            **({"spark_min_items": spark_min_items} if spark_min_items is not None else {}),
        )
        self._lock = threading.RLock()
        self._open = False
        self._checkpointed = time.monotonic()
        self._items_since_checkpoint = 0
        self._saver_stop = _Stop(self.progress.moved)
        self._saver: threading.Thread | None = None
        self._deferring: int | None = None  # the thread whose puts are gathered
        self._deferred: list[tuple[IndexBatch | BatchPart, str, int, int, int]] = []
        self._deferred_rows = 0
        self._caught_up_at = -1  # FlatFileStore.recorded when a catch-up walk last ended
        self._lagging = False  # a put or a catch-up failed since: walk again
        self.paused: Callable[[], bool] = lambda: False
        """Whether uploads are paused (:mod:`tiered.offload.pause`): the scheduled compaction
        then waits, as the offload does."""

    # --- life cycle -----------------------------------------------------------------------------

    @classmethod
    def reader(
        cls, cfg: TieredConfig, provider: Provider, store: FlatFileStore | None = None
    ) -> IndexService:
        """A read-only service for queries: beside a running sidecar, or over the loaded
        ``store`` of a read-only sidecar (which holds the data dir). Beside a sidecar the local
        files are opened first and the metadata read after, so a file uploaded and deleted
        meanwhile is in the metadata read.

        Raises:
            MetadataError: the metadata file and its ``.bak`` are both unreadable.
        """
        metadata = store.metadata if store is not None else MetadataStore(cfg.tiered_data_dir)
        service = cls(cfg, provider, metadata, store, readonly=True)
        service.local.open()
        if store is None:
            metadata = MetadataStore.read_only(cfg.tiered_data_dir)
            service.metadata = service.uploaded.metadata = metadata
            service.flat_store = FlatFileStore.from_config(cfg, provider, metadata)
            service.flat_store.load(reconcile_backend=False)
        service._open = True
        return service

    @metrics.counts_index_failures("start")
    def start(self, *, catch_up: bool = True) -> IndexService:
        """Open the index after a restart (``metadata`` loaded): converge local files and
        uploaded objects, restore the indexed offsets, and catch up (see the module docstring).
        """
        with self._lock:
            self.local.open()
            sealed = {f.begin_timestamp: f.header for f in self.local.sealed()}
            report = self.uploaded.converge(sealed)
            uploaded = self.uploaded.begins()
            for begin in sorted(uploaded & {f.begin_timestamp for f in self.local.files}):
                log.info("index file %d is uploaded: local copy deleted", begin)
                self.local.remove(begin)
            self.local.floor = max(uploaded, default=0)
            if report.adopted or report.deleted:
                log.warning("index objects converged: %d recorded, %d deleted",
                            len(report.adopted), len(report.deleted))  # fmt: skip
            restored = (
                self.progress.load()
                or self.flat_store is None
                or self.readonly
                or self._restore_progress()
            )
            if not restored:
                log.info("no index progress: every queue is indexed from the tier")
            if self.flat_store is not None:
                for flat in self.flat_store.files():
                    # min_offset reads the tier: only for a queue the progress does not know
                    if flat.initialized and self.progress.get(flat.topic, flat.queue_id) is None:
                        start = flat.min_offset()
                        self.progress.set_default(flat.topic, flat.queue_id, max(start, 0))
            self._open = True
        if not self.readonly:
            self._start_saver()
        if catch_up:
            self.catch_up()
        self.checkpoint()
        self._update_size()
        return self

    def _start_saver(self) -> None:
        """Write the fast progress copy one interval after it moved unsaved (the puts of a short
        burst are saved too, not only those followed by another put). The thread sleeps while
        nothing moves, so an idle sidecar spends no CPU polling. It runs at the offload's priority
        (``tieredOffloadNice``)."""

        def run() -> None:
            lower_thread_priority(self.cfg.tiered_offload_nice)
            moved = self.progress.moved
            while True:
                moved.wait()
                if self._saver_stop.wait(self.progress.fast_interval_s):
                    return
                try:  # clears ``moved`` once nothing is left to write
                    self.progress.save_fast()
                except OSError as e:  # the durable copy still holds; retried
                    log.warning("index progress (fast copy) not written: %s", e)

        self._saver_stop.clear()
        self._saver = threading.Thread(target=run, name="tiered-index-progress", daemon=True)
        self._saver.start()

    def stop_saver(self) -> None:
        """Stop the thread writing the fast progress copy (what a crash does to it)."""
        self._saver_stop.set()
        if self._saver is not None:
            self._saver.join(5)
            self._saver = None

    def close(self) -> None:
        """Checkpoint and close every local file (after the dispatcher stopped)."""
        self.stop_saver()
        with self._lock:
            if self._open and not self.readonly:
                self.checkpoint()
            self._open = False
            self.local.close()

    # --- put ------------------------------------------------------------------------------------

    def topic_id(self, topic: str) -> int | None:
        """The topic's ``(int) topicId`` from metadata, or None when the topic is unknown."""
        meta = self.metadata.get_topic(topic, copy=False)  # (per batch: no copy)
        return None if meta is None else to_i32(meta.topic_id)

    def on_commit(
        self, flat: FlatMessageFile, batch: MessageBatch, flat_offsets: npt.NDArray[np.int64]
    ) -> None:
        """Index the keys of an uploaded batch: :meth:`prepare_commit`, then its put."""
        put = self.prepare_commit(flat, batch, flat_offsets)
        if put is not None:
            put()

    @metrics.counts_index_failures("put")
    def prepare_commit(
        self, flat: FlatMessageFile, batch: MessageBatch, flat_offsets: npt.NDArray[np.int64]
    ) -> Callable[[], None] | None:
        """The dispatcher's staged commit listener: extract and hash the keys of a batch about
        to be uploaded (in the worker that uploads it, beside the others: the kernel runs
        without the interpreter lock) and return the put of its items into the index file,
        which the dispatcher runs once both uploads succeeded, in commit order on its commit
        thread; None when there is nothing to put. The put holds only the items, not the
        batch's message bytes (freed once the flat commitlog holds them)."""
        if not self._open or not len(batch):
            return None
        topic_id = self.topic_id(flat.topic)
        if topic_id is None:
            log.warning("%s: no topic record, batch not indexed", flat.path)
            return None
        indexed = index_batch_of_units(
            flat.topic, topic_id, flat.queue_id, batch.data, batch.starts, batch.sizes,
            flat_offsets, batch.timestamps,
        )  # fmt: skip
        return functools.partial(
            self._put_counted, indexed, flat.topic, flat.queue_id, batch.queue_offset, len(batch)
        )

    @metrics.counts_index_failures("put")
    def prepare_commits(
        self, batches: Sequence[tuple[FlatMessageFile, MessageBatch, npt.NDArray[np.int64]]]
    ) -> list[Callable[[], None] | None]:
        """:meth:`prepare_commit` of many queues' batches (a wide dispatch round's wave): their
        keys extracted and hashed by one call of the kernel
        (:func:`~.bulk_keys.index_batches_of_units`)."""
        out: list[Callable[[], None] | None] = [None] * len(batches)
        if not self._open:
            return out
        chosen: list[int] = []
        units: list[UnitsOf] = []
        ids: dict[str, int | None] = {}  # (a wave's queues share their topics)
        for i, (flat, batch, flat_offsets) in enumerate(batches):
            topic_id = None
            if len(batch):
                topic = flat.topic
                if topic not in ids:
                    ids[topic] = self.topic_id(topic)
                topic_id = ids[topic]
            if topic_id is None:
                if len(batch):
                    log.warning("%s: no topic record, batch not indexed", flat.path)
                continue
            chosen.append(i)
            units.append(UnitsOf(flat.topic, topic_id, flat.queue_id, batch.data, batch.starts,
                                 batch.sizes, flat_offsets, batch.timestamps))  # fmt: skip
        for i, indexed in zip(chosen, index_batches_of_units(units), strict=True):
            flat, batch, _ = batches[i]
            out[i] = functools.partial(self._put_counted, indexed, flat.topic, flat.queue_id,
                                       batch.queue_offset, len(batch))  # fmt: skip
        return out

    @metrics.counts_index_failures("put")
    def _put_counted(
        self, batch: IndexBatch | BatchPart, topic: str, queue_id: int, first_offset: int,
        count: int,
    ) -> None:  # fmt: skip
        self.put(batch, topic, queue_id, first_offset, count)

    def put(
        self, batch: IndexBatch | BatchPart, topic: str, queue_id: int, first_offset: int,
        count: int,
    ) -> None:  # fmt: skip
        """Put ``batch`` (queue offsets ``[first_offset, first_offset + count)`` of the queue)
        and record the queue's progress (gathered, on the thread of a :meth:`deferred_puts`
        block)."""
        if self._deferring == threading.get_ident():
            self._deferred.append((batch, topic, queue_id, first_offset, count))
            self._deferred_rows += len(batch)
            if self._deferred_rows >= DEFERRED_MAX_ROWS:
                self._put_deferred()
            return
        rows = batch.rows() if isinstance(batch, BatchPart) else batch
        self._put_ranges(rows, [(topic, queue_id, first_offset, first_offset + count)])

    def _put_ranges(self, batch: IndexBatch, ranges: list[tuple[str, int, int, int]]) -> None:
        """Put ``batch`` into the index file, then move each ``(topic, queue, first, end)``
        range's progress and save the fast copy once."""
        with self._lock:
            if not self._open:
                return
            try:
                sealed = self.local.put(batch)
            except BaseException:
                self._lagging = True  # the catch-up indexes these from the tier
                raise
            self._items_since_checkpoint += len(batch)
            for f in sealed:  # everything put before this batch is in files up to f
                self._keep_seal_progress(f)
            for topic, queue_id, first in self.progress.advance_many(ranges):
                self._lagging = True
                log.info("%s/%d: offsets before %d are not indexed yet: the catch-up will",
                         topic, queue_id, first)  # fmt: skip
            self.progress.save_fast()
        if sealed:
            log.info("%d index file(s) sealed; compacted at the next compaction run", len(sealed))

    @contextlib.contextmanager
    def deferred_puts(self) -> Iterator[None]:
        """Gather the puts made on this thread inside the block and put them at its end at once:
        one put into the index file, one progress move for every queue and one fast save,
        instead of one each per batch. A wide dispatch round (thousands of queues, a few
        messages each) tells its batches in such a block. The progress still moves only after
        the items are in the file; a failed put is logged (the catch-up indexes those batches
        again), never raised out of the block."""
        self._deferring = threading.get_ident()
        try:
            yield
        finally:
            self._deferring = None
            try:
                self._put_deferred()
            except Exception:  # as a commit listener's failure: logged in full, never raised
                log.exception("index: a gathered put failed (the catch-up indexes its batches)")

    @metrics.counts_index_failures("put")
    def _put_deferred(self) -> None:
        """Put what :meth:`deferred_puts` gathered, in the order it was put."""
        pending, self._deferred, self._deferred_rows = self._deferred, [], 0
        if not pending:
            return
        batch = IndexBatch.concat([b for b, *_ in pending])
        self._put_ranges(batch, [(t, q, first, first + n) for _, t, q, first, n in pending])

    def seal(self) -> IndexStoreFile | None:
        """Seal the UNSEALED file now (it is compacted at the next run); None if none."""
        with self._lock:
            f = self.local.seal_current()
            if f is not None:
                self._keep_seal_progress(f)
            return f

    # --- progress copies for a lost data volume -----------------------------------------------

    def _seal_progress(self, begin: int) -> JsonStateFile[Rows]:
        return JsonStateFile(
            self.directory / f"progress.sealed-{begin}.json",
            1,
            lambda doc: list(doc["queues"]),
            "a lost data volume re-indexes this file's messages too",
        )

    def _keep_seal_progress(self, f: IndexStoreFile) -> None:
        """Keep, beside the sealed ``f``, the offsets everything in files up to it covers."""
        try:
            self._seal_progress(f.begin_timestamp).save({"queues": self.progress.rows()})
        except OSError as e:  # only the lost-volume shortcut is lost
            log.warning("index file %d: its progress snapshot was not saved: %s",
                        f.begin_timestamp, e)  # fmt: skip

    def _mirror_seal_progress(self, begin: int) -> None:
        """After file ``begin`` was uploaded: put its progress snapshot in the backend (what a
        new data volume starts from), then drop the local snapshot."""
        snapshot = self._seal_progress(begin)
        rows = snapshot.load()
        key = backend_key(self.cfg.broker_cluster_name, self.cfg.broker_name)
        if rows is not None:
            try:
                self.provider.put(key, encode_rows(rows), overwrite=True)
            except ProviderError as e:  # the next upload puts a newer one
                log.warning("index progress copy %s not put (a new data volume would re-index "
                            "more): %s", key, e, extra=error_fields(e))  # fmt: skip
        snapshot.path.unlink(missing_ok=True)
        snapshot.file.bak_path.unlink(missing_ok=True)

    def _restore_progress(self) -> bool:
        """No local progress (a new data volume): take the backend copy, which covers what the
        uploaded index files hold; returns whether there was one."""
        key = backend_key(self.cfg.broker_cluster_name, self.cfg.broker_name)
        try:
            if not self.provider.exists(key):
                return False
            rows = decode_rows(self.provider.read(key, 0, self.provider.size(key)))
        except (ProviderError, ValueError, TypeError) as e:
            log.warning("index progress copy %s unusable (%s): every queue is indexed from the "
                        "tier", key, e)  # fmt: skip
            return False
        self.progress.restore(rows)
        log.warning("no local index progress: restored it from the backend copy %s; only what "
                    "no uploaded index file covers is indexed again", key)  # fmt: skip
        return True

    def checkpoint(self) -> None:
        """Flush the local files, then save the indexed offsets (never ahead of the files)."""
        with self._lock:
            if self.readonly or not self._open:
                return
            self.local.flush()
            if self.progress.dirty:
                self.progress.save()
            self.progress.save_fast(force=True)
            self._checkpointed = time.monotonic()
            self._items_since_checkpoint = 0

    def checkpoint_due(self) -> bool:
        """Whether a maintenance run checkpoints: something was put since the last checkpoint
        (or the progress moved) and it is :data:`CHECKPOINT_MAX_S` old, or
        :data:`CHECKPOINT_MAX_ITEMS` items were put since."""
        with self._lock:
            changed = self._items_since_checkpoint > 0 or self.progress.dirty
            return changed and (
                self._items_since_checkpoint >= CHECKPOINT_MAX_ITEMS
                or time.monotonic() - self._checkpointed >= CHECKPOINT_MAX_S
            )

    def catch_up(self) -> int:
        """Index, from the tier, every queue's uploaded messages beyond its indexed offset;
        returns how many messages were indexed. The walk over every queue is skipped when no
        queue recorded a commit since the last one ended and no put or catch-up failed."""
        if self.flat_store is None or self.readonly:
            return 0
        recorded = self.flat_store.recorded
        if recorded == self._caught_up_at and not self._lagging:
            return 0  # no queue committed since the last walk found every one indexed
        self._lagging = False
        total = 0
        for flat in self.flat_store.files():
            indexed = self.progress.get(flat.topic, flat.queue_id)
            if indexed is None or indexed >= flat.commit_offset:
                continue
            topic_id = self.topic_id(flat.topic)
            if topic_id is None:
                continue
            with flat.lock:
                start, end = max(indexed, flat.min_offset()), flat.commit_offset
                if start > indexed:  # the tier no longer holds [indexed, start)
                    self.progress.advance(flat.topic, flat.queue_id, indexed, start)
                if start >= end:
                    continue
                started = time.monotonic()

                def put(
                    batch: IndexBatch, first: int, stop: int, f: FlatMessageFile = flat
                ) -> None:
                    self.put(batch, f.topic, f.queue_id, first, stop - first)

                try:
                    n = reindex(flat, start, end, topic_id, put)
                except (TieredStoreError, OSError) as e:
                    self._lagging = True
                    metrics.INDEX_FAILURES.labels("catch_up").inc()
                    fields = error_fields(e, topic=flat.topic, queue_id=flat.queue_id)
                    log.warning("%s: index catch-up stopped (object %s), retried later: %s",
                                flat.path, fields.get("objectKey", "-"), e,
                                extra=fields)  # fmt: skip
                    continue
            total += n
            log.info("%s: %d uploaded messages indexed from the tier (queue offsets %d..%d) "
                     "in %.2f s", flat.path, n, start, end, time.monotonic() - started)  # fmt: skip
        self._caught_up_at = recorded
        return total

    # --- compaction, upload, expiry ---------------------------------------------------------------

    def compact_sealed(self, *, stage_all: bool = False) -> list[CompactionResult]:
        """Compact and upload every SEALED file (or stage it, or pick up its external result).

        ``stage_all`` stages every SEALED file for a ``spark-submit`` job and changes nothing
        else (``rmq-tiered compact-index --stage``: safe beside a running sidecar). Otherwise a
        file whose external result exists is picked up, a staged one without a result is left
        waiting, a large file is staged with ``tieredIndexSparkMaster=external``, and the rest
        are compacted here. A failure is reported and ends the run (files are uploaded in order,
        each at the end of the previous); the file is retried first next run.
        """
        with self._lock:
            sealed = self.local.sealed()
        results = []
        for f in sealed:
            started = time.monotonic()
            try:
                result = self._stage(f) if stage_all else self._compact_one(f)
            except (TieredStoreError, OSError) as e:
                fields = error_fields(e)
                log.error("index file %s: compaction or upload failed (object %s), retried next "
                          "run: %s", f.path, fields.get("objectKey", "-"), e, extra=fields,
                          exc_info=traceback_if_debug(log, e))  # fmt: skip
                result = CompactionResult(f.begin_timestamp, f.item_count, "failed", error=str(e))
            if not result.seconds:
                result.seconds = time.monotonic() - started
            results.append(result)
            if result.action == "failed" and not stage_all:
                break  # files go up in order: a later one must not take this one's base
        if not stage_all and not self.readonly:
            self._clean_staging()
        self._update_size()
        return results

    def _stage(self, f: IndexStoreFile) -> CompactionResult:
        if not self.staging.is_staged(f.begin_timestamp):
            self.staging.stage(f)
        return CompactionResult(f.begin_timestamp, f.item_count, "staged", engine="external")

    def _compact_one(self, f: IndexStoreFile) -> CompactionResult:
        begin = f.begin_timestamp
        fetched = self.staging.result(f, self.local.compacting_dir)
        if fetched is not None:
            path, size = fetched
            compacted = Compacted(f.header, size, path or b"", "external", 0.0)
            metrics.INDEX_FILES_COMPACTED.labels("external").inc()
        elif self.staging.is_staged(begin):
            return CompactionResult(begin, f.item_count, "waiting", engine="external")
        elif self.external and self.compactor.wants_spark(f):
            return self._stage(f)
        else:
            compacted = self.compactor.compact(f, self.local.compacting_dir)
        result = CompactionResult(
            begin, f.item_count, "empty", compacted.engine, compacted.size,
            seconds=compacted.seconds,
        )  # fmt: skip
        if compacted.size:
            record = self.uploaded.upload(f.header, compacted.payload, compacted.size)
            result.action, result.base_offset = "uploaded", record.base_offset
        if compacted.size:
            self._mirror_seal_progress(begin)
        with self._lock:
            self.local.remove(begin)
            self.local.floor = max(self.local.floor, begin)
        if isinstance(compacted.payload, Path):
            compacted.payload.unlink(missing_ok=True)
        if fetched is not None:
            self.staging.clean(begin)
        log.info("index file %d (%d items): %s (%s, %d bytes, %.2f s)", begin, f.item_count,
                 result.action, result.engine, result.bytes, result.seconds)  # fmt: skip
        return result

    def _clean_staging(self) -> None:
        """Delete staged files whose local file is gone (uploaded, or never to be)."""
        try:
            staged = self.staging.staged()
        except ProviderError as e:
            log.warning("cannot list the index staging area (prefix %s): %s", e.key, e,
                        extra=error_fields(e))  # fmt: skip
            return
        with self._lock:
            local = {f.begin_timestamp for f in self.local.files}
        for begin in staged:
            if begin not in local:
                self.staging.clean(begin)

    def expire(self, now: int) -> int:
        """Delete uploaded files older than the longest reserve time of any topic -- the global
        value, every ``tieredStoreFileReservedTimeOverrides`` value, every metadata
        ``reserveTime`` -- because a file mixes all topics' keys and its header does not say
        which (an expired topic's hits find no message and are dropped); returns how many
        (none with ``tieredStoreDeleteFileEnable=false``)."""
        if not self.cfg.tiered_store_delete_file_enable or self.readonly:
            return 0
        hours = self.cfg.longest_reserved_time_hours(self.metadata.longest_reserve_time())
        before = now - hours * HOUR_MS
        deleted = self.uploaded.expire(before)
        for record in deleted:
            metrics.EXPIRED_SEGMENTS.labels("index").inc()
            log.info("uploaded index file %d (end %d) expired", record.begin_timestamp,
                     record.end_timestamp)  # fmt: skip
        if deleted:
            self._update_size()
        return len(deleted)

    def _update_size(self) -> None:
        size = sum(r.size for r in self.uploaded.records())
        metrics.QUEUE_STORAGE_SIZE.set_path(self.uploaded.path, size, "index")

    # --- scheduling -----------------------------------------------------------------------------

    def schedule(self, add_job: AddJob) -> None:
        """Add the index jobs to the daemon: maintenance (catch-up, expiry, the checkpoint when
        due) every 10 s, compaction every ``tieredIndexCompactionIntervalMs`` (0 = never); none
        for a reader, which only answers queries."""
        if self.readonly:
            return
        add_job(self.maintain, MAINTENANCE_INTERVAL_MS, name="index-maintenance")
        interval = self.cfg.tiered_index_compaction_interval_ms
        if interval > 0:
            add_job(self.compact_job, interval, name="index-compaction")

    def maintain(self) -> None:
        """One maintenance run (exceptions are logged: the next run retries)."""
        try:
            self.catch_up()
            if self.checkpoint_due():
                self.checkpoint()
            self.expire(self.clock())
        except (TieredStoreError, OSError) as e:  # one line; retried by the next run
            fields = error_fields(e)
            log.error("index maintenance failed (object %s), retried next run: %s",
                      fields.get("objectKey", "-"), e, extra=fields,
                      exc_info=traceback_if_debug(log, e))  # fmt: skip
        except Exception:  # a bug must not kill the scheduler thread; logged in full
            log.exception("index maintenance failed")

    def compact_job(self) -> None:
        """One scheduled compaction run, none while uploads are paused (exceptions are
        logged)."""
        try:
            if self.paused():
                log.debug("index compaction skipped: uploads are paused")
                return
            self.compact_sealed()
        except Exception:  # as above
            log.exception("index compaction failed")

    # --- query ----------------------------------------------------------------------------------

    def query(
        self,
        topic: str,
        key: str,
        begin_ms: int = 0,
        end_ms: int = LONG_MAX,
        max_count: int = 32,
    ) -> list[KeyHit]:
        """The newest ``max_count`` messages of ``topic`` with ``key`` stored in
        ``[begin_ms, end_ms]`` (see :mod:`.search`).

        Raises:
            InvalidRequestError: ``max_count < 1`` or ``begin_ms > end_ms``.
            IntegrityError: a message read back fails its body CRC.
            ProviderError: the backend failed.
        """
        if max_count < 1:
            raise _invalid(f"maxCount={max_count!r} must be at least 1", "maxCount")
        if begin_ms > end_ms:
            raise _invalid(f"begin={begin_ms!r} is after end={end_ms!r}", "begin")
        from tiered.index.search import Collector  # queries only: not a one-shot dispatch's
        from tiered.index.search import newest_first

        started = time.monotonic()
        topic_id = self.topic_id(topic)
        collector = Collector(topic, key, max_count, self._read)
        if topic_id is not None:
            q = KeyQuery(topic, key, begin_ms, end_ms, max_count, topic_id)
            with self._lock:
                local = [f.query(q) for f in newest_first(self.local.files, begin_ms)]
            for items in local:
                if collector.add(items):
                    break
            for cf in newest_first(self.uploaded.files(), begin_ms):
                if collector.full:
                    break
                try:
                    collector.add(cf.query(q))
                except (SegmentNotFoundError, ReadPastEndError):
                    continue  # expired meanwhile
        elapsed_ms = (time.monotonic() - started) * 1000
        label = self.topics.label(topic)
        metrics.child(metrics.API_LATENCY, "query_message", label).observe(elapsed_ms)
        return collector.result()

    def _read(self, topic: str, queue_id: int, offset: int, size: int) -> bytes | None:
        flat = self._flat(topic, queue_id)
        if flat is None:
            return None
        try:
            data = flat.commitlog.read(offset, size)
        except (ReadPastEndError, SegmentNotFoundError):
            return None
        return data if len(data) == size else None

    def _flat(self, topic: str, queue_id: int) -> FlatMessageFile | None:
        return self.flat_store.get(topic, queue_id) if self.flat_store is not None else None

    # --- status ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Local files by status, uploaded files, indexed offsets (for ``status`` and tests)."""
        with self._lock:
            local = [
                {"beginTimestamp": f.begin_timestamp, "status": f.status.value,
                 "items": f.item_count, "endTimestamp": f.end_timestamp}
                for f in self.local.files
            ]  # fmt: skip
        records = self.uploaded.records()
        return {
            "local": local,
            "unsealed": sum(1 for f in local if f["status"] == IndexStatus.UNSEALED.value),
            "uploaded": [
                {
                    "beginTimestamp": r.begin_timestamp,
                    "endTimestamp": r.end_timestamp,
                    "baseOffset": r.base_offset,
                    "size": r.size,
                }
                for r in records
            ],
            "indexedOffsets": {f"{t}/{q}": o for (t, q), o in self.progress.items().items()},
        }


class _Stop(threading.Event):
    """The saver's stop signal: setting it also wakes the saver from its wait for ``moved``."""

    def __init__(self, moved: threading.Event) -> None:
        super().__init__()
        self._moved = moved

    def set(self) -> None:
        super().set()
        self._moved.set()


def _invalid(message: str, parameter: str) -> InvalidRequestError:
    error = InvalidRequestError(message)
    error.parameter = parameter  # type: ignore[attr-defined]
    return error
