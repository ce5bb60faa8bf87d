"""What cold reads cost the backend: one commitlog read per read-ahead window, one read for many
concurrent misses, and the cache's accounting."""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import REGISTRY
from tiered.providers import LatencyProvider
from tiered.providers import Provider
from tiered.providers import WrappedProvider

from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.read.fetcher import BULK_UNITS
from tiered.read.fetcher import GetStatus
from tiered.read.fetcher import TieredReader
from tiered.read.message_store import TieredMessageStore
from tiered.read.read_cache import ReadAheadCache
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]


T = TypeVar("T")


class CountingProvider(WrappedProvider):
    """Counts reads by file type (``COMMIT_LOG``, ``CONSUME_QUEUE``, ...)."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.reads: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        if operation == "read":
            kind = key.split("/")[-2]
            with self._lock:
                self.reads[kind] += 1
        return call()


def counting(provider: Provider) -> CountingProvider:
    return CountingProvider(provider)


def test_a_sequential_scan_reads_each_window_once(make_tier: TierFactory) -> None:
    window = 100
    tier = make_tier(
        "posix",
        wrap=counting,
        deleted_files=0,
        readAheadMessageCountThreshold=window,
        tieredStoreCommitLogMaxSize=1 << 30,  # one segment: a window never spans two
    )
    provider = tier.provider
    assert isinstance(provider, CountingProvider)
    store = tier.store("FORCE")
    for topic, qid in tier.queues:
        n = store.get_max_offset(topic, qid)
        provider.reads.clear()
        offset = 0
        while offset < n:
            r = store.get_message(topic, qid, offset, 32)
            assert r.status is GetStatus.FOUND and r.next_begin_offset > offset
            offset = r.next_begin_offset
        reads = provider.reads["COMMIT_LOG"]
        assert math.ceil(n / window) <= reads <= math.ceil(n / window) + 1, (n, reads)
        assert provider.reads["CONSUME_QUEUE"] <= math.ceil(n / window) + 1


def test_concurrent_misses_wait_for_one_backend_read(make_tier: TierFactory) -> None:
    counter: list[CountingProvider] = []

    def slow_counting(provider: Provider) -> CountingProvider:
        counter.append(CountingProvider(LatencyProvider(provider, 0.0)))
        return counter[0]

    tier = make_tier(
        "memory", wrap=slow_counting, deleted_files=0, tieredStoreCommitLogMaxSize=1 << 30
    )
    store = tier.store("FORCE")
    topic, qid = tier.queues[0]
    store.get_message(topic, qid, 0, 1)  # the first segment's head is read (and kept) once
    assert isinstance(counter[0].inner, LatencyProvider)
    counter[0].inner.latency_s = 0.2
    counter[0].reads.clear()
    barrier = threading.Barrier(8)
    results: list[int] = []

    def reader(offset: int) -> None:
        barrier.wait()
        r = store.get_message(topic, qid, offset, 16)
        results.append(len(r.units))

    threads = [threading.Thread(target=reader, args=(100,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [16] * 8
    assert counter[0].reads["COMMIT_LOG"] == 1
    assert store.cache is not None and store.cache.stats.loads == 2  # the first call's, and one
    assert store.cache.stats.waits >= 1


def test_cache_metrics_count_entries_bytes_accesses_and_hits(make_tier: TierFactory) -> None:
    tier = make_tier("memory", deleted_files=0)
    store = tier.store("FORCE")
    cache = store.cache
    assert cache is not None

    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    access0 = sample("rocketmq_tiered_store_read_ahead_cache_access_total")
    hit0 = sample("rocketmq_tiered_store_read_ahead_cache_hit_total")
    topic, qid = tier.queues[0]
    store.get_message(topic, qid, 0, 8)  # a miss, a load, a hit
    store.get_message(topic, qid, 8, 8)  # a hit (one lookup serves a run of messages)
    assert sample("rocketmq_tiered_store_read_ahead_cache_messages") == len(cache) > 16
    assert sample("rocketmq_tiered_store_read_ahead_cache_bytes") == cache.used_bytes
    assert sample("rocketmq_tiered_store_read_ahead_cache_access_total") - access0 == 3
    assert sample("rocketmq_tiered_store_read_ahead_cache_hit_total") - hit0 == 2
    out = REGISTRY.get_sample_value("rocketmq_tiered_store_messages_out_total", {"topic": topic})
    assert out is not None and out >= 16
    latency = REGISTRY.get_sample_value(
        "rocketmq_tiered_store_api_latency_count", {"operation": "get_message", "topic": topic}
    )
    assert latency is not None and latency >= 2


def test_a_busy_cache_is_bypassed(make_tier: TierFactory) -> None:
    window = 30
    tier = make_tier(
        "memory", wrap=counting, deleted_files=0, readAheadMessageCountThreshold=window
    )
    provider = tier.provider
    assert isinstance(provider, CountingProvider)
    topic, qid = tier.queues[0]
    flat = tier.sidecar.flat_store.get(topic, qid)
    assert flat is not None
    first_window = int(flat.consume_queue.read_units(0, window)["size"].astype(int).sum())
    small = ReadAheadCache(int(first_window / 0.85), 15_000)  # one window: 85 % of it
    store = TieredMessageStore(
        tier.level("FORCE"), tier.sidecar.flat_store, tier.sidecar.local, cache=small
    )
    first = store.get_message(topic, qid, 0, 4)  # fills the cache beyond 80 % of its bytes
    assert small.busy
    provider.reads.clear()
    for offset in range(4, 40, 4):
        r = store.get_message(topic, qid, offset, 4)
        assert [u.queue_offset for u in r.units] == list(range(offset, offset + 4))
    assert provider.reads["COMMIT_LOG"] == 9  # one direct read per call
    assert [u.queue_offset for u in first.units] == [0, 1, 2, 3]


def test_without_the_cache_each_call_reads_once(make_tier: TierFactory) -> None:
    tier = make_tier("memory", wrap=counting, deleted_files=0, readAheadCacheEnable="false")
    provider = tier.provider
    assert isinstance(provider, CountingProvider)
    store = tier.store("FORCE")
    assert store.cache is None
    topic, qid = tier.queues[1]
    store.get_message(topic, qid, 0, 1)
    provider.reads.clear()
    r = store.get_message(topic, qid, 10, 50)
    assert [u.queue_offset for u in r.units] == list(range(10, 60))
    assert provider.reads["COMMIT_LOG"] == 1 and provider.reads["CONSUME_QUEUE"] == 1


class ReadLengths(WrappedProvider):
    """Records the length of every consumequeue read."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.cq_reads: list[int] = []

    def read(self, key: str, position: int, length: int) -> bytes:
        if key.split("/")[-2] == "CONSUME_QUEUE":
            self.cq_reads.append(length)
        return super().read(key, position, length)


def test_a_bulk_reader_asks_the_consumequeue_for_more_only_on_its_first_read(
    make_tier: TierFactory,
) -> None:
    """On an object store the first bulk read of a queue asks for the read-ahead threshold (so
    the provider opens a window at once); the reads that continue it ask for what they need."""
    tier = make_tier("memory", wrap=ReadLengths)
    provider = tier.sidecar.flat_store.provider
    assert isinstance(provider, ReadLengths)
    flat = tier.sidecar.flat_store.get("GenTopic0", 0)
    assert flat is not None and flat.commit_offset - flat.min_offset() > 2 * BULK_UNITS
    reader = TieredReader(1 << 30, lambda f, e: None, bulk_index_bytes=1000 * CQ_UNIT_SIZE)

    def pull(offset: int) -> tuple[int, list[int]]:
        provider.cq_reads.clear()
        run = reader.run(flat, offset, BULK_UNITS)
        assert len(run) == BULK_UNITS
        return offset + len(run), list(provider.cq_reads)

    at, first = pull(0)
    assert sum(first) > BULK_UNITS * CQ_UNIT_SIZE  # asked for more than it keeps
    at, second = pull(at)
    assert sum(second) == BULK_UNITS * CQ_UNIT_SIZE  # continues: exactly what it needs
    _, again = pull(0)  # starts over: not a continuation
    assert sum(again) > BULK_UNITS * CQ_UNIT_SIZE
    small = TieredReader(1 << 30, lambda f, e: None, bulk_index_bytes=1000 * CQ_UNIT_SIZE)
    provider.cq_reads.clear()
    small.run(flat, 0, 10)  # a single fetch never asks for more
    assert sum(provider.cq_reads) == 10 * CQ_UNIT_SIZE
