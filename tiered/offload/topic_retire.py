"""Topics the broker deleted: their run-time state is released at once, their tier records when
the reserve time has expired every segment (upstream keeps such records for ever).

Each expiry run (``tieredStoreDeleteFileInterval``) looks for them after expiring segments. A topic
created again under the same name later is a new topic to the sidecar once its old records are
gone; before that its queues continue where the tier is, as after any pause.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from tiered import metrics
from tiered.broker.configjson import load_topics
from tiered.config import TieredConfig
from tiered.errors import TieredStoreError
from tiered.file.flat_file_store import FlatFileStore
from tiered.file.flat_message_file import FlatMessageFile
from tiered.providers.layout import logical_path
from tiered.source.local_source import LocalSource

log = logging.getLogger(__name__)


@dataclass
class RetireReport:
    """What one :func:`retire_deleted` did."""

    released: int = 0
    """Deleted queues whose run-time state was released by this run."""
    removed: int = 0
    """Deleted queues whose records were removed (every segment had expired)."""
    topics: int = 0
    """Topic records removed with their last queue."""


def deleted_queues(
    cfg: TieredConfig, store: FlatFileStore, local: LocalSource
) -> list[FlatMessageFile]:
    """The tier's queues the broker deleted: its ``consumequeue/{topic}/{queueId}`` directory is
    gone and its topic is not in the broker's ``config/topics.json`` (read as the broker reads
    it, its ``.bak`` when the file is damaged); when neither can be read, nothing is taken for
    deleted."""
    try:
        table = load_topics(cfg.store_path_root_dir / "config" / "topics.json")
    except TieredStoreError as e:
        log.debug("deleted topics not looked for: %s", e)
        return []
    live = set(table.topics)
    return [  # the directory itself, not LocalSource.has_queue's memo of it
        f
        for f in store.files()
        if f.topic not in live
        and not os.path.isdir(os.path.join(local.cq_root, f.topic, str(f.queue_id)))
    ]


def retire_deleted(
    cfg: TieredConfig,
    store: FlatFileStore,
    local: LocalSource,
    release: Callable[[str, int, str], bool],
) -> RetireReport:
    """Release what the sidecar holds of the queues the broker deleted, and remove their records
    once nothing of them is left in the tier. ``release(topic, queue_id, path)`` drops a queue's
    run-time state (the dispatcher's state, its local-store caches, its share of the aggregated
    metrics) and says whether it held any; its tiered messages stay readable until they expire.
    Once expiry has left a queue no bytes (only the empty segment that held its position), its
    segment records and queue record are removed, and the topic record with its last queue."""
    report = RetireReport()
    gone: dict[str, int] = {}
    empty: list[tuple[str, int]] = []
    for flat in deleted_queues(cfg, store, local):
        if release(flat.topic, flat.queue_id, flat.path):
            report.released += 1
        with flat.lock:
            left = flat.has_pending or any(
                s.size for part in (flat.commitlog, flat.consume_queue) for s in part.segments
            )
        if not left:
            empty.append((flat.topic, flat.queue_id))
            gone[flat.topic] = gone.get(flat.topic, 0) + 1
    report.removed = store.remove(empty) if empty else 0
    for topic, queue_id in empty:
        metrics.forget_queue(
            topic, queue_id, logical_path(store.broker, topic, queue_id), tier=True
        )
    for topic, queues in sorted(gone.items()):
        if not store.metadata.queues(topic):
            store.metadata.delete_topic(topic)
            report.topics += 1
        log.info("%s: deleted at the broker and expired in the tier: the records of %d queue(s) "
                 "removed", topic, queues)  # fmt: skip
    if report.released:
        log.info("%d queue(s) deleted at the broker: their run-time state released (their tiered "
                 "messages stay readable until they expire)", report.released)  # fmt: skip
    return report
