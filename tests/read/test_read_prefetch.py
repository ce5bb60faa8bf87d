"""A catch-up has the read-ahead window after the one it reads loaded ahead of it: its pulls
find the window cached instead of stopping for the backend, each window is read from the backend
once (a prefetch meeting a damaged message: test_read_integrity)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tiered.read.fetcher import BULK_UNITS
from tiered.read.fetcher import GetStatus
from tiered.read.message_store import TieredMessageStore
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]
TOPIC, QID = "GenTopic0", 0
WINDOW = BULK_UNITS


def settled(store: TieredMessageStore) -> None:
    deadline = time.monotonic() + 30
    while store.fetcher.prefetching:
        assert time.monotonic() < deadline, "a prefetch never ended"
        time.sleep(0.01)


def test_a_catch_up_finds_the_next_window_loaded_ahead(make_tier: TierFactory) -> None:
    tier = make_tier("posix")
    store = tier.store("FORCE", read_ahead_message_count_threshold=WINDOW)
    cache = store.cache
    assert cache is not None
    end = store.get_max_offset(TOPIC, QID)
    assert end > 2 * WINDOW
    offset, loads_by_reader = 0, 0
    try:
        while offset < end:
            settled(store)  # what was asked for ahead is there before the reader asks
            loads, ahead = cache.stats.loads, store.fetcher.prefetched
            result = store.get_message(TOPIC, QID, offset, 32)
            assert result.status is GetStatus.FOUND
            # a window the read asked to have loaded ahead may be loaded before the read returns
            # (a busy machine runs the prefetch thread at once): it is not the reader's load
            settled(store)
            if cache.stats.loads - loads > store.fetcher.prefetched - ahead:
                loads_by_reader += 1
            for unit in result.units:  # as stored but for PHYSICALOFFSET (the flat file's)
                want = tier.expected[(TOPIC, QID, unit.queue_offset)]
                assert unit.data[:28] + unit.data[36:] == want[:28] + want[36:]
            if offset == WINDOW:  # the first read in a window loaded ahead asks for the next
                settled(store)
                assert store.fetcher.prefetched == 2
            offset = result.next_begin_offset
        windows = -(-end // WINDOW)
        assert loads_by_reader == 1  # only the first window: every later one was loaded ahead
        assert store.fetcher.prefetched == windows - 1
        assert cache.stats.loads == windows  # each window read from the backend once
    finally:
        store.close()


def test_random_reads_and_reads_in_a_windows_first_half_load_nothing_ahead(
    make_tier: TierFactory,
) -> None:
    tier = make_tier("posix")
    store = tier.store("FORCE", read_ahead_message_count_threshold=WINDOW)
    try:
        for offset in (0, 32, 64, 96):  # the first half of the window loaded at 0, up to 128
            assert store.get_message(TOPIC, QID, offset, 32).count == 32
        assert store.get_message(TOPIC, QID, 300, 1).count == 1  # one message: a 32-unit window
        settled(store)
        assert store.fetcher.prefetched == 0
    finally:
        store.close()


def test_a_closed_store_loads_nothing_ahead(make_tier: TierFactory) -> None:
    tier = make_tier("posix")
    store = tier.store("FORCE", read_ahead_message_count_threshold=WINDOW)
    store.close()
    offset = 0
    while offset < 2 * WINDOW:  # reads still work, closed or not
        offset = store.get_message(TOPIC, QID, offset, 64).next_begin_offset
    assert store.fetcher.prefetching == 0 and store.fetcher.prefetched == 0


def test_a_read_larger_than_a_window_is_one_window_and_the_next_is_loaded_ahead(
    make_tier: TierFactory,
) -> None:
    """A bulk read asking for more than the read-ahead count (an HTTP raw catch-up) has windows
    of its own count, trimmed to ``readAheadMessageSizeThreshold`` bytes; one that took a whole
    window and has too little of its byte budget left for another message does not wait for a
    window it could take nothing from: the next one is loaded ahead of its next read instead."""
    tier = make_tier("posix")
    count, whole = 500, WINDOW + 16
    window_bytes = sum(len(tier.expected[(TOPIC, QID, q)]) for q in range(whole))
    store = tier.store(
        "FORCE",
        read_ahead_message_count_threshold=WINDOW,
        read_ahead_message_size_threshold_bytes=window_bytes,
    )
    cache = store.cache
    assert cache is not None
    assert store.get_max_offset(TOPIC, QID) > count
    try:
        first = store.get_message(TOPIC, QID, 0, count, max_bytes=window_bytes + 1)
        assert first.count == whole and first.next_begin_offset == whole  # more than WINDOW
        settled(store)
        assert cache.stats.loads == 2 and store.fetcher.prefetched == 1  # the reader's one
        second = store.get_message(TOPIC, QID, whole, 8, max_bytes=window_bytes)
        assert [u.queue_offset for u in second.units] == list(range(whole, whole + 8))
        assert cache.stats.loads == 2  # found loaded ahead
    finally:
        store.close()
