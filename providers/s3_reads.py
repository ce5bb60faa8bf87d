"""Reads of the s3 provider: ranged GETs, and read-ahead windows received straight into memory.

A key this instance did not write is listed once and the listing kept (a written byte never
changes, so it stays right for every byte it shows; a read beyond it lists again), so reads of an
unsealed segment cost one GET per chunk piece, not a failed GET and a LIST each. A sealed
segment's object is read without a listing at all: its GET says it is there, and its
``Content-Range`` says how big it is, which is recorded like a listing. A segment the records
call unsealed (:meth:`S3Reads.expect_unsealed`) is read without one too: its chunks by name, the
first at 0, each one's ``Content-Range`` telling where the next begins.

A reader that continues where it stopped gets read-ahead windows (:mod:`.read_ahead`): one GET
of up to ``read_ahead_bytes`` per window, cut where the chunk object or the object ends, received
by ``readinto`` straight into the window's buffer (the socket writes into it: no piece of the
body is allocated on its own), the next window's GET following as soon as one is in.

Every GET carries the SSE-C key when one is set (:meth:`.S3Encryption.on_read`).
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar

from tiered.errors import ProviderError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentNotFoundError

from .base import check_range
from .chunks import Chunk
from .chunks import SegmentState
from .chunks import chunk_name
from .chunks import parse_name
from .chunks import pieces_for_read
from .layout import RESERVED_CHAR
from .layout import SegmentAddress
from .read_ahead import SLIVER_FRACTION
from .read_ahead import Extent
from .read_ahead import ReadAhead

if TYPE_CHECKING:
    import threading

    from cachetools import LRUCache
    from mypy_boto3_s3 import S3Client

    from .s3_encryption import S3Encryption

T = TypeVar("T")

WINDOW_PIECE = 1 << 20
"""A read-ahead window's GET is handed to its reader in pieces of this size as they arrive."""


class S3Reads:
    """The read side of :class:`~tiered.providers.s3.S3Provider` (a mixin: it uses the
    provider's client, request wrapper and key states)."""

    if TYPE_CHECKING:
        bucket: str
        read_ahead_bytes: int
        read_ahead_max_bytes: int
        _root: str
        _ahead: ReadAhead | None
        _encryption: S3Encryption
        _known: LRUCache[str, SegmentState]
        _listed: LRUCache[str, SegmentState]
        _unsealed: LRUCache[str, int]
        _known_lock: threading.Lock

        @property
        def client(self) -> S3Client: ...

        def _call(self, operation: str, name: str, fn: Callable[[], T]) -> T: ...

        def _full(self, key: str) -> str: ...

        def _remembered(self, key: str) -> SegmentState | None: ...

        def _listed_state(self, key: str, *, fresh: bool = False) -> SegmentState: ...

    def _new_read_ahead(self) -> ReadAhead | None:
        if self.read_ahead_bytes <= 0 or self.read_ahead_max_bytes <= 0:
            return None
        return ReadAhead(
            self._window_bounds,
            self._window,
            self.read_ahead_bytes,
            self.read_ahead_max_bytes,
            successor=next_segment,
        )

    def _get(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (``end > start``) of the object ``name`` (relative); a GET of
        a sealed object (not a chunk) records its size, so its reads need no listing."""
        full = self._root + name

        def get() -> bytes:
            response = self.client.get_object(
                Bucket=self.bucket,
                Key=full,
                Range=f"bytes={start}-{end - 1}",
                **self._encryption.on_read(),
            )
            self._learn_size(name, response)
            return response["Body"].read()

        return self._call("GET", full, get)

    def _learn_size(self, name: str, response: Any) -> None:
        """Record what a GET of ``name`` showed: when it is a segment's own object (not a chunk),
        the segment is sealed, and its size is the total of the response's Content-Range; a
        chunk's total is its size (:meth:`_chunk_learned`)."""
        total = range_total(response.get("ContentRange"))
        if total is None:
            return
        if RESERVED_CHAR in name:
            parsed = parse_name(name)
            if parsed is not None and parsed[1] is not None:
                self._chunk_learned(name, parsed[0], parsed[1], total)
            return
        with self._known_lock:
            if name not in self._known:
                self._listed[name] = SegmentState(name, sealed_size=total)

    def read(self, key: str, position: int, length: int) -> bytes:
        check_range(position, length, key=key)
        full = self._full(key)
        if self._ahead is not None and length > 0:
            got = self._ahead.read(key, position, length)
            if got is not None:
                return got
        return self._read(key, full, position, length)

    def read_view(self, key: str, position: int, length: int) -> bytes | memoryview:
        """:meth:`read`; a read answered from a read-ahead window is a view of it (no copy)."""
        check_range(position, length, key=key)
        full = self._full(key)
        if self._ahead is not None and length > 0:
            got = self._ahead.view(key, position, length)
            if got is not None:
                return got
        return self._read(key, full, position, length)

    def expect_unsealed(self, key: str, size: int) -> None:
        """Remember that the records call ``key`` unsealed with ``size`` bytes (see
        :meth:`~tiered.providers.base.Provider.expect_unsealed`): when nothing else is known of
        its bytes, they are read from its chunks one after the other -- the first at position
        0, each GET's ``Content-Range`` telling where the next begins -- without a listing, and
        without a GET of a sealed object that is not there."""
        with self._known_lock:
            self._unsealed[key] = size

    def _hinted(self, key: str) -> int | None:
        """The size the records gave ``key`` as an unsealed segment, if a reader said so."""
        with self._known_lock:
            return self._unsealed.get(key)

    def _chunk_learned(self, name: str, key: str, position: int, total: int) -> None:
        """A GET showed the chunk ``name`` of ``key`` at ``position`` holding ``total`` bytes:
        when it continues the run known of ``key`` (from 0, as a listing would show it), the run
        takes it."""
        with self._known_lock:
            if total <= 0 or key in self._known:
                return
            state = self._listed.get(key)
            if state is not None and state.sealed:
                return
            run = state.run if state is not None else ()
            if position == (run[-1].end if run else 0):
                self._listed[key] = SegmentState(key, run=(*run, Chunk(name, position, total)))

    def _chunk_after(self, key: str, known: SegmentState | None) -> int | None:
        """Where the chunk after what is known of ``key`` (``known``: as listed or learned)
        begins, when ``key`` is a segment the records call unsealed, nothing shows it sealed
        and this instance did not write it; else None."""
        if (known is not None and known.sealed) or self._hinted(key) is None:
            return None
        if self._remembered(key) is not None:  # own writes: their record decides
            return None
        return known.size if known is not None and known.exists else 0

    def _window_bounds(self, key: str, start: int, size: int) -> Extent:
        """Where a read-ahead window from ``start`` ends (at most ``size`` bytes, within the
        chunk object holding ``start``; the rest of the object or chunk too when less than an
        eighth of ``size`` would be left), and whether the segment holds more after it. From
        what is known (own writes, listings, GETs of the sealed object), without a request: an
        unknown key, or a position past a listing that may have grown, gets a tentative
        window the fetch settles (cut at the size the records give a segment they call
        unsealed, and saying that size: a read to it reads on through its chunks)."""
        state = self._remembered(key)
        if state is None or start >= state.size:
            with self._known_lock:
                listed = self._listed.get(key)
            if listed is not None and (state is None or listed.size > state.size):
                state = listed
        if state is None or not state.exists:
            return self._tentative(key, start, size)
        if start >= state.size:
            if state.sealed:
                return Extent(start, False)
            return self._tentative(key, start, size)  # an unsealed segment may have grown
        limit = state.size
        if not state.sealed:
            limit = next(c.end for c in state.run if c.position <= start < c.end)
        end = min(start + size, limit)
        if limit - end < size // SLIVER_FRACTION:
            end = limit
        recorded = 0 if state.sealed else self._hinted(key) or 0  # (chunks may follow the run)
        return Extent(end, end < max(state.size, recorded))

    def _tentative(self, key: str, start: int, size: int) -> Extent:
        """A window from ``start`` of a key whose chunks past it are not known (see
        :meth:`_window_bounds`)."""
        hinted = None if self._remembered(key) is not None else self._hinted(key)
        if hinted is not None and start < hinted:
            return Extent(min(start + size, hinted), True, exact=False, size=hinted)
        return Extent(start + size, True, exact=False)

    def _window(self, key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        """Bytes ``[start, end)`` of a read-ahead window in one GET, received straight into
        ``into`` in pieces of :data:`WINDOW_PIECE` bytes (the reader of the first megabytes of a
        window has them after one piece, not after the whole window); yields how many are in.

        A key nothing is known of is taken for a sealed object: its GET (cut by the server where
        the object ends) tells its size. When it is not one (or a listing showed it unsealed
        and the window starts past it), the key is listed and the window is the part of the
        chunk object holding ``start``. A key a reader said is unsealed (:meth:`expect_unsealed`)
        is read from the chunk after those known of it, by its name, and listed only when that
        chunk is not there."""
        known = self._remembered(key)
        if known is None or end > known.size:
            with self._known_lock:
                known = self._listed.get(key) or known
        if known is not None and known.exists and end <= known.size:
            if known.sealed:
                yield from self._stream_get(key, key, start, end, into, exact=True)
                return
            pieces = pieces_for_read(known.run, start, end - start)
            if len(pieces) == 1:
                p = pieces[0]
                yield from self._stream_get(key, p.name, p.start, p.end, into, exact=True)
                return
            data = self._read(key, self._full(key), start, end - start)  # not one object
            into[: len(data)] = data
            yield len(data)
            return
        at = self._chunk_after(key, known)
        if at is not None and start >= at:  # the next chunk, by its name
            arrived = False
            try:
                for n in self._stream_get(
                    key, chunk_name(key, at), start - at, end - at, into, exact=False
                ):
                    arrived = True
                    yield n
                return
            except (SegmentNotFoundError, ReadPastEndError):
                if arrived:
                    raise
        elif known is None or not known.exists:
            try:
                yield from self._stream_get(key, key, start, end, into, exact=False)
                return
            except SegmentNotFoundError:
                pass  # no sealed object: its chunks, as a listing shows them
        state = self._listed_state(key, fresh=True)
        if not state.exists or start >= state.size:
            raise ReadPastEndError(f"{key!r} holds no byte at {start}", key=key)
        if state.sealed:
            end = min(end, state.size)
            yield from self._stream_get(key, key, start, end, into, exact=True)
            return
        p = pieces_for_read(state.run, start, end - start)[0]
        yield from self._stream_get(key, p.name, p.start, p.end, into, exact=True)

    def _stream_get(
        self, key: str, name: str, start: int, end: int, into: memoryview, *, exact: bool
    ) -> Iterator[int]:
        """One GET of bytes ``[start, end)`` of the object ``name`` (relative) into ``into``,
        yielding how many are in after each piece; with ``exact`` false the object may end
        sooner (the window is then shorter)."""
        full = self._root + name
        response = self._call(
            "GET",
            full,
            lambda: self.client.get_object(
                Bucket=self.bucket,
                Key=full,
                Range=f"bytes={start}-{end - 1}",
                **self._encryption.on_read(),
            ),
        )
        self._learn_size(name, response)
        body = response["Body"]
        expected = int(response.get("ContentLength", end - start))
        if expected > len(into) or (exact and expected != end - start):
            body.close()
            raise ReadPastEndError(
                f"s3 GET of {full!r} bytes {start}-{end - 1} answered {expected} bytes", key=key
            )
        receive = receiver(body, response)
        got = 0
        try:
            while got < expected:
                n = receive(into[got : min(expected, got + WINDOW_PIECE)])
                if n <= 0:
                    break
                got += n
                yield got
        except Exception as e:  # the reader falls back to its own read (with retries)
            body.close()
            raise ProviderError(
                f"s3 GET of {full!r} in bucket {self.bucket!r} failed after {got} of "
                f"{expected} bytes: {e}",
                key=key,
            ) from e
        except BaseException:  # GeneratorExit: the window was dropped mid-way
            body.close()
            raise
        if got != expected:
            body.close()
            raise ReadPastEndError(
                f"{key!r} ended at {start + got} inside {start + expected}", key=key
            )
        release(body)

    def _read_chunks(self, key: str, position: int, length: int) -> bytes | None:
        """Bytes ``[position, position + length)`` of a key the records call unsealed, from the
        chunks known of it and then each next chunk by its name (see :meth:`expect_unsealed`);
        None when it is not such a key or a chunk is not where it should be (a listing then
        tells)."""
        stop, at, parts = position + length, position, []
        while at < stop:
            with self._known_lock:
                known = self._listed.get(key)
            begin = self._chunk_after(key, known)
            if begin is None:
                return None
            if at < begin:  # known chunks
                assert known is not None
                pieces = pieces_for_read(known.run, at, min(stop, begin) - at)
                try:
                    parts += [self._get(p.name, p.start, p.end) for p in pieces]
                except SegmentNotFoundError:
                    return None
                at = min(stop, begin)
                continue
            try:
                data = self._get(chunk_name(key, begin), at - begin, stop - begin)
            except (SegmentNotFoundError, ReadPastEndError):
                return None
            if not data:
                return None
            parts.append(data)
            at += len(data)
        return b"".join(parts)

    def _read(self, key: str, full: str, position: int, length: int) -> bytes:
        known = self._remembered(key)
        if known is None and length > 0:
            with self._known_lock:
                known = self._listed.get(key)
        if length > 0 and (known is None or position + length > known.size):
            data = self._read_chunks(key, position, length)
            if data is not None:
                return data
        if length > 0 and known is not None and position + length <= known.size:
            try:  # an own write: its sealed object, or straight to its chunks
                if known.sealed:
                    return self._get(key, position, position + length)
                pieces = pieces_for_read(known.run, position, length)
                return b"".join(self._get(p.name, p.start, p.end) for p in pieces)
            except SegmentNotFoundError:
                pass  # sealed or deleted meanwhile: as below
        elif length > 0:
            try:  # the common case, a sealed segment: one ranged GET
                return self._get(key, position, position + length)
            except SegmentNotFoundError:
                pass
        for attempt in (1, 2):
            state = self._listed_state(key, fresh=True)
            if not state.exists:
                raise SegmentNotFoundError(f"no object {key!r} in bucket {self.bucket!r}", key=key)
            if position >= state.size:
                raise ReadPastEndError(
                    f"read of {full!r} at {position} is past its end ({state.size} bytes)", key=key
                )
            if length == 0:
                return b""
            try:
                if state.sealed:
                    return self._get(key, position, position + length)
                pieces = pieces_for_read(state.run, position, length)
                return b"".join(self._get(p.name, p.start, p.end) for p in pieces)
            except SegmentNotFoundError:
                if attempt == 2:
                    raise
                # a seal finished meanwhile and removed the chunks: list again
        raise AssertionError("unreachable")  # pragma: no cover


def next_segment(key: str, size: int) -> str | None:
    """The key of the segment that continues ``key`` (of ``size`` bytes) in its file, when
    ``key`` is in the segment layout."""
    address = SegmentAddress.parse(key)
    if address is None:
        return None
    return address._replace(base_offset=address.base_offset + size).key


def range_total(content_range: object) -> int | None:
    """The object's size in a ``Content-Range: bytes a-b/total`` header, if it shows one."""
    if not isinstance(content_range, str):
        return None
    _, _, total = content_range.rpartition("/")
    return int(total) if total.isdigit() else None


def receiver(body: Any, response: Any) -> Callable[[memoryview], int]:
    """How to receive a GET's body into a buffer: straight from the connection's HTTP
    response (``readinto``: the socket writes into the buffer, no intermediate bytes) when
    urllib3 has read none of it and decodes nothing, else through botocore (one copy)."""
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    if (
        isinstance(fp, http.client.HTTPResponse)
        and getattr(raw, "_fp_bytes_read", None) == 0
        and not response.get("ContentEncoding")
    ):
        return fp.readinto

    def copy(into: memoryview) -> int:
        data = body.read(len(into))
        into[: len(data)] = data
        return len(data)

    return copy


def release(body: Any) -> None:
    """A body read to its end: its connection goes back to the pool (urllib3 does this itself
    when it reads; a body received by ``readinto`` hands it back here)."""
    raw = getattr(body, "_raw_stream", None)
    release = getattr(raw, "release_conn", None)
    if callable(release):
        release()
    body.close()
