"""Cold reads from the tier: consumequeue then commitlog, one ranged read each (spec §9.2–9.5).

Every unit read from the tier is checked before it is returned: its TOTALSIZE, magic and queue
offset against the consumequeue unit that pointed at it, and its body against BODYCRC. A mismatch
is an :class:`~tiered.errors.IntegrityError` naming the segment and offset, counted in a metric —
never data.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.core.read_cache import CachedUnit, ReadAheadCache
from tiered.core.tag_filter import TagFilter
from tiered.errors import IntegrityError, ReadPastEndError
from tiered.file.flat_append_file import FlatAppendFile
from tiered.file.flat_commitlog import as_uint8, check_units
from tiered.file.flat_message_file import FlatMessageFile

Int64s = npt.NDArray[np.int64]
CODA_SIZE = 16  # legacy tiered writers put [16, BLANK magic, timestamp] between units
_BODY_LEN_V4 = msgcodec.BORN_HOST_POSITION + 8 + 8 + 8 + 12  # IPv4 hosts: body length at 84


class GetStatus(StrEnum):
    """``GetMessageStatus`` values a read can end with (spec §9.2)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


@dataclass(frozen=True, slots=True)
class Unit:
    """One message unit as read (tier: physical offset = flat offset; local: broker offset)."""

    queue_offset: int
    data: bytes
    tags_code: int

    def message(self) -> msgcodec.Message:
        """The decoded message."""
        return msgcodec.decode(self.data)


@dataclass(slots=True)
class GetResult:
    """What a read returns: a status, the units, and where the next read should begin."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    units: list[Unit] = field(default_factory=list)
    tier: str = "tiered"


def crc_mismatches(data: bytes | bytearray | memoryview, starts: Int64s) -> list[int]:
    """Indexes of units whose body does not match BODYCRC (hosts located from each sysflag)."""
    if not len(starts):
        return []
    buf = as_uint8(data)
    idx4 = np.arange(4, dtype=np.int64)

    def i32(pos: Int64s) -> Int64s:
        raw = np.ascontiguousarray(buf[pos[:, None] + idx4])
        return raw.view(">i4").reshape(-1).astype(np.int64)

    flags = i32(starts + msgcodec.SYSFLAG_POSITION)
    extra = np.where(flags & msgcodec.BORNHOST_V6_FLAG, 12, 0)
    extra += np.where(flags & msgcodec.STOREHOST_V6_FLAG, 12, 0)
    len_at = starts + _BODY_LEN_V4 + extra
    body_lens = i32(len_at)
    stored = i32(starts + 8)
    view = memoryview(data)
    bad = []
    for i, (a, n, crc) in enumerate(
        zip((len_at + 4).tolist(), body_lens.tolist(), stored.tolist(), strict=True)
    ):
        if zlib.crc32(view[a : a + n]) & 0x7FFFFFFF != crc:
            bad.append(i)
    return bad


def segment_key_at(file: FlatAppendFile, offset: int) -> str:
    """The backend key of the segment of ``file`` that holds ``offset``."""
    bases = [seg.base for seg in file.segments if seg.base <= offset]
    return file.key(bases[-1] if bases else file.min_offset)


class TieredReader:
    """Reads runs of messages of one queue from its flat file, verified."""

    def __init__(self, size_limit: int, on_integrity_error: Callable[[IntegrityError], None]):
        self.size_limit = size_limit
        self.on_integrity_error = on_integrity_error

    def read(self, flat: FlatMessageFile, offset: int, count: int) -> list[Unit]:
        """Up to ``count`` units from ``offset``: one consumequeue read, one commitlog read.

        The commitlog read is trimmed to ``readAheadMessageSizeThreshold`` bytes (at least one
        message is always read).

        Raises:
            IntegrityError: a unit disagrees with its consumequeue entry or its body CRC.
            ReadPastEndError: ``offset`` is outside the uploaded range.
        """
        units = flat.consume_queue.read_units(offset, count)
        if len(units) == 0:
            return []
        offs = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        first = int(offs[0])
        ends = offs + sizes - first
        keep = max(1, int(np.searchsorted(ends, self.size_limit, side="right")))
        # a unit whose offset goes backwards ends the run (never seen; would be a corrupt CQ)
        backwards = np.flatnonzero(offs[1:keep] < offs[: keep - 1])
        if backwards.size:
            keep = int(backwards[0]) + 1
        offs, sizes, tags = offs[:keep], sizes[:keep], units["tags_code"][:keep].astype(np.int64)
        length = int(offs[-1] + sizes[-1]) - first
        data = flat.commitlog.read(first, length)
        rel = offs - first
        rel = self._skip_codas(data, rel)
        qoffs = offset + np.arange(len(rel), dtype=np.int64)
        good = check_units(data, rel, sizes, qoffs, offs)
        bad_crc = crc_mismatches(data, rel[:good])
        if good < len(rel) or bad_crc:
            i = min([good, *bad_crc])
            what = "body CRC mismatch" if i in bad_crc else "header disagrees with its CQ unit"
            key = segment_key_at(flat.commitlog, int(offs[i]))
            err = IntegrityError(
                f"{flat.path} queue offset {offset + i}: {what} at flat commitlog offset "
                f"{int(offs[i])} (object {key}); the tier copy is damaged",
                key=key,
                offset=int(offs[i]),
            )
            self.on_integrity_error(err)
            raise err
        mv = memoryview(data)
        return [
            Unit(int(q), bytes(mv[a : a + n]), int(t))
            for q, a, n, t in zip(
                qoffs.tolist(), rel.tolist(), sizes.tolist(), tags.tolist(), strict=True
            )
        ]

    @staticmethod
    def _skip_codas(data: bytes, rel: Int64s) -> Int64s:
        if not len(rel):
            return rel
        buf = as_uint8(data)
        inside = rel + 8 <= len(data)
        pos = rel[inside]
        magic = np.ascontiguousarray(buf[(pos + 4)[:, None] + np.arange(4)]).view(">i4")
        coda = np.zeros(len(rel), dtype=bool)
        coda[inside] = magic.reshape(-1) == msgcodec.BLANK_MAGIC
        return np.where(coda, rel + CODA_SIZE, rel)


class Fetcher:
    """``getMessage`` on the tier side: range checks, the read-ahead cache, tag filtering."""

    def __init__(
        self,
        reader: TieredReader,
        cache: ReadAheadCache | None,
        read_ahead_count: int,
        max_transfer_bytes: int,
    ):
        self.reader = reader
        self.cache = cache
        self.read_ahead_count = read_ahead_count
        self.max_transfer_bytes = max_transfer_bytes

    def get(
        self, flat: FlatMessageFile | None, offset: int, max_count: int, tags: TagFilter
    ) -> GetResult:
        """Up to ``max_count`` matching messages from ``offset`` (statuses of spec §9.2)."""
        if flat is None or not flat.initialized:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset, -1, -1)
        lo, hi = flat.min_offset(), flat.commit_offset
        if hi <= 0 or lo < 0 or hi <= lo:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, offset, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, hi, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        try:
            if self.cache is not None and not self.cache.busy:
                units, nxt = self._through_cache(flat, offset, max_count, hi, tags)
            else:
                units, nxt = self._direct(flat, offset, max_count, hi, tags)
        except ReadPastEndError:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, lo, hi)
        if nxt == offset:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, lo, hi)
        status = GetStatus.FOUND if units else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, nxt, lo, hi, units)

    def _direct(
        self, flat: FlatMessageFile, offset: int, max_count: int, hi: int, tags: TagFilter
    ) -> tuple[list[Unit], int]:
        units = self.reader.read(flat, offset, min(max_count, hi - offset))
        return [u for u in units if _matches(u, tags)], offset + len(units)

    def _through_cache(
        self, flat: FlatMessageFile, offset: int, max_count: int, hi: int, tags: TagFilter
    ) -> tuple[list[Unit], int]:
        """Serve a run of cached units from ``offset``, loading a read-ahead window on a miss."""
        assert self.cache is not None
        cache = self.cache
        kept: list[Unit] = []
        size = 0
        q = offset
        limit = min(hi, offset + self.read_ahead_count)
        while q < limit and len(kept) < max_count and size < self.max_transfer_bytes:
            hit = cache.get(flat.topic, flat.queue_id, q)
            if hit is None:
                span = min(32 if max_count == 1 else self.read_ahead_count, hi - q)
                cache.load_once(
                    flat.topic, flat.queue_id, q, span, functools.partial(self._fill, flat, q, span)
                )
                hit = cache.get(flat.topic, flat.queue_id, q)
                if hit is None:  # not cacheable (too big, cache full): read what is needed
                    rest, nxt = self._direct(flat, q, max_count - len(kept), hi, tags)
                    return kept + rest, nxt
            unit = Unit(q, hit.data, hit.tags_code)
            q += 1
            if _matches(unit, tags):
                kept.append(unit)
                size += len(unit.data)
        return kept, q

    def _fill(self, flat: FlatMessageFile, start: int, span: int) -> None:
        assert self.cache is not None
        got = self.reader.read(flat, start, span)
        self.cache.put_many(
            flat.topic,
            flat.queue_id,
            ((u.queue_offset, CachedUnit(u.data, u.tags_code)) for u in got),
        )


def _matches(unit: Unit, tags: TagFilter) -> bool:
    if tags.tags is None:
        return True
    return bool(tags.match_codes([unit.tags_code])[0]) and tags.match_message(unit.message())
