"""Read-ahead for sequential readers of an object store: one ranged GET per window, prefetched.

A reader that continues exactly where its previous read of the same key ended (a consumer
catching up: consumequeue, then commitlog, read after read) is *sequential*. For such a key the
provider fetches a whole **window** (``objectStoreReadAheadSize`` bytes, cut where the object or
the chunk object holding it ends, so a window is always one GET) and, in background threads, the
next :data:`DEPTH` windows. Reads are then answered from memory; a catch-up costs one GET per
window instead of one per read, and the GETs of the next windows overlap the reader's work on
this one (a window's extent is known before its bytes, so the next GETs start at once).

Any other read (a small first read of a key, a random single-message fetch) goes straight to
the backend for exactly the bytes asked: no window is fetched for it, so cold single reads cost what
they did. Windows only ever hold bytes already written, and a written byte never changes (objects
are append-only; ``forget`` drops a key's windows when it is deleted or replaced).

A window stays until a read *starts* past it, so a reader that reads some bytes again (a
consumer that asks for more than it keeps, a retried pull) is still answered from memory.

Memory: every window counts against ``objectStoreReadAheadMemory`` from the moment it is
requested; a key holds the windows its last read spans and the :data:`DEPTH` after them. When
the budget is full the least recently read key's windows are dropped; when it still is, no
prefetch is made.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field

DEPTH = 2
"""Windows fetched ahead of the one being read."""
LARGE_READ_FRACTION = 32
"""A read of at least ``window / 32`` bytes (1 MiB of a 32 MiB window: a consumer's read-ahead
of thousands of messages, never a single-message fetch) is taken as sequential wherever it
starts."""


def large_read_bytes(window_bytes: int) -> int:
    """The size from which a read is taken as sequential (:data:`LARGE_READ_FRACTION`)."""
    return max(1, window_bytes // LARGE_READ_FRACTION)


Bounds = Callable[[str, int, int], tuple[int, bool]]
"""``bounds(key, start, size)``: where the window from ``start`` ends -- at most ``size`` bytes,
cut where the object or the chunk object holding ``start`` ends, so it is one GET -- and whether
the object holds bytes after it; ``(start, False)`` at or past the end."""
Fetch = Callable[[str, int, int], bytes]
"""``fetch(key, start, end)``: bytes ``[start, end)`` of ``key`` in one request."""


@dataclass
class _Window:
    start: int
    end: int
    more: bool
    fetched: Future[bytes]


@dataclass
class _Stream:
    last_end: int
    windows: list[_Window] = field(default_factory=list)


class ReadAhead:
    """Sequential-read windows per key; see the module docstring."""

    def __init__(
        self, bounds: Bounds, fetch: Fetch, window_bytes: int, max_bytes: int, threads: int = 4
    ) -> None:
        self._bounds = bounds
        self._fetch = fetch
        self.window_bytes = max(1, window_bytes)
        self.large_read = large_read_bytes(self.window_bytes)
        self.max_bytes = max(self.window_bytes, max_bytes)
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._held = 0  # bytes of every window held (fetched or on its way)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._threads = threads

    @property
    def held_bytes(self) -> int:
        """Bytes the windows held now occupy, or will once fetched."""
        with self._lock:
            return self._held

    def read(self, key: str, position: int, length: int) -> bytes | None:
        """``[position, position + length)`` from the key's windows, or ``None``: not a
        sequential read (or the window failed), so the caller reads it from the backend."""
        parts: list[bytes] = []
        at, need = position, length
        large = length >= self.large_read  # a consumer's read-ahead: sequential from here
        with self._lock:
            stream = self._streams.get(key)
            if stream is None:
                stream = self._streams[key] = _Stream(position if large else position + length)
                if not large:
                    return None
            self._streams.move_to_end(key)
            sequential = large or position == stream.last_end
        while need > 0:
            with self._lock:
                window = self._window_at(
                    key, stream, position, at, sequential=sequential or at > position
                )
            if window is None:
                break
            try:
                data = window.fetched.result()
            except Exception:  # the caller's own read reports (and retries) the failure
                self.forget(key)
                return None
            piece = data[at - window.start : at - window.start + need]
            parts.append(piece)
            at += len(piece)
            need -= len(piece)
            with self._lock:
                self._ahead(key, stream, at)
                stream.last_end = at
            if not window.more and at >= window.end:
                break  # the object ends here
        if at == position:
            with self._lock:
                stream.last_end = position + length
            return None
        return b"".join(parts)

    def forget(self, key: str) -> None:
        """Drop ``key``'s windows (the object was deleted or replaced)."""
        with self._lock:
            stream = self._streams.pop(key, None)
            if stream is not None:
                self._drop(stream, len(stream.windows))

    def close(self) -> None:
        """Drop every window and stop the prefetch threads."""
        with self._lock:
            for stream in self._streams.values():
                self._drop(stream, len(stream.windows))
            self._streams.clear()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    # --- under the lock -------------------------------------------------------------------------

    def _window_at(
        self, key: str, stream: _Stream, read_start: int, position: int, *, sequential: bool
    ) -> _Window | None:
        """The window holding ``position`` (windows that end before ``read_start``, where this
        read starts, are passed and dropped); a new one (and those ahead of it) when the read is
        sequential; ``None`` otherwise."""
        passed = 0
        while passed < len(stream.windows) and stream.windows[passed].end <= read_start:
            passed += 1
        self._drop(stream, passed)
        for window in stream.windows:
            if window.start <= position < window.end:
                return window
        if not sequential:
            return None
        self._drop(stream, len(stream.windows))
        if not self._start(key, stream, position):
            return None
        self._ahead(key, stream, position)
        return stream.windows[0]

    def _ahead(self, key: str, stream: _Stream, position: int) -> None:
        """Keep :data:`DEPTH` windows requested after the one holding ``position`` (as the
        budget allows)."""
        while stream.windows and stream.windows[-1].more:
            if sum(1 for w in stream.windows if w.end > position) > DEPTH:
                return
            if not self._start(key, stream, stream.windows[-1].end):
                return

    def _start(self, key: str, stream: _Stream, start: int) -> bool:
        """Request the window at ``start`` (evicting other keys' windows if the budget needs it);
        False past the object's end or when the budget cannot hold it."""
        end, more = self._bounds(key, start, self.window_bytes)
        size = end - start
        if size <= 0:
            return False
        for other in list(self._streams):
            if self._held + size <= self.max_bytes:
                break
            if other != key:
                victim = self._streams.pop(other)
                self._drop(victim, len(victim.windows))
        if self._held + size > self.max_bytes:
            return False
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="tiered-readahead")
        self._held += size
        future = self._pool.submit(self._fetch, key, start, end)
        stream.windows.append(_Window(start, end, more, future))
        return True

    def _drop(self, stream: _Stream, count: int) -> None:
        for window in stream.windows[:count]:
            self._held -= window.end - window.start
            window.fetched.cancel()
        del stream.windows[:count]
