"""``FlatFileStore``: every queue of one broker in the tier, restored from metadata at start.

:meth:`FlatFileStore.load` rebuilds each queue's segment lists from ``tieredStoreMetadata.json``
(topics, then their queues, spec §7.4) and reconciles the last segments with the backend
(:mod:`tiered.file.restart_reconcile`), concurrently and bounded. Queues are created on first
sight with their topic and queue records (:meth:`FlatFileStore.get_or_create`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tiered.config import TieredConfig
from tiered.errors import ProviderError
from tiered.metadata import MessageQueue
from tiered.metadata import MetadataStore
from tiered.metadata.broker_tier import BrokerTier
from tiered.providers.base import Provider

from .flat_append_file import FlatAddress
from .flat_append_file import durable
from .flat_append_file import retrying
from .flat_message_file import FlatMessageFile
from .restart_reconcile import LocalUnits
from .restart_reconcile import ReconcileReport
from .restart_reconcile import reconcile

log = logging.getLogger(__name__)

LocalLookup = Callable[[str, int], LocalUnits | None]
"""``(topic, queue id)`` -> the local consumequeue lookup of that queue, if the broker has it."""

_MAX_LOAD_WORKERS = 16
_LOAD_CHUNK = 64
"""Queues reconciled by one task of the load's pool (at most; fewer with fewer queues)."""


@dataclass(eq=False, kw_only=True)
class FlatFileStore(BrokerTier):
    """The flat files of one broker (``cluster``/``broker``), by ``(topic, queue id)``."""

    commitlog_max_size: int
    consume_queue_max_size: int

    def __post_init__(self) -> None:
        self._files: dict[tuple[str, int], FlatMessageFile] = {}
        self._lock = threading.Lock()
        self.recorded = 0
        """How many times :meth:`flush_metadata` recorded a change (commits, rolls): whoever
        walks every queue for what changed (the key index's catch-up) may skip a walk when
        it did not move."""

    @classmethod
    def from_config(
        cls, cfg: TieredConfig, provider: Provider, metadata: MetadataStore
    ) -> FlatFileStore:
        """A store with the segment sizes and names of ``cfg``."""
        return cls(
            provider,
            metadata,
            cluster=cfg.broker_cluster_name,
            broker=cfg.broker_name,
            commitlog_max_size=cfg.tiered_store_commit_log_max_size_bytes,
            consume_queue_max_size=cfg.tiered_store_consume_queue_max_size_bytes,
        )

    def __len__(self) -> int:
        return len(self._files)

    def _new(self, topic: str, queue_id: int) -> FlatMessageFile:
        return FlatMessageFile(
            self.provider,
            self.metadata,
            FlatAddress(self.cluster, self.broker, topic, queue_id),
            commitlog_max_size=self.commitlog_max_size,
            consume_queue_max_size=self.consume_queue_max_size,
            clock=self.clock,
        )

    def load(
        self,
        local: LocalLookup | None = None,
        *,
        workers: int = _MAX_LOAD_WORKERS,
        reconcile_backend: bool = True,
    ) -> list[ReconcileReport]:
        """Restore every queue of this broker from metadata and reconcile it with the backend.

        Returns one report per queue whose files have segments. Without ``reconcile_backend``
        (a read-only reader beside a running sidecar) the recorded state is used as it is and
        nothing is written.
        """
        files: list[FlatMessageFile] = []
        with self._lock:
            loaded: dict[tuple[str, int], FlatMessageFile] = {}
            for topic in self.metadata.topics():
                for queue in self.metadata.queues(topic.topic):
                    if queue.queue.broker_name != self.broker:
                        continue
                    flat = self._new(topic.topic, queue.queue.queue_id)
                    flat.load()
                    loaded[(flat.topic, flat.queue_id)] = flat
                    files.append(flat)
            self._files = loaded  # swapped whole: a reader (a replica's refresh) never sees a gap

        def some(chunk: list[FlatMessageFile]) -> list[ReconcileReport]:
            return [reconcile(f, local(f.topic, f.queue_id) if local else None) for f in chunk]

        if not files or not reconcile_backend:
            return []
        count = max(1, min(workers, len(files)))
        # a few queues a task: one task per queue costs more in hand-overs than a check
        step = max(1, min(_LOAD_CHUNK, -(-len(files) // count)))
        chunks = [files[i : i + step] for i in range(0, len(files), step)]
        with ThreadPoolExecutor(count, "tiered-load") as pool:
            reports = [r for done in pool.map(some, chunks) for r in done]
        log.info("restored %d queues of broker %s from metadata", len(files), self.broker)
        return reports

    def get(self, topic: str, queue_id: int) -> FlatMessageFile | None:
        """The queue's flat file, or ``None`` when the tier does not know the queue."""
        return self._files.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> FlatMessageFile:
        """The queue's flat file, created (with its topic and queue records) on first sight.

        A new file is not initialised: it has no position until :meth:`FlatMessageFile.init`.
        """
        (flat,) = self.get_or_create_many([(topic, queue_id)])
        return flat

    def get_or_create_many(self, queues: Sequence[tuple[str, int]]) -> list[FlatMessageFile]:
        """:meth:`get_or_create` of each of ``queues``, the new ones' records made in one
        metadata batch (a first pass over thousands of queues)."""
        with self._lock:
            files = self._files
            new = [q for q in dict.fromkeys(queues) if q not in files]
            if new:
                with self.metadata.batch():
                    for topic, queue_id in new:
                        self.metadata.add_topic(topic, copy=False)
                        self.metadata.add_queue(
                            MessageQueue(broker_name=self.broker, queue_id=queue_id, topic=topic),
                            copy=False,
                        )
                for topic, queue_id in new:
                    flat = self._new(topic, queue_id)
                    flat.load()
                    files[(topic, queue_id)] = flat
            return [files[q] for q in queues]

    def files(self) -> list[FlatMessageFile]:
        """Every queue's flat file, by topic and queue id."""
        with self._lock:
            return [self._files[k] for k in sorted(self._files)]

    def unsettled(self) -> list[str]:
        """The queues whose backend may hold more than their records say (see
        :attr:`FlatMessageFile.settled`): what a start must reconcile."""
        with self._lock:
            flats = list(self._files.values())
        return [f.path for f in flats if not f.settled]

    def flush_metadata(self, flats: Iterable[FlatMessageFile] | None = None) -> int:
        """Record every queue's committed state (of ``flats``: the ones a dispatch round
        touched, the only ones it can have changed), persisting once; returns queues
        recorded."""
        changed = 0
        try:
            with self.metadata.batch():
                for flat in self.files() if flats is None else dict.fromkeys(flats):
                    with flat.lock:  # (taken and recorded under it: expiry may drop a
                        changed += flat.flush_metadata()  # segment, whose record must stay gone)
                self.recorded += bool(changed)  # (before the persist, which may fail)
        except ProviderError as e:  # only the mirror put can fail this way; the file was written
            log.debug("metadata mirror failed (the local file was written): %s", e)
        return changed

    def remove(self, queues: Iterable[tuple[str, int]]) -> int:
        """Delete the tiered data and the queue records of ``queues`` at once: every record
        removed with one persist, then the objects (listed as orphans until deleted); returns
        how many the store had."""
        with self._lock:
            flats = [f for f in (self._files.pop(q, None) for q in queues) if f is not None]
        keys: list[str] = []
        with durable(self.metadata):
            for flat in flats:
                with flat.lock:
                    keys += flat.drop_records()
                self.metadata.delete_queue(flat.topic, flat.queue_id)
        for key in keys:
            retrying(lambda k=key: self.provider.delete(k))  # type: ignore[misc]
        self.metadata.orphans.remove(keys)
        return len(flats)
