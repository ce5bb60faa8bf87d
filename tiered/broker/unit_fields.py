"""Header fields of many message units at once: a batch's units lie back to back in one buffer
and every function here reads (or writes) one field of all of them, with a few numpy calls or one
loop of the compiled kernel (``tiered._kernel``; :mod:`.numpy_units` keeps the numpy versions of
the kernel's checks, which the tests hold it to).

Positions are byte offsets into the buffer. A unit's field positions depend on its host sizes
(the sysflag's IPv6 bits: a 20-byte host instead of 8), its body length and, for the topic
length field, its magic (one byte in v1, two in v2); the properties are the unit's last
``PROPLEN`` bytes (spec §2.1).

Gathers go through ``np.take`` with ``intp`` positions: numpy's fancy indexing (``buf[idx]``) of a
large index is several times slower here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.process.native import kernel

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]
Buffer = bytes | bytearray | memoryview

_V6_EXTRA: Final = 12  # a 20-byte IPv6 host instead of 8 bytes
_STORE_TS_V4: Final = msgcodec.BORN_HOST_POSITION + 8
_BODY_LENGTH_V4: Final = msgcodec.BORN_HOST_POSITION + 8 + 8 + 8 + 4 + 8  # 84
_WIDTHS: Final = {1: ">u1", 2: ">i2", 4: ">i4", 8: ">i8"}
_LANES: Final = {w: np.arange(w, dtype=np.intp) for w in _WIDTHS}


def as_uint8(data: Buffer) -> Bytes:
    """A byte view of ``data`` (writable when ``data`` is)."""
    return np.frombuffer(data, dtype=np.uint8)


def gather_be(buf: Bytes, positions: Int64s, width: int) -> Int64s:
    """Big-endian integers of ``width`` bytes (1 unsigned; 2, 4, 8 signed) at ``positions``."""
    index = positions.astype(np.intp, copy=False)[:, None] + _LANES[width]
    return np.take(buf, index).view(_WIDTHS[width]).reshape(-1).astype(np.int64)


def span_index(starts: Int64s, lengths: Int64s) -> npt.NDArray[np.intp]:
    """The positions of every byte of the spans ``[starts[i], starts[i] + lengths[i])``, span
    after span (``np.take(buf, span_index(...))`` packs the spans back to back).

    One cumulative sum of steps: +1 inside a span, a jump to the next span's start between
    spans; empty spans take no place."""
    lengths = np.maximum(lengths, 0)
    total = int(lengths.sum())
    steps = np.ones(total, dtype=np.intp)
    if not total:
        return steps
    filled = np.flatnonzero(lengths)
    at, length = starts[filled], lengths[filled]
    firsts = np.cumsum(length) - length
    steps[0] = at[0]
    steps[firsts[1:]] = at[1:] - (at[:-1] + length[:-1]) + 1
    return np.cumsum(steps, out=steps)


def property_spans(data: Buffer, starts: Int64s, sizes: Int64s) -> tuple[Int64s, Int64s]:
    """Where each unit's properties are: ``(start, length)`` in ``data``; length -1 for a unit
    whose field lengths do not add up to its size (it is not indexed)."""
    n = len(starts)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    buf = as_uint8(data)
    starts = np.asarray(starts, dtype=np.int64)
    ends = starts + np.asarray(sizes, dtype=np.int64)
    ok = (ends <= buf.size) & (ends - starts >= msgcodec.MIN_UNIT_SIZE)
    safe = np.where(ok, starts, 0)
    sys_flag = gather_be(buf, safe + msgcodec.SYSFLAG_POSITION, 4)
    v2 = gather_be(buf, safe + 4, 4) == msgcodec.MAGIC_V2
    hosts = np.where(sys_flag & msgcodec.BORNHOST_V6_FLAG, _V6_EXTRA, 0) + np.where(
        sys_flag & msgcodec.STOREHOST_V6_FLAG, _V6_EXTRA, 0
    )
    body_at = safe + _BODY_LENGTH_V4 + hosts
    limit = np.where(ok, ends, 0)
    ok &= body_at + 4 <= limit
    body_len = gather_be(buf, np.where(ok, body_at, 0), 4)
    topic_at = body_at + 4 + body_len
    ok &= (body_len >= 0) & (topic_at + 2 <= limit)
    topic_at = np.where(ok, topic_at, 0)
    topic_len = np.where(v2, gather_be(buf, topic_at, 2), gather_be(buf, topic_at, 1))
    props_at = topic_at + np.where(v2, 2, 1) + topic_len
    ok &= (topic_len >= 0) & (props_at + 2 <= limit)
    props_len = gather_be(buf, np.where(ok, props_at, 0), 2)
    ok &= (props_len >= 0) & (props_at + 2 + props_len == limit)
    if not ok.all():
        log.warning("%d of %d units have inconsistent field lengths: not indexed", n - ok.sum(), n)
    return np.where(ok, props_at + 2, 0), np.where(ok, props_len, -1)


SMALL_SUM: Final = 32
"""Arrays up to this long are summed as Python ints (:func:`int_sum`)."""


def int_sum(values: npt.NDArray[np.integer]) -> int:
    """The sum of an integer array as a Python int. A wide round sums a unit or two per queue,
    thousands of times: numpy's call costs several times a Python sum of so few."""
    return sum(values.tolist()) if len(values) <= SMALL_SUM else int(values.sum())


def int_min(values: npt.NDArray[np.integer]) -> int:
    """The least of a non-empty integer array as a Python int (as :func:`int_sum`)."""
    return min(values.tolist()) if len(values) <= SMALL_SUM else int(values.min())


def _i64(values: npt.ArrayLike) -> Int64s:
    return np.ascontiguousarray(values, dtype=np.int64)


def store_timestamps(data: Buffer, starts: Int64s) -> Int64s:
    """The store timestamp of each unit (IPv6 born hosts honoured, unlike Java's fixed byte 56).

    Raises:
        ValueError: a unit's header is not inside ``data``."""
    if not len(starts):
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(kernel().store_timestamps(data, _i64(starts)), dtype=np.int64)


def rewrite_physical_offsets(data: bytearray, starts: Int64s, offsets: Int64s) -> None:
    """Write ``offsets[i]`` big-endian into bytes 28..35 of the unit at ``starts[i]``, in place."""
    if len(starts):
        kernel().rewrite_physical_offsets(data, _i64(starts), _i64(offsets))


class CheckedBatch(NamedTuple):
    """:func:`check_batch`'s answer: ``good`` units agree with their consumequeue units (all when
    it is ``len(starts)``); ``starts`` of every unit, ``timestamps`` of the good ones and their
    least and greatest (``time_range``; None when there are none)."""

    good: int
    starts: Int64s
    timestamps: Int64s
    time_range: tuple[int, int] | None


def check_batch(
    data: Buffer, sizes: Int64s, first_queue_offset: int, physical_offsets: Int64s | None = None
) -> CheckedBatch:
    """:func:`check_units` and :func:`store_timestamps` of units held back to back in ``data``,
    the first at queue offset ``first_queue_offset``: one compiled pass without the interpreter
    lock, in place of the arrays of starts and queue offsets, the two calls and the least and
    greatest time that numpy built around them (each such call lets the lock go and waits to get
    it back from the other workers)."""
    physical = None if physical_offsets is None else _i64(physical_offsets)
    good, starts, times, first, last = kernel().check_batch(
        data, _i64(sizes), first_queue_offset, physical
    )
    stamps = np.frombuffer(times, dtype=np.int64)
    return CheckedBatch(
        good, np.frombuffer(starts, dtype=np.int64), stamps, (first, last) if good else None
    )


class CheckedBatches(NamedTuple):
    """:func:`check_batches`' answer: per batch, how many of its units are ``good`` and the
    least and greatest store time of those (``time_ranges``; None when there are none); per
    unit, joined in batch order, its ``starts`` in its batch's bytes and its store time
    (``timestamps``; 0 past its batch's good units)."""

    good: list[int]
    starts: Int64s
    timestamps: Int64s
    time_ranges: list[tuple[int, int] | None]


def check_batches(
    datas: Sequence[Buffer], sizes: Int64s, counts: Int64s, first_queue_offsets: Int64s,
    physical_offsets: Int64s | None = None,
) -> CheckedBatches:  # fmt: skip
    """:func:`check_batch` of many batches by one call of the kernel (a wide round's wave):
    batch ``i`` holds ``counts[i]`` units in ``datas[i]``, whose sizes (and physical offsets)
    are the next ``counts[i]`` of ``sizes`` (``physical_offsets``).

    Raises:
        ValueError: the columns do not agree in length."""
    physical = None if physical_offsets is None else _i64(physical_offsets)
    good, starts, times, first, last = kernel().check_batches(
        list(datas), _i64(sizes), _i64(counts), _i64(first_queue_offsets), physical
    )
    goods = memoryview(good).cast("q").tolist()
    ranges = zip(memoryview(first).cast("q").tolist(), memoryview(last).cast("q").tolist(),
                 strict=True)  # fmt: skip
    return CheckedBatches(
        goods,
        np.frombuffer(starts, dtype=np.int64),
        np.frombuffer(times, dtype=np.int64),
        [r if g else None for g, r in zip(goods, ranges, strict=True)],
    )


def rewrite_batches(
    datas: Sequence[bytearray], starts: Int64s, offsets: Int64s, counts: Int64s
) -> None:
    """:func:`rewrite_physical_offsets` of many batches by one call of the kernel: batch
    ``i``'s units are the next ``counts[i]`` of ``starts`` and ``offsets``.

    Raises:
        ValueError: a unit lies outside its batch, or the columns do not agree in length."""
    kernel().rewrite_batches(list(datas), _i64(starts), _i64(offsets), _i64(counts))


def encode_cq_units(
    offsets: npt.ArrayLike, sizes: npt.ArrayLike, tags_codes: npt.ArrayLike
) -> bytes:
    """:func:`~tiered.broker.consumequeue.encode_units` (which the tests hold it to) in one
    compiled loop without the interpreter lock, for the dispatcher's batches.

    Raises:
        ValueError: the columns differ in length, or a size does not fit a 32-bit int."""
    units: bytes = kernel().encode_units(_i64(offsets), _i64(sizes), _i64(tags_codes))
    return units


def check_units(
    data: Buffer,
    starts: Int64s,
    sizes: Int64s,
    queue_offsets: Int64s,
    physical_offsets: Int64s | None = None,
) -> int:
    """Index of the first unit whose header disagrees (it lies outside ``data``, is shorter than
    a unit, or its TOTALSIZE, magic, queue offset and, when given, physical offset differ), or
    ``len(starts)`` when all agree. One compiled loop over the units (``tiered._kernel``)."""
    if not len(starts):
        return 0
    physical = None if physical_offsets is None else _i64(physical_offsets)
    return int(kernel().check_units(data, _i64(starts), _i64(sizes), _i64(queue_offsets), physical))
