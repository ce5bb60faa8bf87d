"""Assemble the offload side from a configuration: provider, metadata, flat files, dispatcher.

:class:`Sidecar` is what ``run``, ``dispatch`` and the tests use. :meth:`Sidecar.open` takes the
data-dir lock (one sidecar per ``tieredDataDir``), loads ``tieredStoreMetadata.json`` and restores
and reconciles every queue (:mod:`tiered.file.restart_reconcile`), unless the last writer stopped
cleanly (:mod:`tiered.core.clean_stop`). A sidecar that does not upload
(its broker is a slave) stands by: it writes nothing to the backend -- no reconciliation, no
metadata mirror (a slave shares the master's ``brokerName``, hence its keys), no expiry.

A read-only sidecar (``tieredStoreReadOnly``) starts none of those writers either, but restores
its queues as recorded (no reconciliation) and opens the key index for queries only, so it serves
reads; its provider refuses every write (:class:`~tiered.providers.read_only.ReadOnlyProvider`),
the safety net for a writer a later change forgets to gate. A writing sidecar's uploads can be
paused and resumed while it runs (:mod:`tiered.offload.pause`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tiered.broker.store_layout import check_store
from tiered.closeable import Closeable
from tiered.config import TieredConfig
from tiered.core.clean_stop import CleanStop
from tiered.core.data_dir_lock import DataDirLock
from tiered.errors import TieredStoreError
from tiered.file.flat_file_store import FlatFileStore
from tiered.file.restart_reconcile import ReconcileReport
from tiered.metadata import MetadataStore
from tiered.metadata import mirror_key_for
from tiered.metrics import forget_queue
from tiered.offload.dispatch_state import StateFile
from tiered.offload.dispatcher import Dispatcher
from tiered.offload.pause import PauseFile
from tiered.providers import Provider
from tiered.providers import build_provider
from tiered.providers.layout import INDEX_TOPIC
from tiered.providers.read_only import ReadOnlyProvider
from tiered.source.local_source import LocalSource

if TYPE_CHECKING:  # loaded where used: the key index when messageIndexEnable asks for it,
    # expiry by the daemon (a one-shot dispatch expires nothing)
    from tiered.index.service import IndexService
    from tiered.offload.expiry import ExpiryReport

log = logging.getLogger(__name__)


@contextlib.contextmanager
def index_reader(cfg: TieredConfig) -> Iterator[IndexService]:
    """A read-only key index beside a running sidecar (:meth:`IndexService.reader`) over a
    provider of its own, closed after."""
    from tiered.index.service import IndexService

    provider = build_provider(cfg)
    try:
        with IndexService.reader(cfg, provider) as service:
            yield service
    finally:
        provider.close()


class Sidecar(Closeable):
    """The offload machinery of one broker; use as a context manager (``open``/``close``)."""

    def __init__(
        self,
        cfg: TieredConfig,
        provider: Provider | None = None,
        *,
        lock: bool = True,
        workers: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.provider = provider if provider is not None else build_provider(cfg)
        self.read_only = cfg.tiered_store_read_only
        if self.read_only:
            self.provider = ReadOnlyProvider(self.provider)
        self.uploading = cfg.writes_tier
        mirror = self.provider if self.uploading else None
        self.metadata = MetadataStore(
            cfg.tiered_data_dir,
            mirror=mirror,
            mirror_key=mirror_key_for(cfg.broker_cluster_name, cfg.broker_name) if mirror else None,
            journal_min_bytes=cfg.tiered_metadata_journal_min_bytes,
        )
        self.local = LocalSource(cfg)
        self.flat_store = FlatFileStore.from_config(cfg, self.provider, self.metadata)
        self.state_file = StateFile(cfg.tiered_data_dir)
        self.pause = PauseFile(cfg.tiered_data_dir)
        self._lock = DataDirLock(cfg.tiered_data_dir) if lock else None
        self._workers = workers
        self._dispatcher: Dispatcher | None = None
        self.reports: list[ReconcileReport] = []
        self.index: IndexService | None = None  # the key index, when messageIndexEnable
        self._cleaning: threading.Thread | None = None
        self._cleaned = False  # the walk for leftovers ran to its end
        self.clean_start = False  # the last writer stopped cleanly: nothing was reconciled
        self._clean_stop = CleanStop(cfg, [self.metadata.path, self.metadata.journal.path])

    def open(self) -> Sidecar:
        """Lock the data dir, load metadata, restore and reconcile every queue (restore only,
        after a clean stop: :mod:`tiered.core.clean_stop`).

        Raises:
            ConfigError: ``storePathRootDir`` is missing or not a broker store; the data dir is
                locked by another process.
        """
        cfg = self.cfg
        check_store(cfg.store_path_root_dir, cfg.commitlog_dirs, cfg.consume_queue_dir)
        if self._lock is not None:
            self._lock.acquire()
        try:
            clean = self.uploading and self._clean_stop.take()
            if self.uploading and self.provider.leaves_temporary and not clean:
                # a walk of the broker's whole part of the tier (seconds at 100,000 queues):
                # beside the start, which puts nothing it could mistake for a leftover
                self._cleaning = threading.Thread(
                    target=self._clean_interrupted_puts, name="tiered-clean-puts", daemon=True
                )
                self._cleaning.start()
            if self.uploading:
                self._restore_lost_metadata()
            loaded = self.metadata.load()
            if self.uploading:
                # (a metadata file damaged since the stop was replaced by its .bak: reconcile)
                self.clean_start = clean and loaded.used == "main" and not loaded.problems
                if self.clean_start:
                    self.flat_store.load(reconcile_backend=False)
                    log.info("restored %d queues of broker %s from metadata; the last stop was "
                             "clean, so the backend was not reconciled", len(self.flat_store),
                             self.cfg.broker_name)  # fmt: skip
                else:
                    self.reports = self.flat_store.load(self.local.units_lookup)
                if self.cfg.message_index_enable:
                    self.index = self._start_index()
            elif self.read_only:
                self.flat_store.load(reconcile_backend=False)
                if self.cfg.message_index_enable:
                    from tiered.index.service import IndexService

                    self.index = IndexService.reader(self.cfg, self.provider, self.flat_store)
                log.info("tieredStoreReadOnly=true: this sidecar never writes the tier (no "
                         "upload, expiry, index upload or metadata mirror); it serves reads of "
                         "the %d queues its metadata records", len(self.flat_store))  # fmt: skip
            else:
                log.info(
                    "brokerRole=%s brokerId=%d: this sidecar stands by (only a master uploads; "
                    "set tieredStoreUploadOnSlave=true to override)",
                    self.cfg.broker_role,
                    self.cfg.broker_id,
                )
        except BaseException:
            self.wait_cleaned()  # it deletes: not once the data dir is another process's
            if self._lock is not None:
                self._lock.release()
            raise
        return self

    def wait_cleaned(self, timeout: float | None = None) -> bool:
        """Wait until the start's removal of interrupted puts' leftovers is done; whether it is
        (``timeout`` seconds at most)."""
        if self._cleaning is not None:
            self._cleaning.join(timeout)
            return not self._cleaning.is_alive()
        return True

    def _clean_interrupted_puts(self) -> None:
        """Remove what puts killed mid-write left in this broker's part of the backend (e.g. a
        posix ``.tieredStoreMetadata.json.<uuid>.tmp``): no other process writes there while
        this one holds the data dir, and the provider leaves this process's own puts alone.
        The queues' directories are not looked into: they are only appended to (four
        directories a queue: most of a walk at 100,000 queues)."""
        prefix = mirror_key_for(self.cfg.broker_cluster_name, self.cfg.broker_name)
        prefix = prefix.rsplit("/", 2)[0] + "/"  # {cluster dir}/{broker}/
        try:
            removed = self.provider.clean_temporary(prefix, _queue_directory)
        except (TieredStoreError, OSError) as e:  # only leftovers are kept: the next start
            log.warning("could not remove leftovers of interrupted puts under %s: %s", prefix, e)
            return
        self._cleaned = True
        if removed:
            log.info("removed %d leftovers of interrupted puts under %s", removed, prefix)

    def _restore_lost_metadata(self) -> None:
        """Restore a lost metadata file from the backend mirror before loading it.

        Only when neither the file nor its ``.bak`` exists (a new data volume, e.g. an emptyDir
        after the pod moved) and the backend holds this broker's mirror; segments uploaded after
        the mirror's last copy are added from a listing, as ``rmq-tiered recover`` does. Without
        a mirror the sidecar starts empty, and a queue whose objects already exist is refused
        with a pointer to ``rmq-tiered recover --from-backend``.
        """
        if self.metadata.path.exists() or self.metadata.bak_path.exists():
            return
        key = mirror_key_for(self.cfg.broker_cluster_name, self.cfg.broker_name)
        if not self.provider.exists(key):
            return
        restored = MetadataStore.recover_from_mirror(
            self.cfg.tiered_data_dir,
            self.provider,
            key,
            journal_min_bytes=self.cfg.tiered_metadata_journal_min_bytes,
        )
        from tiered.core.metadata_rebuild import merge_listing  # only when metadata was lost

        added = merge_listing(
            self.provider, restored, self.cfg.broker_cluster_name, self.cfg.broker_name
        )
        log.warning(
            "no tiered metadata in %s: restored it from the backend mirror %r (%d topics, "
            "%d queues, %d segments added from a listing)",
            self.metadata.path.parent,
            key,
            len(restored.topics()),
            len(restored.queues()),
            added,
        )

    def _start_index(self) -> IndexService | None:
        from tiered.index.service import IndexService

        index = IndexService(self.cfg, self.provider, self.metadata, self.flat_store)
        index.paused = lambda: self.pause.read().paused
        try:
            return index.start()
        except (TieredStoreError, OSError) as e:  # offloading goes on; keys are caught up later
            index.close()
            log.error("the key index did not start (%s): offloading goes on, and the keys of "
                      "what it uploads are indexed from the tier at the next start", e)  # fmt: skip
            return None

    @property
    def dispatcher(self) -> Dispatcher:
        """The dispatcher (created on first use)."""
        if self._dispatcher is None:
            self._dispatcher = Dispatcher(
                self.cfg,
                self.local,
                self.flat_store,
                state_file=self.state_file,
                workers=self._workers,
                uploads=self.uploading,
                pause=self.pause,
            )
            if self.index is not None:
                self._dispatcher.add_staged_listener(
                    self.index.prepare_commit,
                    round_scope=self.index.deferred_puts,
                    many=self.index.prepare_commits,
                )
        return self._dispatcher

    def expire(self, now: int) -> ExpiryReport:
        """One expiry run (nothing when standing by)."""
        from tiered.offload.expiry import ExpiryReport
        from tiered.offload.expiry import expire

        if not self.uploading:
            return ExpiryReport()
        report = expire(self.cfg, self.flat_store, now)
        if self.cfg.tiered_store_delete_file_enable:
            from tiered.offload.topic_retire import retire_deleted  # reads topics.json

            retire_deleted(self.cfg, self.flat_store, self.local, self._release)
        return report

    def _release(self, topic: str, queue_id: int, path: str) -> bool:
        """Drop what the sidecar holds of a queue the broker deleted, but its tier."""
        held = [
            self._dispatcher is not None and self._dispatcher.forget(topic, queue_id),
            self.local.forget(topic, queue_id),
            forget_queue(topic, queue_id, path),
        ]
        return any(held)

    def close(self) -> None:
        """Finish running uploads, record them, persist metadata, release the lock; record a
        clean stop when every upload is recorded (:mod:`tiered.core.clean_stop`)."""
        try:
            if self._dispatcher is not None:
                self._dispatcher.close()
            if self.index is not None:
                self.index.close()
            if self.uploading:
                self.flat_store.flush_metadata()
                if self._compact_metadata() and self._clean_walk():
                    self._record_clean_stop()
        finally:
            self.wait_cleaned()
            self.provider.close()
            if self._lock is not None:
                self._lock.release()

    def _clean_walk(self) -> bool:
        """Whether no leftover of an interrupted put can remain: the start's walk for them ran
        to its end, or none was needed (a clean start, a provider that leaves none)."""
        if self._cleaning is None:
            return True
        self.wait_cleaned()
        return self._cleaned

    def _record_clean_stop(self) -> None:
        if self.metadata.dirty:
            return
        unsettled = self.flat_store.unsettled()
        if unsettled:
            log.info("%d queues stop with uploads unrecorded or failed (e.g. %s): the next start "
                     "reconciles every queue with the backend", len(unsettled),
                     unsettled[0])  # fmt: skip
            return
        self._clean_stop.record()

    def _compact_metadata(self) -> bool:
        """Leave ``tieredStoreMetadata.json`` whole at stop (the Java plugin, a copy or the next
        start need no journal); whether it is. A failure is logged, the journal keeps every
        change."""
        try:
            self.metadata.compact()
        except (OSError, TieredStoreError) as e:
            log.error(
                "cannot compact the metadata journal into %s at stop (the journal keeps every "
                "change; the next start replays it): %s",
                self.metadata.path,
                e,
            )
            return False
        return True

    def __enter__(self) -> Sidecar:
        return self.open()


def _queue_directory(prefix: str) -> bool:
    """Whether ``prefix`` is a queue's directory, ``{cluster dir}/{broker}/{topic}/{queue id}/``,
    whose segments are only appended to: no put leaves anything there. The key index's pseudo
    topic is not one (its files and staging area are put)."""
    parts = prefix.split("/")
    return len(parts) == 5 and parts[3].isdigit() and parts[2] != INDEX_TOPIC
