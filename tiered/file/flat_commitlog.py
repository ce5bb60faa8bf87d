"""``FlatCommitLogFile``: a queue's messages, byte-identical to the broker's except bytes 28..35.

Spec §5.2: the flat commitlog of a queue is the concatenation of its message units in queue
order, each with PHYSICALOFFSET (bytes 28..35) rewritten to the unit's own offset in the flat
commitlog (segment base + position). The offset space starts at 0 for every queue; messages never
span segments; no BLANK or coda is written.

The per-batch work is vectorised: :func:`rewrite_physical_offsets` writes every unit's flat offset
with one numpy scatter, :func:`store_timestamps` and :func:`check_units` read header fields of all
units of a batch with one gather each.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.errors import ProviderError
from tiered.metadata import LONG_MAX, MetadataStore, now_ms
from tiered.providers.base import Provider
from tiered.providers.layout import FileType

from .flat_append_file import FlatAddress, FlatAppendFile

Int64s = npt.NDArray[np.int64]

_OFFSETS8 = np.arange(8, dtype=np.int64)
_OFFSETS4 = np.arange(4, dtype=np.int64)
_V6_EXTRA = 12  # an IPv6 born host is 20 bytes instead of 8
_STORE_TS_V4 = msgcodec.BORN_HOST_POSITION + 8
_MAGICS = (msgcodec.MAGIC_V1, msgcodec.MAGIC_V2)


def _gather(buf: npt.NDArray[np.uint8], positions: Int64s, width: int) -> Int64s:
    """Big-endian signed integers of ``width`` (4 or 8) bytes at ``positions`` of ``buf``."""
    index = positions[:, None] + (_OFFSETS8 if width == 8 else _OFFSETS4)
    raw = np.ascontiguousarray(buf[index])
    return raw.view(">i8" if width == 8 else ">i4").reshape(-1).astype(np.int64)


def as_uint8(data: bytearray | bytes | memoryview) -> npt.NDArray[np.uint8]:
    """A byte view of ``data`` (writable when ``data`` is)."""
    return np.frombuffer(data, dtype=np.uint8)


def rewrite_physical_offsets(data: bytearray, starts: Int64s, offsets: Int64s) -> None:
    """Write ``offsets[i]`` big-endian into bytes 28..35 of the unit at ``starts[i]``, in place."""
    if not len(starts):
        return
    buf = as_uint8(data)
    index = (starts + msgcodec.PHYSICAL_OFFSET_POSITION)[:, None] + _OFFSETS8
    buf[index] = np.asarray(offsets, dtype=">i8").view(np.uint8).reshape(-1, 8)


def store_timestamps(data: bytearray | bytes | memoryview, starts: Int64s) -> Int64s:
    """The store timestamp of each unit (IPv6 born hosts honoured, unlike Java's fixed byte 56)."""
    if not len(starts):
        return np.zeros(0, dtype=np.int64)
    buf = as_uint8(data)
    sys_flag = _gather(buf, starts + msgcodec.SYSFLAG_POSITION, 4)
    v6 = (sys_flag & msgcodec.BORNHOST_V6_FLAG) != 0
    return _gather(buf, starts + _STORE_TS_V4 + np.where(v6, _V6_EXTRA, 0), 8)


def check_units(
    data: bytearray | bytes | memoryview,
    starts: Int64s,
    sizes: Int64s,
    queue_offsets: Int64s,
    physical_offsets: Int64s | None = None,
) -> int:
    """Index of the first unit whose header disagrees (TOTALSIZE, magic, queue offset and, when
    given, physical offset), or ``len(starts)`` when all agree."""
    n = len(starts)
    if not n:
        return 0
    if int(starts[-1] + sizes[-1]) > len(data) or int(sizes.min()) < msgcodec.MIN_UNIT_SIZE:
        ok = (starts + sizes <= len(data)) & (sizes >= msgcodec.MIN_UNIT_SIZE)
        n = int(np.argmin(ok)) if not ok.all() else n
        starts, sizes, queue_offsets = starts[:n], sizes[:n], queue_offsets[:n]
        if physical_offsets is not None:
            physical_offsets = physical_offsets[:n]
        if not n:
            return 0
    buf = as_uint8(data)
    good = _gather(buf, starts, 4) == sizes
    magic = _gather(buf, starts + 4, 4)
    good &= (magic == _MAGICS[0]) | (magic == _MAGICS[1])
    good &= _gather(buf, starts + msgcodec.QUEUE_OFFSET_POSITION, 8) == queue_offsets
    if physical_offsets is not None:
        good &= _gather(buf, starts + msgcodec.PHYSICAL_OFFSET_POSITION, 8) == physical_offsets
    bad = np.flatnonzero(~good)
    return int(bad[0]) if bad.size else n


class FlatCommitLogFile(FlatAppendFile):
    """The flat commitlog of one queue (segments of ``tieredStoreCommitLogMaxSize``)."""

    def __init__(
        self,
        provider: Provider,
        metadata: MetadataStore,
        address: FlatAddress,
        max_size: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        super().__init__(provider, metadata, address, FileType.COMMIT_LOG, max_size, clock)
        self._first_queue_offset: int | None = None

    def append_units(
        self,
        data: bytearray,
        starts: Int64s,
        sizes: Int64s,
        timestamps: Int64s,
    ) -> Int64s:
        """Rewrite and append whole units (``data`` holds them back to back, in queue order).

        Returns each unit's flat offset. ``data`` is modified in place and kept by reference.
        """
        base = self.append_offset
        offsets = base + starts
        rewrite_physical_offsets(data, starts, offsets)
        begin = int(timestamps.min()) if len(timestamps) else LONG_MAX
        end = int(timestamps.max()) if len(timestamps) else LONG_MAX
        self.append(data, begin, end)
        return offsets

    def try_time_roll(self, now: int, interval_hours: int, min_size: int) -> bool:
        """Upstream's time rolling (spec §5.4): roll when the last segment's first message is
        older than ``interval_hours`` and it holds at least ``min_size`` bytes. Nothing may be
        pending."""
        segs = self.segments
        if not segs or self.pending_size:
            return False
        last = segs[-1]
        begin = last.begin_timestamp
        if begin == LONG_MAX or last.size < max(min_size, 1):
            return False
        if begin + interval_hours * 3_600_000 >= now:
            return False
        self.roll()
        return True

    def first_queue_offset(self) -> int:
        """The queue offset stored in the first unit of the first segment (-1 when fewer than 28
        bytes are committed); cached until :meth:`forget_first_queue_offset`."""
        cached = self._first_queue_offset
        if cached is not None:
            return cached
        segs = self.segments
        if not segs or segs[0].size < msgcodec.PHYSICAL_OFFSET_POSITION:
            return -1
        try:
            head = self.read(segs[0].base, msgcodec.PHYSICAL_OFFSET_POSITION)
        except ProviderError:
            return -1
        if len(head) < msgcodec.PHYSICAL_OFFSET_POSITION:
            return -1
        value = int.from_bytes(head[20:28], "big", signed=True)
        self._first_queue_offset = value
        return value

    def forget_first_queue_offset(self) -> None:
        """Drop the cached first queue offset (after expiry changed the first segment)."""
        self._first_queue_offset = None
