"""Queries of an uploaded compacted file through a provider: at most two reads each, topic,
hash and time filters, the 1024-item cap (spec §6.6), and accepting a file compacted elsewhere."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tiered.providers.base import Provider
from tiered.providers.memory import MemoryProvider
from tiered.providers.posix import PosixProvider

from tiered.errors import IndexFileError
from tiered.index import CompactedIndexFile
from tiered.index import IndexBatch
from tiered.index import IndexHeader
from tiered.index import IndexStoreFile
from tiered.index import check_compacted
from tiered.index import compact_numpy
from tiered.index.compaction import compact_file
from tiered.index.format import BEGIN_MAGIC_CODE
from tiered.index.format import KeyQuery

T0 = 1_700_000_000_000
SealedFactory = Callable[..., tuple[Path, bytes]]


def v6_local(tmp_path: Path) -> IndexStoreFile:
    f = IndexStoreFile.create(tmp_path, T0, slots=5, max_items=20)
    f.put_many(
        IndexBatch.for_queue(
            "TopicTest", 7, 1, [0, 100], [100, 120], [T0 + 1500, T0 + 2500], [None, None],
            ["k1", "k2"],
        )
    )  # fmt: skip
    f.put_many(IndexBatch.for_queue("TopicTest", 7, 2, [220], [130], [T0 + 3999], [None], ["k1"]))
    return f


class Requests(Counter[str]):
    """A request listener counting backend requests by operation."""

    def __call__(self, operation: str) -> None:
        self[operation] += 1


@pytest.fixture(params=["memory", "posix"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Provider:
    return MemoryProvider() if request.param == "memory" else PosixProvider(tmp_path / "tier")


KEY = "rmq_sys_INDEX_test/0/INDEX/segment"


def upload(provider: Provider, data: bytes, begin: int, slots: int) -> CompactedIndexFile:
    provider.put(KEY, data, overwrite=True)
    return CompactedIndexFile(provider, KEY, size=len(data), begin_timestamp=begin, slots=slots)


def test_compacted_queries_take_at_most_two_reads(provider: Provider, tmp_path: Path) -> None:
    requests = Requests()
    with v6_local(tmp_path) as f:
        compacted = upload(provider, compact_file(f), T0, 5)
        provider.add_request_listener(requests)
        for key, max_count in (("k1", 10), ("k1", 1), ("k2", 10), ("absent", 10)):
            requests.clear()
            hits = compacted.query(KeyQuery("TopicTest", key, T0, T0 + 10000, max_count))
            local = f.query(KeyQuery("TopicTest", key, T0, T0 + 10000, max_count))[:max_count]
            assert [(i.queue_id, i.offset) for i in hits] == [(i.queue_id, i.offset) for i in local]
            reads = sum(requests.values())
            assert reads == 2 if local else reads <= 2  # slot entry, then the slot's items
        requests.clear()
        assert compacted.query(KeyQuery("TopicTest", "nothing-in-slot-3", T0, T0 + 10000, 10)) == []
        assert compacted.query(KeyQuery("TopicTest", "k1", T0, T0 + 10000, 1))[0].offset == 220
    empty = upload(provider, b"", T0, 5)
    requests.clear()
    assert empty.query(KeyQuery("TopicTest", "k1", 0, 2**62, 10)) == []
    assert sum(requests.values()) == 0


def test_compacted_queries_filter_topics_hash_and_time(provider: Provider, tmp_path: Path) -> None:
    requests = Requests()
    puts = [  # one slot: other topics, other keys and other times share it
        ("T", 1, "k", T0 + 1000),
        ("U", 2, "k", T0 + 2000),
        ("T", 1, "other", T0 + 3000),
        ("T", 9, "k", T0 + 4000),  # a hash-colliding topic id: only topic_id tells it apart
        ("T", 1, "k", T0 + 9000),
    ]
    with IndexStoreFile.create(tmp_path, T0, slots=1, max_items=20) as f:
        for i, (topic, topic_id, key, ts) in enumerate(puts):
            f.put_many(IndexBatch.for_queue(topic, topic_id, 0, [i], [1], [ts], [None], [key]))
        compacted = upload(provider, compact_file(f), T0, 1)
    provider.add_request_listener(requests)

    def offsets(*args: int | None, begin: int = T0, end: int = T0 + 10000) -> list[int]:
        max_count, topic_id = args
        return [
            i.offset
            for i in compacted.query(KeyQuery("T", "k", begin, end, max_count or 10, topic_id))
        ]

    assert offsets(None, None) == [4, 3, 0]
    assert offsets(None, 1) == [4, 0]
    assert offsets(1, 1) == [4]
    assert offsets(None, 1, end=T0 + 5000) == [0]
    assert offsets(None, 1, begin=T0 + 9000, end=T0 + 9000) == [4]
    assert sum(requests.values()) <= 2 * 5


def test_compacted_query_reads_only_the_newest_1024_items_of_a_slot(tmp_path: Path) -> None:
    provider = MemoryProvider()
    n = 1100
    with IndexStoreFile.create(tmp_path, T0, slots=1, max_items=n + 1) as f:
        f.put_many(
            IndexBatch.for_queue(
                "T", 1, 0, np.arange(n), np.ones(n), T0 + np.arange(n), [None] * n,
                ["old"] * 50 + ["new"] * (n - 50),
            )
        )  # fmt: skip
        compacted = upload(provider, compact_file(f), T0, 1)
        assert len(f.query(KeyQuery("T", "old", 0, 2**62, 100))) == 0  # beyond 512 visits locally
    assert compacted.query(KeyQuery("T", "old", 0, 2**62, 100)) == []  # beyond the 1024 newest
    assert len(compacted.query(KeyQuery("T", "new", 0, 2**62, 2000))) == 1024


def test_check_compacted_accepts_its_own_output_and_rejects_others(
    sealed_file: SealedFactory,
) -> None:
    _, data = sealed_file(300, 11, 400)
    sealed = IndexHeader.parse(data)
    out = compact_numpy(data, 11)
    assert check_compacted(out[:28], len(out), 11, sealed).item_count == 300
    with pytest.raises(IndexFileError, match="not the END magic"):
        check_compacted(struct.pack(">i", BEGIN_MAGIC_CODE) + out[4:28], len(out), 11, sealed)
    with pytest.raises(IndexFileError, match="not 28 \\+ 11\\*8"):
        check_compacted(out[:28], len(out) - 1, 11, sealed)
    with pytest.raises(IndexFileError, match="more items"):
        check_compacted(out[:28], len(out) + 28, 11, sealed)
    other = sealed._replace(begin_timestamp=sealed.begin_timestamp + 1)
    with pytest.raises(IndexFileError, match="does not match"):
        check_compacted(out[:28], len(out), 11, other)
    assert check_compacted(b"", 0, 11).item_count == 0
