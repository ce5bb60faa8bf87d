"""The broker store of a read replica: there is none, so every read is served from the tier.

:class:`NoLocalStore` stands where the read path
(:class:`~tiered.read.message_store.TieredMessageStore`, :mod:`~tiered.read.read_route`, the replay
endpoint) asks a :class:`LocalSource`: no queue, no offset on disk, no store time. It is a
``LocalSource`` over an empty directory of the replica's own ``tieredDataDir`` (so anything the
read path asks and this class does not answer finds an empty store, never a broker's files),
with the questions routing asks answered without a stat.
"""

from __future__ import annotations

from collections.abc import Sequence

from tiered.config import TieredConfig

from .local_source import LocalSource

EMPTY_STORE_DIR = "no-broker-store"
"""The empty directory under ``tieredDataDir`` that a replica's ``storePathRootDir`` names."""
REPLICA_MARKER = "rmq-tiered-replica"
"""The file in ``tieredDataDir`` that says a replica owns it (its metadata is a mirror's copy)."""


class NoLocalStore(LocalSource):
    """A broker store that holds nothing (``cfg.store_path_root_dir`` must be an empty
    directory: :func:`tiered.core.replica.replica_config` makes it)."""

    def __init__(self, cfg: TieredConfig) -> None:
        for directory in (*cfg.commitlog_dirs, cfg.consume_queue_dir):  # empty: readyz scans them
            directory.mkdir(parents=True, exist_ok=True)
        super().__init__(cfg)

    def queues(self) -> list[tuple[str, int]]:
        """None: a replica's queues are those of the tier's metadata."""
        return []

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Never: no consumequeue directory."""
        return False

    def has_queues(self, keys: Sequence[tuple[str, int]]) -> list[bool]:
        """Never, for each of ``keys``."""
        return [False] * len(keys)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """-1: no offset is on a local disk."""
        return -1

    def max_offset(self, topic: str, queue_id: int) -> int:
        """-1: the replica writes nothing."""
        return -1

    def in_store(self, topic: str, queue_id: int, offset: int) -> bool:
        """Never: every offset is read from the tier."""
        return False

    def earliest_time(self, topic: str, queue_id: int) -> int:
        """-1: no message on a local disk."""
        return -1
