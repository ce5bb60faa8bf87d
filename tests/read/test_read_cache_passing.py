"""The read-ahead cache lets go of the windows a reader has gone on past (``PASSED_KEEP`` stay),
so a catch-up reuses their memory instead of holding every window until it expires."""

from __future__ import annotations

from tiered.read.read_cache import PASSED_KEEP
from tiered.read.read_cache import ReadAheadCache
from tiered.read.read_unit import Run
from tiered.read.read_unit import Unit


def window(start: int, count: int = 4) -> Run:
    return Run.of_units([Unit(q, b"m" * 50, 0) for q in range(start, start + count)])


def test_windows_passed_by_a_catch_up_are_let_go_beyond_the_last_few() -> None:
    cache = ReadAheadCache(1 << 30, expire_ms=60_000)
    for start in range(0, 40, 4):  # a catch-up: each window starts where the last one ended
        assert len(cache.run("T", 0, start, 4)) == 0
        cache.put_window("T", 0, start, window(start))
        assert len(cache.run("T", 0, start, 4)) == 4
    # the window being read and the last PASSED_KEEP before it
    assert cache.windows == 1 + PASSED_KEEP
    assert len(cache.run("T", 0, 36 - 4 * PASSED_KEEP, 4)) == 4  # a reader a little behind
    assert len(cache.run("T", 0, 36 - 4 * (PASSED_KEEP + 1), 4)) == 0


def test_windows_not_passed_in_order_stay_until_they_expire() -> None:
    """A window is passed only by the one that starts at its end: random reads, other queues
    and a second window of the same queue elsewhere keep theirs."""
    cache = ReadAheadCache(1 << 30, expire_ms=60_000)
    for start in range(0, 100, 10):  # gaps: none follows another
        cache.put_window("T", 0, start, window(start))
    for queue in range(1, 4):
        cache.put_window("T", queue, 0, window(0))
    assert cache.windows == 10 + 3
    cache.put_window("T", 0, 4, window(4))  # follows the window at 0
    cache.put_window("T", 0, 94, window(94))  # follows the one at 90
    assert cache.windows == 10 + 3 + 2  # passed, but within the last PASSED_KEEP


def test_a_window_loaded_ahead_passes_nothing_until_it_is_read_from_its_start() -> None:
    """Prefetched windows (put before any reader reached them) keep the window being read, and
    every one before it, until the reader reads at their start."""
    cache = ReadAheadCache(1 << 30, expire_ms=60_000)
    chain = range(0, 4 * (PASSED_KEEP + 3), 4)
    for start in chain:  # each loaded ahead: none read yet
        cache.put_window("T", 0, start, window(start))
    assert cache.windows == len(chain)
    assert cache.holds("T", 0, 5) and not cache.holds("T", 0, chain[-1] + 4)
    assert cache.stats.accesses == 0  # holds() is not a read
    for start in chain:  # the reader goes through them
        run, first, end = cache.lookup("T", 0, start, 4)
        assert (len(run), first, end) == (4, start, start + 4)
    assert cache.windows == 1 + PASSED_KEEP
    assert cache.lookup("T", 0, chain[-1] + 4, 4)[1:] == (-1, -1)
