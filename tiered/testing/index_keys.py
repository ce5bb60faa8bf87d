"""What a key index must answer: the keys of a generated store and where each message is."""

from __future__ import annotations

from tiered.broker import message as msgcodec
from tiered.index.service import IndexService

KeyTable = dict[tuple[str, str], tuple[int, int, int]]
"""``(topic, key) -> (queue id, queue offset, store timestamp)`` of the one message with it."""


def assert_all_found(index: IndexService, expected: KeyTable, step: int = 1) -> None:
    """Every ``step``-th key of ``expected`` is answered with exactly its one message."""
    for (topic, key), (qid, qoff, _) in sorted(expected.items())[::step]:
        hits = index.query(topic, key)
        assert len(hits) == 1, (topic, key, hits)
        m = msgcodec.decode(hits[0].data)
        assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qoff)
