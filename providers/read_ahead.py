"""Read-ahead for sequential readers of an object store: one ranged GET per window, pipelined.

A *sequential* read (one that continues where the key's previous read ended, a large read, a read
at 0 of the segment that follows one read to its end, or a read to the object's known end) has
the provider fetch a whole window (``objectStoreReadAheadSize`` bytes, cut where the object or its
chunk object ends, so always one GET) and the :data:`DEPTH` windows after it; reads are then
answered from memory. Any other read goes straight to the backend for exactly the bytes asked.
Windows only hold bytes already written, and a written byte never changes (objects are
append-only; ``forget`` drops a key's windows when it is deleted or replaced). A window stays
until a read *starts* past it, so a reader that reads some bytes again is still answered from
memory. Every buffer counts against ``objectStoreReadAheadMemory`` (see :class:`ReadAhead`).

A read that lies in one window may be answered with a *view* of it (:meth:`ReadAhead.view`): the
window's buffer is then lent to the reader until its last view is gone, and only then received
into again.
"""

from __future__ import annotations

import logging
import mmap
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from typing import NamedTuple

import numpy as np

log = logging.getLogger(__name__)

Buffer = bytearray | mmap.mmap

DEPTH = 1
"""Windows requested ahead of the one being read."""
LARGE_READ_FRACTION = 32
"""A read of at least ``window / 32`` bytes (2 MiB of a 64 MiB window: a consumer's read-ahead
of thousands of messages, never a single-message fetch) is taken as sequential wherever it
starts."""
SLIVER_FRACTION = 8
"""A window that would leave less than ``window / 8`` bytes before the end of its object (or
chunk object) takes them too: no GET for a sliver."""
FREE_BUFFERS = DEPTH + 2
"""Buffers kept for the next windows: as many as a key holds at most (the two windows its last
read spans and the one ahead), so a catch-up that goes on to the next queue takes them over."""
IDLE_S = 2.0
"""A key not read for this long gives its windows up to a key that needs the memory."""
SMALLEST_FRACTION = 16
"""When memory is short a window shrinks down to ``window / 16``, then none is fetched."""
_CONTINUATIONS = 4096
"""How many "the next segment starts here" marks are kept (least recent dropped)."""
_TO_END_STEPS = 16
"""How many chunk objects a read may span and still be seen to end at its object's end."""
_MAPPED = 1 << 20
"""Buffers from this size on are anonymous mappings (see :meth:`ReadAhead._buffer`)."""
_STREAMS = 4096
"""How many keys without windows are remembered (where their last read ended)."""


def _mapped(size: int) -> mmap.mmap:
    """A large window's buffer: a private anonymous mapping. Its pages are zeroed by the kernel
    as the window is received into them, not all at once by a bytearray's memset first;
    private, since a shared anonymous mapping is shmem, whose every 4 KiB page faults through
    the shmem page cache. Not advised into transparent huge pages: where the kernel compacts
    memory for a huge page on a fault (``defrag`` of ``madvise``, the default), a long-running
    machine's fragmented memory makes each fault cost far more than the 4 KiB faults it saves
    (kept buffers are received into again, so a reader pays the faults of its first few windows
    only)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def large_read_bytes(window_bytes: int) -> int:
    """The size from which a read is taken as sequential (:data:`LARGE_READ_FRACTION`)."""
    return max(1, window_bytes // LARGE_READ_FRACTION)


class Extent(NamedTuple):
    """Where a window ends, whether the object holds bytes after it, and whether that is known
    (``exact``) or a guess the fetch will settle; ``size``: where the object is expected to end
    when a guess is all the provider has of its windows (a segment its records call unsealed,
    whose chunks it has yet to see)."""

    end: int
    more: bool
    exact: bool = True
    size: int | None = None


Bounds = Callable[[str, int, int], Extent]
"""``bounds(key, start, size)``: the window from ``start`` -- at most ``size`` bytes (an eighth
more to take a sliver), cut where the object or the chunk object holding ``start`` ends, so it is
one GET; ``Extent(start, False)`` at or past the end; ``Extent(start + size, True, False)`` when
the object is not known. Called under the lock: answers from what is known, never a request."""
Fetch = Callable[[str, int, int, memoryview], Iterator[int]]
"""``fetch(key, start, end, into)``: bytes ``[start, end)`` of ``key`` in one request, written
into ``into`` (``end - start`` bytes) in order as they arrive, yielding how many are in after
each piece. For a tentative window it stops where the object (or chunk object) ends, and has
let ``bounds`` know the real extent by its first yield."""
Successor = Callable[[str, int], str | None]
"""``successor(key, size)``: the key of the segment that continues ``key`` when ``key`` holds
``size`` bytes (the next segment of the same file), or ``None``."""


@dataclass(eq=False)
class _Window:
    start: int
    end: int
    more: bool
    exact: bool
    buffer: Buffer
    full: bool
    """a full-size window (its buffer is the read-ahead's capacity)"""
    received: int = 0
    pins: int = 1
    """copies being made out of the buffer and views of it held by readers, plus one for the
    fetch until it has stopped"""
    views: int = 0
    """views of the buffer held by readers"""
    lent: bool = False
    """dropped while viewed: its buffer counts as lent, not as held"""
    started: bool = False
    done: bool = False
    """the whole window arrived, or the fetch failed, stopped or was never made"""
    dropped: bool = False

    def has(self, end: int) -> bool:
        return self.start + self.received >= end


@dataclass(eq=False)
class _Stream:
    last_end: int
    read_at: float = 0.0
    windows: list[_Window] = field(default_factory=list)
    fetching: bool = False


class ReadAhead:
    """Sequential-read windows per key (see the module docstring for which reads are).

    A key's windows are fetched one after the other by one task (one GET in flight per reader:
    windows fetched side by side share the bandwidth, and the one the reader waits for arrives
    no sooner), each received straight into its buffer and handed on as it arrives, so a reader
    waits for the bytes it asks for, not the whole window. A window's extent is known before its
    bytes when the provider knows the object; otherwise ``bounds`` answers a *tentative* window,
    the fetch finds out, and the windows after it are requested then (:meth:`_settle`).

    Memory: every buffer counts against ``max_bytes`` from the moment it is taken, kept buffers
    included (:meth:`_buffer`); a key holds the windows its last read spans and the
    :data:`DEPTH` after them. A window that does not fit drops the windows of keys done with
    them, then kept buffers, then shrinks (down to :data:`SMALLEST_FRACTION`), then is not
    fetched: readers that share the memory are not made to drop each other's windows. A read
    copies its bytes out once (:meth:`read`), or takes a view of its window (:meth:`view`).

    Views: a window dropped while readers hold views of it is *lent*: its buffer no longer
    counts as held (new windows are not kept waiting for readers' views to go), and is taken
    back (kept for the next window, or let go) when the last view is gone. Buffers viewed at
    once are bounded by ``max_bytes`` too: past that a read is a copy, so the read-ahead's
    memory is at most twice ``max_bytes`` whatever readers hold."""

    def __init__(
        self,
        bounds: Bounds,
        fetch: Fetch,
        window_bytes: int,
        max_bytes: int,
        threads: int = 4,
        *,
        successor: Successor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bounds = bounds
        self._fetch = fetch
        self._successor = successor
        self._clock = clock
        self.window_bytes = max(1, window_bytes)
        self.large_read = large_read_bytes(self.window_bytes)
        self.capacity = self.window_bytes + self.window_bytes // SLIVER_FRACTION
        """The size of a full window's buffer (a window and the sliver it may take)."""
        self.max_bytes = max(self.capacity, max_bytes)
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._continues: OrderedDict[str, None] = OrderedDict()
        self._free: list[Buffer] = []
        self._held = 0  # bytes of every buffer held: windows (fetched or on their way) and kept
        self._lent = 0  # bytes of the buffers of dropped windows readers still view
        self._viewed = 0  # bytes of the buffers readers hold views of (lent or not)
        # reentrant: a view's finalizer (:meth:`_unview`) may run wherever its last reference
        # goes, this thread's own code under the lock included (the cyclic collector)
        self._lock = threading.RLock()
        self._arrived = threading.Condition(self._lock)
        self._pool: ThreadPoolExecutor | None = None
        self._threads = threads

    @property
    def held_bytes(self) -> int:
        """Bytes the buffers held now occupy (windows and kept buffers)."""
        with self._lock:
            return self._held

    @property
    def lent_bytes(self) -> int:
        """Bytes of the buffers of dropped windows that readers still hold views of."""
        with self._lock:
            return self._lent

    def read(self, key: str, position: int, length: int) -> bytes | None:
        """``[position, position + length)`` from the key's windows, or ``None``: not a
        sequential read (or the window failed), so the caller reads it from the backend. Shorter
        only where the object ends."""
        got = self._read(key, position, length, view=False)
        assert got is None or isinstance(got, bytes)
        return got

    def view(self, key: str, position: int, length: int) -> bytes | memoryview | None:
        """:meth:`read`, answered with a read-only view of the window when the bytes lie in one
        (its buffer is lent to the caller until every view of it is gone), else a copy."""
        return self._read(key, position, length, view=True)

    def _read(
        self, key: str, position: int, length: int, *, view: bool
    ) -> bytes | memoryview | None:
        parts: list[bytes | memoryview] = []
        at, stop = position, position + length
        large = length >= self.large_read  # a consumer's read-ahead: sequential from here
        with self._lock:
            stream = self._streams.get(key)
            if stream is None:
                follows = position == 0 and key in self._continues
                if follows:
                    del self._continues[key]
                sequential = large or follows or self._to_end(key, position, length)
                stream = self._new_stream(key, position if sequential else stop)
                if not sequential:
                    return None
            else:
                sequential = (
                    large or position == stream.last_end or self._to_end(key, position, length)
                )
            self._streams.move_to_end(key)
            stream.read_at = self._clock()
        while at < stop:
            with self._arrived:
                window = self._window_at(
                    key, stream, position, at, sequential=sequential or at > position
                )
                if window is None:
                    break
                while not window.has(min(stop, window.end)) and not window.done:
                    self._arrived.wait()  # the bytes asked for, as soon as they are in
                if at >= window.end:  # a tentative window turned out to end before ``at``
                    if window.more:
                        continue  # the next window holds it
                    break  # the object ends before ``at``
                end = min(stop, window.end)
                if not window.has(end):  # failed or dropped: the caller's read reports it
                    self._forget(key)
                    return None
                window.pins += 1
                lend = (
                    view
                    and at == position
                    and (end == stop or (not window.more and end == window.end))
                    and self._may_lend(window)
                )
                if lend:
                    window.views += 1
                    if window.views == 1:
                        self._viewed += len(window.buffer)
            if lend:  # the pin is the view's until it is gone
                parts.append(self._lease(window, at - window.start, end - window.start))
            else:
                try:  # copied out of the lock: the buffer is pinned, and these bytes are in
                    mv = memoryview(window.buffer)
                    parts.append(bytes(mv[at - window.start : end - window.start]))
                    mv.release()
                finally:
                    with self._lock:
                        window.pins -= 1
                        self._release(window)
            at = end
            with self._lock:
                stream.last_end = at
                self._ahead(key, stream, at)
                if not window.more and at >= window.end:
                    self._object_ended(key, window.end)
                    break  # the object ends here
        if at == position:
            with self._lock:
                stream.last_end = stop
            return None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def forget(self, key: str) -> None:
        """Drop ``key``'s windows (the object was deleted or replaced)."""
        with self._lock:
            self._forget(key)
            self._continues.pop(key, None)

    def close(self) -> None:
        """Drop every window and kept buffer and stop the fetch threads."""
        with self._lock:
            for stream in self._streams.values():
                self._drop(stream, len(stream.windows))
            self._streams.clear()
            self._continues.clear()
            pool, self._pool = self._pool, None
            self._arrived.notify_all()
        if pool is not None:  # fetches stop at their next piece (their windows are dropped)
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:  # the buffers they wrote into were kept: let them go too
            self._held -= sum(len(b) for b in self._free)
            self._free.clear()

    # --- views ---------------------------------------------------------------------------------

    def _may_lend(self, window: _Window) -> bool:
        """Whether a view of ``window`` may be handed out: it is viewed already, or the buffers
        viewed stay within ``max_bytes`` (under the lock)."""
        return window.views > 0 or self._viewed + len(window.buffer) <= self.max_bytes

    def _lease(self, window: _Window, start: int, end: int) -> memoryview:
        """A read-only view of ``window.buffer[start:end]`` whose last reference, once gone,
        gives the view's pin back (:meth:`_unview`); the pin and the view are counted already."""
        try:
            array = np.frombuffer(window.buffer, np.uint8, end - start, start)
            array.flags.writeable = False
            weakref.finalize(array, self._unview, window)
        except BaseException:
            self._unview(window)
            raise
        return array.data  # (a view that holds the array)

    def _unview(self, window: _Window) -> None:
        """A view of ``window`` is gone (from any thread)."""
        with self._lock:
            window.views -= 1
            window.pins -= 1
            if window.views == 0:
                self._viewed -= len(window.buffer)
            self._release(window)

    # --- under the lock -------------------------------------------------------------------------

    def _forget(self, key: str) -> None:
        stream = self._streams.pop(key, None)
        if stream is not None:
            self._drop(stream, len(stream.windows))

    def _new_stream(self, key: str, last_end: int) -> _Stream:
        """Track ``key`` (forgetting the least recently read keys that hold no window, so the
        keys of single reads do not pile up)."""
        for other in list(self._streams)[: max(0, len(self._streams) - _STREAMS)]:
            if not self._streams[other].windows:
                del self._streams[other]
        stream = self._streams[key] = _Stream(last_end)
        return stream

    def _to_end(self, key: str, position: int, length: int) -> bool:
        """Whether the read ends where the object is known (or expected: :attr:`Extent.size`) to
        end: its windows would be the same bytes (a GET each either way), and the reader that
        asked for all the rest is likely to read them again piece by piece (a consumequeue
        chunk smaller than a large read)."""
        stop, at = position + length, position
        for _ in range(_TO_END_STEPS):  # window by window: a chunk object's end is not the end
            extent = self._bounds(key, at, stop - at)
            if not extent.exact:
                return extent.size == stop
            if extent.end <= at:
                return False
            if not extent.more:
                return extent.end == stop
            at = extent.end
        return False

    def _object_ended(self, key: str, size: int) -> None:
        """A sequential reader read ``key`` to its end: a read at 0 of the next segment goes
        on from here."""
        if self._successor is None:
            return
        following = self._successor(key, size)
        if following is not None:
            self._continues[following] = None
            self._continues.move_to_end(following)
            while len(self._continues) > _CONTINUATIONS:
                self._continues.popitem(last=False)

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
        if not sequential or (stream.windows and not stream.windows[-1].exact):
            return None  # (a window whose extent is not known yet may turn out to hold it)
        self._drop(stream, len(stream.windows))
        if not self._start(key, stream, position):
            return None
        self._ahead(key, stream, position)
        return stream.windows[0]

    def _ahead(self, key: str, stream: _Stream, position: int) -> None:
        """Keep :data:`DEPTH` windows requested after the one holding ``position`` (as the
        memory allows; none after a window whose extent is not known yet)."""
        while stream.windows and stream.windows[-1].more and stream.windows[-1].exact:
            if sum(1 for w in stream.windows if w.end > position) > DEPTH:
                return
            if not self._start(key, stream, stream.windows[-1].end):
                return

    def _start(self, key: str, stream: _Stream, start: int) -> bool:
        """Request the window at ``start``; False past the object's end or when no memory."""
        size = self.window_bytes
        smallest = max(1, self.window_bytes // SMALLEST_FRACTION)
        while True:
            extent = self._bounds(key, start, size)
            if extent.end <= start:
                return False
            buffer = self._buffer(key, extent.end - start)
            if buffer is not None:
                break
            if size <= smallest:
                return False
            size = max(smallest, size // 2)
        window = _Window(
            start, extent.end, extent.more, extent.exact, buffer, len(buffer) == self.capacity
        )
        stream.windows.append(window)
        if not stream.fetching:
            stream.fetching = True
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self._threads, thread_name_prefix="tiered-readahead"
                )
            self._pool.submit(self._fetch_all, key, stream)
        return True

    def _size_class(self, size: int) -> int:
        """The size of the buffer a window of ``size`` bytes takes: a full-size window's
        :attr:`capacity`; a large one's next power of two, so that the next window of about its
        size is received into it again (a catch-up's windows cut at chunk ends are much alike);
        a small one's own size."""
        if size > self.window_bytes // 2:
            return self.capacity
        if size < _MAPPED:
            return size
        return min(1 << (size - 1).bit_length(), self.capacity)

    def _kept(self, size: int) -> bool:
        """Whether a buffer of ``size`` bytes is kept for the next window once let go (at most
        :data:`FREE_BUFFERS`, the most recently let go), so a catch-up writes into the same memory
        again instead of having fresh pages faulted in and zeroed for every window."""
        return size == self.capacity or size >= _MAPPED

    def _take_free(self, size: int) -> Buffer | None:
        for i in range(len(self._free) - 1, -1, -1):  # the most recently kept first
            if len(self._free[i]) == size:
                return self._free.pop(i)
        return None

    def _buffer(self, key: str, size: int) -> Buffer | None:
        """A buffer for a window of ``size`` bytes, counted as held; ``None`` when the memory
        cannot hold it. A large window takes a kept buffer of its size class
        (:meth:`_size_class`), or one of a key that gives its windows up (:meth:`_give_up`),
        before new memory."""
        need = self._size_class(size)
        if self._kept(need):
            kept = self._take_free(need)
            if kept is None:
                self._give_up(key, lambda: any(len(b) == need for b in self._free))
                kept = self._take_free(need)
            if kept is not None:
                return kept
        if self._held + need > self.max_bytes:
            self._give_up(key, lambda: self._held + need <= self.max_bytes)
        while self._free and self._held + need > self.max_bytes:
            self._held -= len(self._free.pop())
        if self._held + need > self.max_bytes:
            return None
        self._held += need
        return _mapped(need) if need >= _MAPPED else bytearray(need)

    def _give_up(self, key: str, enough: Callable[[], bool]) -> None:
        """Drop the windows of keys (not ``key``) whose reader is done with them
        (:meth:`_finished`) or has not read for :data:`IDLE_S`, least recently read first,
        until ``enough()``."""
        idle = self._clock() - IDLE_S
        for other in list(self._streams):
            victim = self._streams[other]
            if other == key or not victim.windows or victim.fetching:
                continue
            if victim.read_at <= idle or self._finished(victim):
                self._drop(victim, len(victim.windows))
                if enough():
                    return

    def _finished(self, stream: _Stream) -> bool:
        """Whether the stream's reader has read all its large windows hold: a catch-up that
        went on to the next queue. Large: a full-size window, or one cut where its object ends
        that is at least a large read (a 32 MiB object read whole by a catch-up is done with as
        surely as a 64 MiB window). A small window -- a consumequeue chunk -- is often read whole
        by one read that asks for more, then read again piece by piece: not done."""
        return all(
            (w.full or w.end - w.start >= self.large_read) and w.end <= stream.last_end
            for w in stream.windows
        )

    def _drop(self, stream: _Stream, count: int) -> None:
        for window in stream.windows[:count]:
            window.dropped = True
            if window.views and not window.lent:  # readers hold it: lent, no longer held
                window.lent = True
                self._held -= len(window.buffer)
                self._lent += len(window.buffer)
            if not window.started:  # never to be fetched: nothing writes into it
                window.done = True
                window.pins -= 1
            self._release(window)
        del stream.windows[:count]

    def _release(self, window: _Window) -> None:
        """Keep (or let go of) a dropped window's buffer once nothing uses it: no copy is being
        made out of it and its fetch has stopped writing into it."""
        if window.dropped and window.pins == 0:
            window.pins = -1  # released once
            size = len(window.buffer)
            if window.lent:  # back from its readers: held again, unless that is too much
                self._lent -= size
                if self._held + size > self.max_bytes:
                    return
                self._held += size
            if self._kept(size):
                self._free.append(window.buffer)
                if len(self._free) > FREE_BUFFERS:  # the least recently kept goes
                    self._held -= len(self._free.pop(0))
            else:
                self._held -= len(window.buffer)

    # --- the fetch task -------------------------------------------------------------------------

    def _fetch_all(self, key: str, stream: _Stream) -> None:
        """Fetch the stream's windows one after the other until none is waiting."""
        while True:
            with self._lock:
                window = next((w for w in stream.windows if not w.started and not w.dropped), None)
                if window is None or self._pool is None:
                    stream.fetching = False
                    return
                window.started = True
            self._fetch_window(key, stream, window)

    def _fetch_window(self, key: str, stream: _Stream, window: _Window) -> None:
        into = memoryview(window.buffer)[: window.end - window.start]
        failed = False
        try:
            for received in self._fetch(key, window.start, window.end, into):
                with self._arrived:
                    window.received = received
                    if not window.exact:
                        self._settle(key, stream, window)
                    self._arrived.notify_all()
                    if window.dropped:
                        break
        except Exception as e:  # the reader falls back to its own read, which reports it
            failed = True
            log.debug("read-ahead of %r at %d failed: %s", key, window.start, e)
        finally:
            into.release()
            with self._arrived:
                if not window.exact and not window.dropped and not failed:
                    self._settle(key, stream, window, finished=True)
                window.done = True
                window.pins -= 1
                self._release(window)
                self._arrived.notify_all()

    def _settle(
        self, key: str, stream: _Stream, window: _Window, *, finished: bool = False
    ) -> None:
        """A tentative window's fetch has told the provider the object's extent: take it, and
        request the windows after it."""
        extent = self._bounds(key, window.start, window.end - window.start)
        if extent.exact:  # (the window cannot grow: its buffer holds what was asked)
            more = extent.more or extent.end > window.end
            window.end, window.more, window.exact = min(window.end, extent.end), more, True
        elif finished:  # still unknown: the window holds what arrived, and nothing after it
            window.end, window.more, window.exact = window.start + window.received, False, True
        else:
            return
        if window in stream.windows and not window.dropped:
            self._ahead(key, stream, stream.last_end)
