"""The read-ahead cache of cold reads (spec §9.3, without its quirks).

An entry is a *window*: the consecutive message units one read-ahead returned, keyed by
``(topic, queueId, first queueOffset)``, weighted by its bytes, bounded by
``readAheadCacheSizeThresholdRate`` × the memory limit (the cgroup limit when one is set, else
physical RAM) and expired ``readAheadCacheExpireDuration`` after its last access. A lookup by
queue offset finds the window holding it (a per-queue sorted index of window starts), so serving
a run of messages costs one cache access, not one per message (upstream keys every message).
The cache counts as busy, and is bypassed, when more than 80 % of its byte budget is used.
Concurrent misses on a range another reader is already loading wait for that one backend read
(single flight). Windows a reader has gone on past are dropped early (:data:`PASSED_KEEP`).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cachetools import TTLCache

from tiered.read.read_unit import Run
from tiered.read.read_unit import Unit

BUSY_RATE = 0.8
PASSED_KEEP = 4
"""Windows kept after a reader has gone on past them (for a reader that asks again, or one a
little behind). A window is *passed* when a reader reads from the start of the window that
follows it in its queue; a prefetched window passes nothing until the reader gets there. Older
passed windows are dropped at once rather than held until they expire, so a catch-up reuses the
memory of the windows it has read instead of taking fresh memory (a page fault per 4 KiB, more
than the copy into it) for every window for as long as the expiry."""
EXPIRE_EVERY_S = 0.1
REARM_EVERY_S = 0.1
"""A window's expiry is re-armed by a read at most this often (a TTLCache write per read is a
noticeable share of a small pull's cost): it may expire up to this much earlier than
``readAheadCacheExpireDuration`` after its last read."""
_EMPTY = Run.empty()
QueueKey = tuple[str, int]


def memory_limit_bytes() -> int:
    """The cgroup (v2, then v1) memory limit of this process, else physical RAM."""
    for path, unlimited in (
        (Path("/sys/fs/cgroup/memory.max"), "max"),
        (Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"), ""),
    ):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text and text != unlimited and text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(slots=True)
class CacheStats:
    """Counters behind the read-ahead cache metrics (a lookup is one access)."""

    accesses: int = 0
    hits: int = 0
    loads: int = 0
    waits: int = 0


@dataclass(slots=True)
class Window:
    """Consecutive units of one queue from queue offset ``start``: one read, kept whole;
    ``armed``: when its expiry was last re-armed."""

    start: int
    run: Run
    armed: float = float("-inf")

    @property
    def end(self) -> int:
        """The queue offset after the last unit."""
        return self.start + len(self.run)

    @property
    def nbytes(self) -> int:
        """What it holds in memory: the buffer its units are cut from."""
        return len(self.run.data)


WindowKey = tuple[str, int, int]


class _Windows(TTLCache[WindowKey, Window]):
    """A TTL cache of windows with a per-queue sorted index of their starts, kept in step with
    every window it drops (expired or evicted). Not locked: its owner locks."""

    def __init__(self, maxsize: int, ttl: float, timer: Callable[[], float]) -> None:
        super().__init__(maxsize, ttl, timer=timer, getsizeof=lambda w: max(1, w.nbytes))
        self.starts: dict[QueueKey, list[int]] = {}
        self.messages = 0
        self.nbytes = 0
        """``currsize`` without expiring anything (TTLCache's expires first: asked per read)."""

    def add(self, key: WindowKey, window: Window) -> None:
        """Insert (or replace) a window and index its start."""
        old = self.pop(key, None)
        if old is not None:
            self.forget(key, old)
        self[key] = window
        bisect.insort(self.starts.setdefault(key[:2], []), key[2])
        self.messages += len(window.run)
        self.nbytes += max(1, window.nbytes)

    def forget(self, key: WindowKey, window: Window) -> None:
        """Drop a window's start from the index."""
        self.messages -= len(window.run)
        self.nbytes -= max(1, window.nbytes)
        starts = self.starts.get(key[:2])
        if starts is None:
            return
        i = bisect.bisect_left(starts, key[2])
        if i < len(starts) and starts[i] == key[2]:
            del starts[i]
        if not starts:
            del self.starts[key[:2]]

    def expire(self, time: float | None = None) -> list[tuple[WindowKey, Window]]:
        gone = super().expire(time)
        for key, window in gone:
            self.forget(key, window)
        return gone

    def popitem(self) -> tuple[WindowKey, Window]:
        key, window = super().popitem()
        self.forget(key, window)
        return key, window


class _Flight:
    __slots__ = ("done", "end", "start")

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end
        self.done = threading.Event()


class ReadAheadCache:
    """Thread-safe, byte-weighted, expire-after-access cache of read-ahead windows."""

    def __init__(
        self, max_bytes: int, expire_ms: int, *, clock: Callable[[], float] = time.monotonic
    ):
        self.max_bytes = max(1, max_bytes)
        self._lock = threading.Lock()
        self._cache = _Windows(self.max_bytes, expire_ms / 1000.0, clock)
        self._clock = clock
        self._expired_at = float("-inf")
        self._flights: dict[QueueKey, list[_Flight]] = {}
        self._passed: collections.deque[WindowKey] = collections.deque()
        self.stats = CacheStats()

    @property
    def used_bytes(self) -> int:
        """Bytes held now."""
        with self._lock:
            self._cache.expire()
            return int(self._cache.currsize)

    def __len__(self) -> int:
        """Messages held now."""
        with self._lock:
            self._cache.expire()
            return self._cache.messages

    @property
    def windows(self) -> int:
        """Windows (cache entries) held now."""
        with self._lock:
            self._cache.expire()
            return len(self._cache)

    @property
    def busy(self) -> bool:
        """More than 80 % of the byte budget is used: readers should go around the cache. Asked
        on every read: expired windows are dropped at most every :data:`EXPIRE_EVERY_S`."""
        now = self._clock()
        if now - self._expired_at >= EXPIRE_EVERY_S:
            with self._lock:
                self._cache.expire()
            self._expired_at = now
        return self._cache.nbytes > BUSY_RATE * self.max_bytes

    def run(self, topic: str, queue_id: int, offset: int, limit: int) -> Run:
        """Up to ``limit`` cached units from ``offset`` on, from the window that holds it
        (re-arming its expiry), as a slice of its run (no copy); empty on a miss. One
        access."""
        return self.lookup(topic, queue_id, offset, limit)[0]

    def lookup(self, topic: str, queue_id: int, offset: int, limit: int) -> tuple[Run, int, int]:
        """:meth:`run`, with the queue offsets where the window that holds ``offset`` starts and
        ends (``-1, -1`` on a miss). A read at a window's start passes the window before it (a
        reader went on past its end)."""
        with self._lock:
            self.stats.accesses += 1
            starts = self._cache.starts.get((topic, queue_id))
            if not starts:
                return _EMPTY, -1, -1
            i = bisect.bisect_right(starts, offset) - 1
            if i < 0:
                return _EMPTY, -1, -1
            key = (topic, queue_id, starts[i])
            window = self._cache.get(key)
            if window is None or offset >= window.end:
                return _EMPTY, -1, -1
            self.stats.hits += 1
            now = self._clock()
            if now - window.armed >= REARM_EVERY_S:  # expire-after-access: re-arm the timer
                self._cache[key] = window
                window.armed = now
            if offset == window.start:
                self._pass_before(topic, queue_id, offset)
            at = offset - window.start
            return window.run.slice(at, at + limit), window.start, window.end

    def holds(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether a window holds ``offset`` (not an access: no statistics, no expiry re-armed)."""
        with self._lock:
            starts = self._cache.starts.get((topic, queue_id))
            if not starts:
                return False
            i = bisect.bisect_right(starts, offset) - 1
            window = self._cache.get((topic, queue_id, starts[i])) if i >= 0 else None
            return window is not None and offset < window.end

    def done_with(self, topic: str, queue_id: int, start: int) -> None:
        """A reader took the window at ``start`` to its end, the queue's end: nothing will pass
        it, so a window that is a view of the provider's read-ahead is dropped now rather than
        keep the provider's whole window lent to it until it expires (the provider still holds
        the bytes for a read of them again, as long as its memory allows)."""
        key = (topic, queue_id, start)
        with self._lock:
            window = self._cache.get(key)
            if window is not None and isinstance(window.run.data, memoryview):
                del self._cache[key]
                self._cache.forget(key, window)

    def get(self, topic: str, queue_id: int, offset: int) -> Unit | None:
        """The unit at ``offset``, refreshing its window's expiry; ``None`` on a miss."""
        found = self.run(topic, queue_id, offset, 1)
        return found.units()[0] if len(found) else None

    def put_window(self, topic: str, queue_id: int, start: int, run: Run) -> None:
        """Cache a run of consecutive units (queue offsets ``start``, ``start + 1``, ...) as one
        window (a window bigger than the whole budget is not cached)."""
        window = Window(start, run, self._clock())
        with self._lock:
            self.stats.loads += 1
            if not len(run) or window.nbytes > self.max_bytes:
                return
            self._cache.add((topic, queue_id, start), window)

    def _pass_before(self, topic: str, queue_id: int, start: int) -> None:
        """The window that ends at ``start`` is passed; drop the passed windows beyond the last
        :data:`PASSED_KEEP` (under the lock)."""
        starts = self._cache.starts.get((topic, queue_id))
        if not starts:
            return
        i = bisect.bisect_left(starts, start) - 1
        if i < 0:
            return
        key = (topic, queue_id, starts[i])
        previous = self._cache.get(key)
        if previous is None or previous.end != start or key in self._passed:
            return
        self._passed.append(key)
        while len(self._passed) > PASSED_KEEP:
            old = self._passed.popleft()
            gone = self._cache.pop(old, None)
            if gone is not None:
                self._cache.forget(old, gone)

    def put_many(self, topic: str, queue_id: int, units: Iterable[Unit]) -> None:
        """Cache units by queue offset: each run of consecutive offsets becomes one window."""
        ordered = sorted(units, key=lambda u: u.queue_offset)
        for _, run in itertools.groupby(enumerate(ordered), key=lambda x: x[1].queue_offset - x[0]):
            window = [u for _, u in run]
            self.put_window(topic, queue_id, window[0].queue_offset, Run.of_units(window))

    def load_once(
        self, topic: str, queue_id: int, start: int, span: int, loader: Callable[[], None]
    ) -> None:
        """Run ``loader`` for ``[start, start + span)`` unless another thread is loading a range
        that holds ``start``; then wait for that one instead. ``loader`` fills the cache itself."""
        qkey = (topic, queue_id)
        with self._lock:
            for f in self._flights.get(qkey, []):
                if f.start <= start < f.end:
                    self.stats.waits += 1
                    flight, mine = f, False
                    break
            else:
                flight, mine = _Flight(start, start + span), True
                self._flights.setdefault(qkey, []).append(flight)
        if not mine:
            flight.done.wait()
            return
        try:
            loader()
        finally:
            with self._lock:
                self._flights[qkey].remove(flight)
                if not self._flights[qkey]:
                    del self._flights[qkey]
            flight.done.set()
