"""The read-ahead cache of cold reads (spec §9.3, without its quirks).

Entries are whole message units keyed by ``(topic, queueId, queueOffset)``, weighted by their bytes,
bounded by ``readAheadCacheSizeThresholdRate`` × the memory limit (the cgroup limit when one is set,
else physical RAM) and expired ``readAheadCacheExpireDuration`` after their last access. The cache
counts as busy, and is bypassed, when more than 80 % of its byte budget is used. Concurrent misses
on a range another reader is already loading wait for that one backend read (single flight).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cachetools import TTLCache

BUSY_RATE = 0.8
QueueKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CachedUnit:
    """One message unit as stored in the tier, with its consumequeue tag code."""

    data: bytes
    tags_code: int


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
    """Counters behind the read-ahead cache metrics."""

    accesses: int = 0
    hits: int = 0
    loads: int = 0
    waits: int = 0


class _Flight:
    __slots__ = ("done", "end", "start")

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end
        self.done = threading.Event()


class ReadAheadCache:
    """Thread-safe, byte-weighted, expire-after-access cache of message units."""

    def __init__(
        self, max_bytes: int, expire_ms: int, *, clock: Callable[[], float] = time.monotonic
    ):
        self.max_bytes = max(1, max_bytes)
        self._cache: TTLCache[tuple[str, int, int], CachedUnit] = TTLCache(
            maxsize=self.max_bytes,
            ttl=expire_ms / 1000.0,
            timer=clock,
            getsizeof=lambda u: max(1, len(u.data)),
        )
        self._lock = threading.Lock()
        self._flights: dict[QueueKey, list[_Flight]] = {}
        self.stats = CacheStats()

    @property
    def used_bytes(self) -> int:
        """Bytes held now."""
        with self._lock:
            self._cache.expire()
            return int(self._cache.currsize)

    def __len__(self) -> int:
        with self._lock:
            self._cache.expire()
            return len(self._cache)

    @property
    def busy(self) -> bool:
        """More than 80 % of the byte budget is used: readers should go around the cache."""
        return self.used_bytes > BUSY_RATE * self.max_bytes

    def get(self, topic: str, queue_id: int, offset: int) -> CachedUnit | None:
        """The unit at ``offset``, refreshing its expiry; ``None`` on a miss."""
        key = (topic, queue_id, offset)
        with self._lock:
            self.stats.accesses += 1
            unit = self._cache.get(key)
            if unit is not None:
                self.stats.hits += 1
                self._cache[key] = unit  # expire-after-access: re-arm the timer
            return unit

    def put_many(self, topic: str, queue_id: int, units: Iterable[tuple[int, CachedUnit]]) -> None:
        """Insert units by queue offset (a unit bigger than the whole budget is not cached)."""
        with self._lock:
            self.stats.loads += 1
            for offset, unit in units:
                if len(unit.data) <= self.max_bytes:
                    self._cache[(topic, queue_id, offset)] = unit

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
