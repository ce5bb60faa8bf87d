"""What a key index must answer: the keys of a generated store and where each message is."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tiered.broker import message as msgcodec
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.broker.generator import GenSpec
from tiered.config import TieredConfig
from tiered.index.service import IndexService
from tiered.testing import ConfigFactory

KeyTable = dict[tuple[str, str], tuple[int, int, int]]
"""``(topic, key) -> (queue id, queue offset, store timestamp)`` of the one message with it."""


def assert_all_found(index: IndexService, expected: KeyTable, step: int = 1) -> None:
    """Every ``step``-th key of ``expected`` is answered with exactly its one message."""
    for (topic, key), (qid, qoff, _) in sorted(expected.items())[::step]:
        hits = index.query(topic, key)
        assert len(hits) == 1, (topic, key, hits)
        m = msgcodec.decode(hits[0].data)
        assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qoff)


def store_keys(store: Path) -> KeyTable:
    """Every (topic, key) of the broker store's messages (UNIQ_KEY and KEYS tokens), read by
    scanning its commitlog."""
    table: KeyTable = {}
    for f in list_files([store / "commitlog"]):
        for item in scan_file(f.path, f.base):
            m = item.message
            if item.kind != "message" or m is None:
                continue
            for key in [*m.keys, m.properties[msgcodec.PROPERTY_UNIQ_KEY]]:
                table[(m.topic, key)] = (m.queue_id, m.queue_offset, m.store_timestamp)
    return table


@dataclasses.dataclass
class IndexCase:
    """A generated broker store: ``config(provider="memory", **keys)`` a sidecar configuration
    for it, ``keys()`` the keys it holds now."""

    store: Path
    spec: GenSpec
    make_config: ConfigFactory

    def config(self, provider: str = "memory", **keys: Any) -> TieredConfig:
        return self.make_config(self.store, provider, **keys)

    def keys(self) -> KeyTable:
        return store_keys(self.store)
