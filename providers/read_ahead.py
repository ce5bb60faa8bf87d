"""Read-ahead for sequential readers of an object store: one ranged GET per window, prefetched.

A reader that continues exactly where its previous read of the same key ended (a consumer
catching up: consumequeue, then commitlog, read after read) is *sequential*. For such a key the
provider fetches a whole **window** (``objectStoreReadAheadSize`` bytes, cut where the object or
the chunk object holding it ends, so a window is always one GET) and, while the reader works on
it, the next window in a background thread. Reads are then answered from memory; a catch-up
costs one GET per window instead of one per read, and the GET of window k+1 overlaps the
reader's work on window k.

Any other read (the first read of a key, a random single-message fetch) goes straight to the
backend for exactly the bytes asked: no window is fetched for it, so cold single reads cost what
they did. Windows only ever hold bytes already written, and a written byte never changes (objects
are append-only; ``forget`` drops a key's windows when it is deleted or replaced).

Memory: every window counts against ``objectStoreReadAheadMaxBytes`` from the moment it is
requested; a key holds at most two windows (the one being read, the next). When the budget is
full the least recently read key's windows are dropped; when it still is, no prefetch is made.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

Fetch = Callable[[str, int, int], tuple[bytes, bool]]
"""``fetch(key, start, size)``: up to ``size`` bytes of ``key`` from ``start`` in one request,
shorter where the object (or the chunk object holding ``start``) ends, and whether the object
holds bytes after them (``(b"", False)`` past its end)."""


@dataclass
class _Window:
    start: int
    asked: int
    fetched: Future[tuple[bytes, bool]]


@dataclass
class _Stream:
    last_end: int
    windows: list[_Window] = field(default_factory=list)


class ReadAhead:
    """Sequential-read windows per key; see the module docstring."""

    def __init__(self, fetch: Fetch, window_bytes: int, max_bytes: int, threads: int = 2) -> None:
        self._fetch = fetch
        self.window_bytes = max(1, window_bytes)
        self.max_bytes = max(self.window_bytes, max_bytes)
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._held = 0  # bytes asked by every window held
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._threads = threads

    @property
    def held_bytes(self) -> int:
        """Bytes the windows held now may occupy (asked sizes; fetched ones may be shorter)."""
        with self._lock:
            return self._held

    def read(self, key: str, position: int, length: int) -> bytes | None:
        """``[position, position + length)`` from the key's windows, or ``None``: not a
        sequential read, so the caller reads it from the backend itself."""
        parts: list[bytes] = []
        at, need = position, length
        while need > 0:
            with self._lock:
                window = self._window_at(key, at, first=at == position)
            if window is None:
                break
            try:
                data, more = window.fetched.result()
            except Exception:  # the caller's own read reports (and retries) the failure
                self.forget(key)
                return None
            end = window.start + len(data)
            piece = data[at - window.start : at - window.start + need] if at < end else b""
            parts.append(piece)
            at += len(piece)
            need -= len(piece)
            with self._lock:
                stream = self._streams.get(key)
                if stream is None:
                    break
                if more and not any(w.start == end for w in stream.windows):
                    self._start(key, stream, end)  # prefetch; skipped when the budget is full
                if at >= end and window in stream.windows:
                    stream.windows.remove(window)  # read to its end: the next one takes over
                    self._held -= window.asked
                stream.last_end = at
            if not more and at >= end:
                break  # the object ends here
        if at == position:
            with self._lock:
                self._open(key, position + length)
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

    def _window_at(self, key: str, position: int, *, first: bool) -> _Window | None:
        """The window to read ``position`` from: a held one that starts at or before it, else a
        new one when the read is sequential (continues the last one); ``None`` otherwise."""
        stream = self._streams.get(key)
        if stream is None:
            return None
        self._streams.move_to_end(key)
        held = [w for w in stream.windows if w.start <= position < w.start + w.asked]
        if held:
            window = held[-1]
            self._drop(stream, stream.windows.index(window))  # the ones before it are passed
            return window
        if position != stream.last_end and first:
            return None
        self._drop(stream, len(stream.windows))
        return stream.windows[-1] if self._start(key, stream, position) else None

    def _open(self, key: str, end: int) -> None:
        stream = self._streams.get(key)
        if stream is None:
            self._streams[key] = _Stream(end)
        else:
            self._drop(stream, len(stream.windows))
            stream.last_end = end
        self._streams.move_to_end(key)

    def _start(self, key: str, stream: _Stream, start: int) -> bool:
        """Request the window at ``start`` (evicting other keys' windows if the budget needs it);
        False when the budget cannot hold it."""
        size = self.window_bytes
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
        future = self._pool.submit(self._fetch, key, start, size)
        stream.windows.append(_Window(start, size, future))
        return True

    def _drop(self, stream: _Stream, count: int) -> None:
        for window in stream.windows[:count]:
            self._held -= window.asked
            window.fetched.cancel()
        del stream.windows[:count]
