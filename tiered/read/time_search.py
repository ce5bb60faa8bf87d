"""Offset by time in a queue's flat files (spec §9.7, ``getQueueOffsetByTimeAsync``).

The consumequeue segments' ``[beginTimestamp, endTimestamp]`` (segment metadata, no backend
request) pick the segment; a lower-bound binary search inside it finds the first message stored at
or after the time. Each probe costs two small ranged reads: the consumequeue unit, then the
message header it points to. Segments never overlap or splice across a gap: the search never
probes a queue offset the tier does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tiered.broker import message as msgcodec
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.errors import ReadPastEndError
from tiered.file.flat_message_file import FlatMessageFile
from tiered.metadata import LONG_MAX

_HEADER_BYTES = 96  # the store timestamp sits at byte 56, or 68 behind an IPv6 born host


class Boundary(StrEnum):
    """Which of several messages stored at the same millisecond to answer with."""

    LOWER = "LOWER"
    UPPER = "UPPER"


@dataclass(frozen=True, slots=True)
class _Run:
    """The queue offsets ``[start, end)`` of one consumequeue segment, with its time range."""

    start: int
    end: int
    begin_ts: int
    end_ts: int


def store_time(flat: FlatMessageFile, queue_offset: int) -> int:
    """The store time of the message at ``queue_offset`` (two small ranged reads).

    Raises:
        ReadPastEndError: the tier does not hold that offset.
    """
    unit = flat.consume_queue.read_units(queue_offset, 1)
    if not len(unit):
        raise ReadPastEndError(f"{flat.path}: no consumequeue unit at queue offset {queue_offset}")
    offset, size = int(unit["offset"][0]), int(unit["size"][0])
    head = flat.commitlog.read(offset, min(size, _HEADER_BYTES))
    return msgcodec.store_timestamp_of(head)


def _runs(flat: FlatMessageFile, lo: int, commit: int) -> list[_Run]:
    runs = []
    for seg in flat.consume_queue.segments:
        start, end = (
            max(seg.base // CQ_UNIT_SIZE, lo),
            min(seg.commit_offset // CQ_UNIT_SIZE, commit),
        )
        if start < end:
            runs.append(_Run(start, end, seg.begin_timestamp, seg.end_timestamp))
    return runs


def _lower_bound(flat: FlatMessageFile, runs: list[_Run], timestamp: int, commit: int) -> int:
    """The first held queue offset stored at or after ``timestamp`` (``commit`` if none)."""
    for run in runs:
        if run.end_ts != LONG_MAX and run.end_ts < timestamp:
            continue  # the whole segment is older
        if run.begin_ts != LONG_MAX and run.begin_ts >= timestamp:
            return run.start  # the whole segment is newer
        lo, hi = run.start, run.end
        while lo < hi:
            mid = (lo + hi) // 2
            if store_time(flat, mid) < timestamp:
                lo = mid + 1
            else:
                hi = mid
        if lo < run.end:
            return lo
    return commit


def _held_before(runs: list[_Run], queue_offset: int) -> int:
    """The last held queue offset below ``queue_offset`` (across a gap between segments)."""
    previous_end = queue_offset
    for run in runs:
        if queue_offset <= run.start:
            return previous_end - 1
        if queue_offset <= run.end:
            return queue_offset - 1
        previous_end = run.end
    return queue_offset - 1


def offset_by_time(flat: FlatMessageFile, timestamp: int, boundary: Boundary) -> int:
    """The tier's answer to "which queue offset was stored at ``timestamp``" (spec §9.7).

    Before the first message: the min offset; after the last: the commit offset (max + 1);
    otherwise the first message stored at or after ``timestamp`` -- with ``UPPER``, when messages
    were stored exactly then, the last of them. -1 when the tier holds nothing of the queue.

    Raises:
        ProviderError: the backend failed.
    """
    lo, commit = flat.min_offset(), flat.commit_offset
    if lo < 0 or commit - 1 < lo:
        return lo
    if store_time(flat, commit - 1) < timestamp:
        return commit
    if store_time(flat, lo) > timestamp:
        return lo
    runs = _runs(flat, lo, commit)
    first = _lower_bound(flat, runs, timestamp, commit)
    if boundary is Boundary.UPPER and first < commit and store_time(flat, first) == timestamp:
        return _held_before(runs, _lower_bound(flat, runs, timestamp + 1, commit))
    return first
