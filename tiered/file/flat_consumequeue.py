"""``FlatConsumeQueueFile``: a queue's 20-byte units pointing into its flat commitlog (spec §5.3).

A unit is ``(flat commitlog offset i64, size i32, tags code i64)``, big-endian, the local
consumequeue layout; the unit of queue offset ``q`` lives at byte ``q * 20`` (absolute, so the
first segment of a queue first offloaded at offset 100 has base 2000). Offsets below the first
segment do not exist; a *gap* (local data the broker deleted before it was offloaded) is a jump
between two segments, never filler units.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tiered.broker.consumequeue import CQ_UNIT_DTYPE
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.consumequeue import decode_units
from tiered.broker.unit_fields import encode_cq_units
from tiered.metadata import LONG_MAX
from tiered.providers.layout import FileType

from .flat_append_file import FlatAppendFile

Units = npt.NDArray[np.void]


class FlatConsumeQueueFile(FlatAppendFile):
    """The flat consumequeue of one queue (segments of ``tieredStoreConsumeQueueMaxSize``)."""

    file_type = FileType.CONSUME_QUEUE
    deferred_sync = True
    """A batch's units are uploaded (after its commitlog bytes, which are durable) without an
    ``fdatasync`` of their own: the dispatcher syncs every consumequeue a round appended to side
    by side before it records them (their syncs share the disk's cache flushes), and a record
    never says more than was synced. Units beyond a record point at durable commitlog bytes
    either way, as restart reconciliation relies on."""

    @staticmethod
    def segment_size(max_size: int) -> int:
        """A segment holds whole units only: ``max_size`` rounded down to units (at least one)."""
        return max(max_size // CQ_UNIT_SIZE, 1) * CQ_UNIT_SIZE

    @property
    def min_queue_offset(self) -> int:
        """The first segment's first queue offset; -1 without segments."""
        m = self.min_offset
        return m // CQ_UNIT_SIZE if m >= 0 else -1

    @property
    def commit_queue_offset(self) -> int:
        """The next queue offset after the uploaded units; -1 without segments."""
        segs = self._segments  # (asked several times per queue a round: no property chain)
        if not segs:
            return -1
        last = segs[-1]
        return (last.base + last.size) // CQ_UNIT_SIZE

    @property
    def append_queue_offset(self) -> int:
        """The next queue offset after the appended units; -1 without segments."""
        segs = self._segments
        if not segs:
            return -1
        last = segs[-1]
        return (last.base + last.size + last.pending_size) // CQ_UNIT_SIZE

    def room_units(self) -> int:
        """Units the last segment can still take before it rolls."""
        return self.room() // CQ_UNIT_SIZE

    def init_queue_offset(self, queue_offset: int, *, persist: bool = True) -> None:
        """Create the first segment at ``queue_offset * 20`` (no-op when segments exist)."""
        self.init_offset(queue_offset * CQ_UNIT_SIZE, persist=persist)

    def append_units(
        self,
        flat_offsets: npt.ArrayLike,
        sizes: npt.ArrayLike,
        tags_codes: npt.ArrayLike,
        times: tuple[int, int] | None,
    ) -> int:
        """Append units stored between ``times`` (least, greatest; None when there are none);
        returns the queue offset of the first one."""
        data = encode_cq_units(flat_offsets, sizes, tags_codes)
        begin, end = times if times is not None else (LONG_MAX, LONG_MAX)
        return self.append(data, begin, end) // CQ_UNIT_SIZE

    def read_units(self, queue_offset: int, count: int) -> Units:
        """Up to ``count`` committed units from ``queue_offset`` (fewer where committed data or a
        contiguous run of segments ends).

        Raises:
            ReadPastEndError: ``queue_offset`` is not in the committed range.
        """
        raw = self.read(queue_offset * CQ_UNIT_SIZE, count * CQ_UNIT_SIZE)
        whole = len(raw) - len(raw) % CQ_UNIT_SIZE
        if not whole:
            return np.empty(0, dtype=CQ_UNIT_DTYPE)
        return decode_units(raw[:whole])
