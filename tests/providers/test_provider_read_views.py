"""Views of read-ahead windows (``ReadAhead.view``): no copy, and a window's buffer is not
received into again while a reader holds a view of it."""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from tiered.providers import MemoryProvider
from tiered.providers import MetricsProvider
from tiered.providers import ProviderMetrics
from tiered.providers import QuotaProvider
from tiered.providers import WrappedProvider
from tiered.providers.read_ahead import SLIVER_FRACTION
from tiered.providers.read_ahead import Extent
from tiered.providers.read_ahead import ReadAhead
from tiered.providers.testing import seg

DATA = random.Random(7).randbytes(64_000)
WINDOW = 4096
CAPACITY = WINDOW + WINDOW // SLIVER_FRACTION


def bounds(key: str, start: int, size: int) -> Extent:
    end = min(start + size, len(DATA))
    return Extent(end, end < len(DATA)) if start < len(DATA) else Extent(start, False)


def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
    for at in range(start, end, 1000):
        stop = min(at + 1000, end)
        into[at - start : stop - start] = DATA[at:stop]
        yield stop - start


def test_a_view_is_of_the_window_and_keeps_its_bytes_while_the_reader_goes_on() -> None:
    ahead = ReadAhead(bounds, fetch, WINDOW, 20 * CAPACITY)  # room to view every window
    assert ahead.view("k", 0, 100) is None  # a first small read: the reader's own
    kept = []
    position = 100
    while position < len(DATA):
        got = ahead.view("k", position, 1000)
        assert got is not None
        assert bytes(got) == DATA[position : position + 1000]
        if isinstance(got, memoryview):
            assert got.readonly
            kept.append((position, got))
        position += len(got)
    assert len(kept) > len(DATA) // 1000 // 2  # most reads lie in one window: views
    assert ahead.lent_bytes > 0  # windows dropped while viewed: lent, not held
    for at, view in kept:  # buffers lent were not received into again
        assert bytes(view) == DATA[at : at + 1000]
    del kept, got
    gc.collect()
    assert ahead.lent_bytes == 0
    ahead.close()
    assert ahead.held_bytes == 0


def test_a_read_across_two_windows_is_a_copy() -> None:
    ahead = ReadAhead(bounds, fetch, WINDOW, 4 * CAPACITY)
    assert ahead.view("k", 0, 100) is None
    assert isinstance(ahead.view("k", 100, 1000), memoryview)  # the first window's start
    got = ahead.view("k", 1100, WINDOW)  # from inside the first window into the second
    assert isinstance(got, bytes) and got == DATA[1100 : 1100 + WINDOW]
    ahead.close()


def test_views_past_the_memory_limit_are_copies_and_the_memory_stays_bounded() -> None:
    limit = 2 * CAPACITY
    ahead = ReadAhead(bounds, fetch, WINDOW, limit)
    assert ahead.view("k", 0, 100) is None
    kept, copies, position = [], 0, 100
    while position < len(DATA):  # every view held: the reader never lets one go
        got = ahead.view("k", position, 500)
        assert got is not None and bytes(got) == DATA[position : position + 500]
        if isinstance(got, memoryview):
            kept.append(got)
        else:
            copies += 1
        assert ahead.held_bytes <= limit and ahead.lent_bytes <= limit
        position += len(got)
    assert kept and copies
    del kept
    gc.collect()
    assert ahead.lent_bytes == 0 and ahead.held_bytes <= limit
    ahead.close()


@pytest.mark.parametrize("reuse", [True, False])
def test_a_buffer_comes_back_when_its_last_view_is_gone(reuse: bool) -> None:
    """A catch-up that lets its views go has its windows received into the same buffers."""
    buffers: set[int] = set()

    def watched(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        buffers.add(id(into.obj))
        yield from fetch(key, start, end, into)

    ahead = ReadAhead(bounds, watched, WINDOW, 8 * CAPACITY)
    assert ahead.view("k", 0, 100) is None
    kept, position = [], 100
    while position < len(DATA):
        got = ahead.view("k", position, 700)
        assert got is not None and bytes(got) == DATA[position : position + 700]
        if not reuse:
            kept.append(got)
        position += len(got)
        del got
    windows = -(-len(DATA) // WINDOW)
    if reuse:
        assert len(buffers) <= 5  # the windows a read spans, one ahead, and kept ones
    else:
        assert len(buffers) > windows // 2  # none came back: fresh buffers
    kept.clear()
    ahead.close()


def test_wrappers_count_views_and_reads_into_buffers_once_and_watchers_see_them() -> None:
    registry = CollectorRegistry()
    inner = MemoryProvider()
    key = seg(1)
    inner.append(key, DATA[:5000], 0)
    provider = MetricsProvider(
        QuotaProvider(inner, read_bytes_per_second=1 << 30), ProviderMetrics(registry)
    )
    assert bytes(provider.read_view(key, 100, 1000)) == DATA[100:1100]
    into = bytearray(3000)
    assert provider.readinto(key, 4000, memoryview(into)) == 1000 and into[:1000] == DATA[4000:5000]
    labels = {"path": "broker-a/TopicTest/1", "file_type": "commit_log", "operation": "read"}
    assert (
        registry.get_sample_value("rocketmq_tiered_store_provider_download_bytes_sum", labels)
        == 2000
    )
    assert (
        registry.get_sample_value("rocketmq_tiered_store_provider_download_bytes_count", labels)
        == 2
    )

    seen: list[tuple[int, int]] = []

    class Watching(WrappedProvider):
        def read(self, key: str, position: int, length: int) -> bytes:
            seen.append((position, length))
            return super().read(key, position, length)

    watching = Watching(inner)
    assert bytes(watching.read_view(key, 10, 20)) == DATA[10:30]
    assert watching.readinto(key, 30, memoryview(into)[:5]) == 5 and into[:5] == DATA[30:35]
    assert seen == [(10, 20), (30, 5)]
