"""``FlatCommitLogFile``: a queue's messages, byte-identical to the broker's except bytes 28..35.

Spec §5.2: the flat commitlog of a queue is the concatenation of its message units in queue
order, each with PHYSICALOFFSET (bytes 28..35) rewritten to the unit's own offset in the flat
commitlog (segment base + position). The offset space starts at 0 for every queue; messages never
span segments; no BLANK or coda is written.

The per-batch work is vectorised (:mod:`tiered.broker.unit_fields`): every unit's flat offset is
written with one numpy scatter.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.unit_fields import rewrite_physical_offsets
from tiered.errors import ProviderError
from tiered.metadata import HOUR_MS
from tiered.metadata import LONG_MAX
from tiered.providers.layout import FileType

from .flat_append_file import FlatAppendFile

Int64s = npt.NDArray[np.int64]


class FlatCommitLogFile(FlatAppendFile):
    """The flat commitlog of one queue (segments of ``tieredStoreCommitLogMaxSize``)."""

    file_type = FileType.COMMIT_LOG
    deferred_sync = True
    """A batch's bytes are written and then synced by :meth:`FlatMessageFile.commit` before its
    units are uploaded (so the batch's memory can be freed in between); a record never says more
    than was synced."""
    _first_queue_offset: int | None = None

    def append_units(
        self, data: bytearray, starts: Int64s, times: tuple[int, int] | None
    ) -> Int64s:
        """Rewrite and append whole units (``data`` holds them back to back, in queue order,
        ``starts`` where each begins), stored between ``times`` (least, greatest; None when
        there are none).

        Returns each unit's flat offset. ``data`` is modified in place and kept by reference.
        """
        base = self.append_offset
        offsets = base + starts
        rewrite_physical_offsets(data, starts, offsets)
        begin, end = times if times is not None else (LONG_MAX, LONG_MAX)
        self.append(data, begin, end)
        return offsets

    def time_roll_due(self, now: int, interval_hours: int) -> bool:
        """Whether the last segment is old enough to roll by time (:meth:`try_time_roll`) once
        it holds enough bytes."""
        segs = self.segments
        if not segs:
            return False
        opened = segs[-1].create_timestamp or segs[-1].begin_timestamp
        return opened not in (0, LONG_MAX) and opened + interval_hours * HOUR_MS < now

    def room_before_time_roll(self, now: int, interval_hours: int, min_size: int) -> int:
        """:meth:`free_room`, or -1 when :meth:`try_time_roll` would roll the segment now."""
        room = self.free_room()
        if room < 0 or self._segments[-1].size < max(min_size, 1):
            return room
        return -1 if self.time_roll_due(now, interval_hours) else room

    def try_time_roll(self, now: int, interval_hours: int, min_size: int) -> bool:
        """Time rolling (spec §5.4, by the segment's age): roll when the last segment was
        created more than ``interval_hours`` ago (wall clock, its record's createTimestamp) and
        holds at least ``min_size`` bytes. Nothing may be pending.

        Upstream rolls by the age of the segment's *first message* instead. For a live tail
        both are the same; for a backlog of old messages upstream's rule seals every segment at
        ``min_size`` (16 MiB), which on an object store means many small objects and a seal
        each. By the segment's own age a catch-up fills segments to their maximum size.
        """
        segs = self.segments
        if not segs or self.pending_size or segs[-1].size < max(min_size, 1):
            return False
        if not self.time_roll_due(now, interval_hours):
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

    def learn_first_queue_offset(self, position: int, queue_offset: int) -> None:
        """A reader checked that the message at ``position`` holds ``queue_offset``: when that is
        the first segment's first message, it is :meth:`first_queue_offset` (no read of it)."""
        if self._first_queue_offset is not None:
            return
        first = self._segments[:1]  # (expiry may drop it meanwhile: a copy of it)
        if first and first[0].base == position:
            self._first_queue_offset = queue_offset

    @property
    def known_first_queue_offset(self) -> int:
        """:meth:`first_queue_offset` when it has been read (and not forgotten since), else -1."""
        cached = self._first_queue_offset
        return -1 if cached is None else cached

    def forget_first_queue_offset(self) -> None:
        """Drop the cached first queue offset (after expiry changed the first segment)."""
        self._first_queue_offset = None
