"""A read replica (``rmq-tiered serve``): one broker's tier served with no broker store.

Redpanda's remote read replicas, for RocketMQ: analysts in another region read a broker's history
from the bucket and never touch the production node. A :class:`Replica` is a read-only
:class:`~tiered.core.sidecar.Sidecar` (its provider refuses every write) whose metadata comes from
the writing sidecar's backend mirror (``{cluster dir}/{broker}/config/tieredStoreMetadata.json``)
rather than a local file, and whose broker store is
:class:`~tiered.source.no_local_store.NoLocalStore`: every read is served from the tier
(``tieredStorageLevel=FORCE``).

The mirror is copied into the replica's own ``tieredDataDir`` (marked as a replica's, so a writing
sidecar's data dir is never taken) and read again every ``tieredReplicaRefreshMs``; a changed
mirror replaces the metadata and the queues whole, so readers see the old or the new state, never
a gap. The writer puts its mirror at most every 5 s while it offloads (and when it stops), so the
replica follows it within that plus one refresh interval. A refresh costs one LIST of the
mirror's journal chunks; a writer whose metadata is journaled (``tieredMetadataJournalMinBytes``)
then costs one GET per new chunk, and the snapshot is read again only when the writer wrote a new
one; a writer without a journal costs one GET of the whole mirror.
"""

from __future__ import annotations

import logging
import threading

from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.errors import ConfigError
from tiered.errors import MetadataError
from tiered.errors import SegmentNotFoundError
from tiered.errors import TieredStoreError
from tiered.index.service import IndexService
from tiered.metadata import MetadataDocument
from tiered.metadata import dump_metadata_json
from tiered.metadata import mirror_key_for
from tiered.metadata import parse_metadata
from tiered.metadata.atomic import AtomicFile
from tiered.metadata.journal import chunk_prefix
from tiered.metadata.journal import snapshot_id
from tiered.metadata.metadata_read import apply_chunks
from tiered.providers import Provider
from tiered.providers import build_provider
from tiered.providers.read_only import ReadOnlyProvider
from tiered.source.no_local_store import EMPTY_STORE_DIR
from tiered.source.no_local_store import REPLICA_MARKER
from tiered.source.no_local_store import NoLocalStore

log = logging.getLogger(__name__)


def replica_config(cfg: TieredConfig) -> TieredConfig:
    """``cfg`` as a replica runs it: read-only, every read from the tier (FORCE, no per-topic
    override), and the broker store an empty directory of its own data dir."""
    return cfg.model_copy(
        update={
            "tiered_store_read_only": True,
            "tiered_storage_level": StorageLevel.FORCE,
            "tiered_storage_level_overrides": (),
            "store_path_root_dir": cfg.tiered_data_dir / EMPTY_STORE_DIR,
            "store_path_commit_log": (),
        }
    )


class Replica(Sidecar):
    """One broker's tier, read-only, following its writer's metadata mirror; use as a context
    manager. ``cfg`` is the configuration as given (:func:`replica_config` is applied here)."""

    def __init__(self, cfg: TieredConfig, provider: Provider | None = None) -> None:
        super().__init__(replica_config(cfg), provider)
        self.local = NoLocalStore(self.cfg)
        self.mirror_reader = self.provider
        """Reads the mirror: without read-ahead when built here (a provider's read-ahead keeps
        windows of an object, and the mirror is the one object that is overwritten)."""
        if provider is None:
            no_ahead = self.cfg.model_copy(update={"object_store_read_ahead_size_bytes": 0})
            self.mirror_reader = ReadOnlyProvider(build_provider(no_ahead))
        self.mirror_key = mirror_key_for(self.cfg.broker_cluster_name, self.cfg.broker_name)
        self._copy = AtomicFile(self.metadata.path)
        self._seen: bytes | None = None
        self._listing: list[tuple[str, int]] = []
        self._doc: MetadataDocument | None = None
        """The mirror's document as last read, with ``_snapshot`` and ``_frames`` (journaled)."""
        self._snapshot = ""
        self._frames = 0
        self._refresh_lock = threading.Lock()
        self.refreshes = 0
        """How many times a changed mirror replaced the metadata (the first load included)."""

    def open(self) -> Replica:
        """Lock the data dir, load the last copy of the mirror (if any), then the mirror itself.

        Raises:
            ConfigError: the data dir is locked by another process, or holds a writing
                sidecar's metadata (a replica needs a ``tieredDataDir`` of its own).
        """
        data_dir = self.cfg.tiered_data_dir
        if self._lock is not None:
            self._lock.acquire()
        try:
            marker = data_dir / REPLICA_MARKER
            held = self.metadata.path.exists() or self.metadata.bak_path.exists()
            if held and not marker.exists():
                raise ConfigError(
                    f"tieredDataDir={str(data_dir)!r} holds a writing sidecar's metadata; "
                    "rmq-tiered serve copies the backend mirror into a tieredDataDir of its own: "
                    "give it an empty directory"
                )
            marker.write_text("this tieredDataDir belongs to an rmq-tiered serve replica\n")
            self.metadata.load()  # the last copy (or none): reads answer while the backend is slow
            self.flat_store.load(reconcile_backend=False)
            self.refresh()
            if self.cfg.message_index_enable:
                self.index = IndexService.reader(self.cfg, self.provider, self.flat_store)
            log.info(
                "read replica of %s/%s: %d queues from the backend mirror %r, read again every "
                "%d ms; every read from the tier (tieredStorageLevel=FORCE), nothing written to it",
                self.cfg.broker_cluster_name,
                self.cfg.broker_name,
                len(self.flat_store),
                self.mirror_key,
                self.cfg.tiered_replica_refresh_ms,
            )
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        return self

    def refresh(self) -> bool:
        """Read the backend mirror; when it changed, replace the metadata and the queues with it.
        Returns whether it changed. A missing or unreadable mirror keeps what is served (logged;
        the next refresh tries again).

        Raises:
            ProviderError: the backend failed (the daemon logs it and retries at the next run).
        """
        with self._refresh_lock:
            try:
                data = self._read_mirror()
            except SegmentNotFoundError:
                log.warning(
                    "no metadata mirror %r in the backend yet (is brokerClusterName/brokerName "
                    "the writer's?): serving the %d queues known so far",
                    self.mirror_key,
                    len(self.flat_store),
                )
                return False
            except (UnicodeDecodeError, MetadataError) as e:  # a put in progress, or damage
                log.warning("the metadata mirror %r does not parse (%s): serving the previous "
                            "copy until the next refresh", self.mirror_key, e)  # fmt: skip
                return False
            if data is None:
                return False
            self._copy.write(data)
            self.metadata.load()
            self.flat_store.load(reconcile_backend=False)
            self.refreshes += 1
            log.log(logging.INFO if self.refreshes == 1 else logging.DEBUG,
                    "read the metadata mirror %r: %d queues", self.mirror_key,
                    len(self.flat_store))  # fmt: skip
            return True

    def _read_mirror(self) -> bytes | None:
        """The mirror's document as a file's bytes when it changed since the last read, else
        None: the whole mirror when the writer keeps no journal; otherwise the chunks listed
        since (and the snapshot when a new one was written)."""
        prefix = chunk_prefix(self.mirror_key)
        listing = sorted(self.mirror_reader.list_sizes(prefix))
        if not listing:
            size = self.mirror_reader.size(self.mirror_key)
            raw = self.mirror_reader.read(self.mirror_key, 0, size) if size else b""
            if raw == self._seen:
                return None
            parse_metadata(raw.decode("utf-8"), source=self.mirror_key)
            self._seen, self._doc, self._listing = raw, None, []
            return raw
        if listing == self._listing:
            return None
        snapshots = {key[len(prefix) :].split("/", 1)[0] for key, _ in listing}
        if self._doc is None or snapshots != {self._snapshot}:
            size = self.mirror_reader.size(self.mirror_key)
            raw = self.mirror_reader.read(self.mirror_key, 0, size) if size else b""
            self._doc = parse_metadata(raw.decode("utf-8"), source=self.mirror_key)
            self._snapshot, self._frames, self._seen = snapshot_id(raw), 0, None
        self._frames = apply_chunks(
            self._doc, self.mirror_reader, self.mirror_key, self._snapshot, after=self._frames
        )
        self._listing = listing
        return dump_metadata_json(self._doc)

    def refresh_job(self) -> None:
        """:meth:`refresh` as a daemon job: a failure is logged, the next run retries."""
        try:
            self.refresh()
        except (TieredStoreError, OSError) as e:
            log.error("reading the metadata mirror %r failed, retried in %d ms: %s",
                      self.mirror_key, self.cfg.tiered_replica_refresh_ms, e)  # fmt: skip

    def close(self) -> None:
        """Close the sidecar and the mirror's reader."""
        try:
            super().close()
        finally:
            if self.mirror_reader is not self.provider:
                self.mirror_reader.close()

    def __enter__(self) -> Replica:
        return self.open()
