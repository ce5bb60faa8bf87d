"""What a bulk read of the broker's store is asked for (:class:`BatchRequest`: a queue's run of
consumequeue units), and the header of the message after it, whose store time says how long the
queue's next batch has waited."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker import consumequeue as cqmod
from tiered.broker import message as msgcodec

Units = npt.NDArray[np.void]
Int64s = npt.NDArray[np.int64]
HEADER_BYTES = 96
"""Bytes of a message header read for its store time (behind an IPv6 born host: 76 bytes)."""
NO_UNIT = np.zeros(0, dtype=np.int64)


class BatchRequest(NamedTuple):
    """Consecutive consumequeue ``units`` of a queue, from ``queue_offset``, to read; ``after``
    the units past them, when known (the store time of the first is read too)."""

    topic: str
    queue_id: int
    queue_offset: int
    units: Units
    after: Units | None = None


def first_after(r: BatchRequest) -> tuple[Int64s, Int64s]:
    """Where the header of the unit after ``r``'s batch is: (offsets, lengths) of 0 or 1 range."""
    after = r.after
    if after is None or not len(after) or cqmod.is_blank_unit(after[:1])[0]:
        return NO_UNIT, NO_UNIT
    offset, size = int(after["offset"][0]), int(after["size"][0])
    if offset < 0 or size < msgcodec.MIN_UNIT_SIZE:
        return NO_UNIT, NO_UNIT
    return np.array([offset], np.int64), np.array([min(size, HEADER_BYTES)], np.int64)


def head_time(head: bytearray, queue_offset: int, physical: int, size: int) -> int | None:
    """The store time in a message header, ``None`` when the header is not the unit's."""
    q, p = msgcodec.QUEUE_OFFSET_POSITION, msgcodec.PHYSICAL_OFFSET_POSITION
    found = (
        int.from_bytes(head[0:4], "big", signed=True),
        int.from_bytes(head[q : q + 8], "big", signed=True),
        int.from_bytes(head[p : p + 8], "big", signed=True),
    )
    if found != (size, queue_offset, physical):
        return None
    return msgcodec.store_timestamp_of(memoryview(head))
