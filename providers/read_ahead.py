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

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait
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
Fetch = Callable[[str, int, int], Iterator[bytes]]
"""``fetch(key, start, end)``: bytes ``[start, end)`` of ``key`` in one request, as the pieces in
which they arrive (a reader is answered as soon as the bytes it asks for are in)."""


@dataclass
class _Window:
    start: int
    end: int
    more: bool
    fetched: Future[None] = field(default_factory=Future)
    """done when the whole window has arrived, or the fetch failed or was cancelled"""
    pieces: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    """where each piece starts (relative to ``start``)"""
    received: int = 0
    dropped: bool = False

    def has(self, end: int) -> bool:
        return self.start + self.received >= end

    def slice(self, at: int, end: int) -> bytes:
        """Bytes ``[at, end)``, which have arrived (one copy)."""
        a, b = at - self.start, end - self.start
        i = bisect.bisect_right(self.offsets, a) - 1
        out = []
        while a < b:
            piece, base = self.pieces[i], self.offsets[i]
            take = memoryview(piece)[a - base : min(b - base, len(piece))]
            out.append(take)
            a += len(take)
            i += 1
        return out[0].tobytes() if len(out) == 1 else b"".join(out)


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
        self._arrived = threading.Condition(self._lock)
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
            end = min(at + need, window.end)
            with self._arrived:  # the bytes asked for, as soon as they are in
                while not window.has(end) and not window.fetched.done():
                    self._arrived.wait()
                piece = window.slice(at, end) if window.has(end) else None
            if piece is None:  # failed or cut short: the caller's own read reports (and retries)
                self.forget(key)
                return None
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
        before = stream.windows[-1].fetched if stream.windows else None
        window = _Window(start, end, more)
        stream.windows.append(window)
        self._pool.submit(self._fetch_after, before, key, window)
        return True

    def _fetch_after(self, before: Future[None] | None, key: str, window: _Window) -> None:
        """Fetch a window once the key's previous one has arrived: one GET per reader at a
        time, so the window the reader waits for gets the whole bandwidth (windows fetched side
        by side share it, and the first one arrives no sooner than all of them), and the next
        GET is on its way while the reader works on this one. The executor runs tasks in the
        order given, so the previous fetch is running or done before this one waits for it."""
        if before is not None:  # done, failed or cancelled: its reader reports a failure
            wait([before])
        done = window.fetched
        try:
            if done.set_running_or_notify_cancel():  # not dropped before it started
                for piece in self._fetch(key, window.start, window.end):
                    with self._arrived:
                        if window.dropped:
                            break
                        window.offsets.append(window.received)
                        window.pieces.append(piece)
                        window.received += len(piece)
                        self._arrived.notify_all()
                done.set_result(None)
        except Exception as e:  # the reader falls back to its own read, which reports it
            done.set_exception(e)
        finally:
            with self._arrived:
                self._arrived.notify_all()

    def _drop(self, stream: _Stream, count: int) -> None:
        for window in stream.windows[:count]:
            self._held -= window.end - window.start
            window.dropped = True
            window.fetched.cancel()
        del stream.windows[:count]
