"""The compacted ("contiguous-slot") index file: single-process compaction, and reading an
uploaded one through a provider with at most two ranged reads per query (spec §6.5, §6.6).

A compacted file is ``header (END magic) + slots * (i32 position, i32 byte length) + items``:
each slot's items stored together, newest first, slots in ascending order, 28-byte items. Empty
slots point at the current write cursor with length 0. A file with no reachable item compacts to
0 bytes (upstream ``flip()``).

:func:`compact_numpy` produces exactly the bytes of upstream's linked-list walk. For a file whose
chains follow its hash slots (every file upstream's or our put writes) it computes the layout with
one stable sort, after checking that assumption against every ``next`` field and slot head; any
other file (corrupt, hand-made) goes through :func:`compact_walk`, a direct port of the walk.
The PySpark job (``tiered.jobs.compact_index``) distributes the same computation.
"""

from __future__ import annotations

import logging
import struct
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.errors import IndexFileError
from tiered.index.format import (
    COMPACT_ITEM_DTYPE,
    COMPACT_ITEM_SIZE,
    END_MAGIC_CODE,
    HEADER_SIZE,
    ITEM_DTYPE,
    ITEM_SIZE,
    MAX_UPLOAD_QUERY_ITEMS,
    SLOT_SIZE,
    IndexHeader,
    IndexItem,
    IndexStatus,
    compacted_size,
    slot_of,
)
from tiered.index.keys import index_hashes
from tiered.javautil import to_i32
from tiered.providers.base import Provider

_LOG = logging.getLogger(__name__)
_SLOT: Final = struct.Struct(">ii")
_I32: Final = struct.Struct(">i")

Buffer = bytes | bytearray | memoryview
_V28: Final = np.dtype((np.void, COMPACT_ITEM_SIZE))


def compact_numpy(data: Buffer, slots: int) -> bytes:
    """The compacted form of the local index file ``data`` (all its bytes, e.g. an mmap view).

    Raises:
        IndexFileError: ``data`` is too short for its header's item count and ``slots``, or a
            chain leads outside the file (upstream's compaction fails on the same input).
    """
    header, items, heads = _parse_local(data, slots)
    layout = chain_layout(items["hash"], items["next"], heads, slots)
    if layout is None:
        return compact_walk(data, slots)
    order, counts = layout
    total = compacted_size(slots, order.size)
    if not total:
        return b""
    out = np.empty(total, dtype=np.uint8)
    out[:HEADER_SIZE] = np.frombuffer(_compacted_header(header).encode(), np.uint8)
    table_end = HEADER_SIZE + slots * SLOT_SIZE
    out[HEADER_SIZE:table_end] = slot_table(counts, slots).reshape(-1).view(np.uint8)
    # the first 28 bytes of each 32-byte item, gathered in output order without a temporary
    firsts = np.ndarray(
        (items.size,), _V28, buffer=data, offset=table_end + ITEM_SIZE, strides=(ITEM_SIZE,)
    )
    np.take(firsts, order, out=out[table_end:].view(_V28))
    return out.tobytes()


def chain_layout(
    hashes: npt.ArrayLike, nexts: npt.ArrayLike, heads: npt.ArrayLike, slots: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """The compacted order of items whose chains follow their hash slots, else None.

    ``hashes``/``nexts`` are items ``1..n`` (row ``i`` = item ``i+1``), ``heads`` the slot heads.
    Returns ``(order, counts)``: row numbers in output order (slot ascending, newest first) and
    items per slot. Items whose slot is negative (a ``MIN_VALUE`` hash) belong to no slot.
    """
    slot = np.fmod(np.asarray(hashes, dtype=np.int64), slots)
    valid = np.flatnonzero(slot >= 0)
    # one unique key per item: slot ascending, then newest (largest index) first
    order = valid[np.argsort((slot[valid] << 32) - valid)]
    by_slot = slot[order]
    index = order + 1
    nxt = np.asarray(nexts, dtype=np.int64)[order]
    same = by_slot[1:] == by_slot[:-1]
    chained = np.where(same, nxt[:-1] == index[1:], nxt[:-1] <= 0)
    if not (bool(chained.all()) and (not nxt.size or nxt[-1] <= 0)):
        return None
    expected = np.zeros(slots, dtype=np.int64)
    opens = np.concatenate(([True], ~same)) if by_slot.size else np.zeros(0, np.bool_)
    expected[by_slot[opens]] = index[opens]
    if not np.array_equal(np.maximum(np.asarray(heads, dtype=np.int64), 0), expected):
        return None
    return order, np.bincount(by_slot, minlength=slots).astype(np.int64)


def slot_table(counts: npt.NDArray[np.int64], slots: int) -> npt.NDArray[np.int32]:
    """The compacted slot entries ``(absolute position, byte length)`` for items per slot."""
    ends = HEADER_SIZE + slots * SLOT_SIZE + np.cumsum(counts) * COMPACT_ITEM_SIZE
    table = np.empty((slots, 2), dtype=">i4")
    table[:, 1] = counts * COMPACT_ITEM_SIZE
    table[:, 0] = ends - table[:, 1]
    return table


def compact_walk(data: Buffer, slots: int) -> bytes:
    """Upstream ``compactToNewFile`` step by step (a pure-Python loop over every slot).

    Raises:
        IndexFileError: as :func:`compact_numpy`.
    """
    header, _, _ = _parse_local(data, slots)
    view = memoryview(data)
    base = HEADER_SIZE + slots * SLOT_SIZE
    capacity = base + COMPACT_ITEM_SIZE * header.item_count
    out = bytearray(capacity)
    write = base
    for slot in range(slots):
        start = write
        (current,) = _I32.unpack_from(view, HEADER_SIZE + slot * SLOT_SIZE)
        while current > 0 and write < capacity:
            position = to_i32(base + current * ITEM_SIZE)
            if position < 0 or position + ITEM_SIZE > len(view):
                raise IndexFileError(
                    f"the chain of slot {slot} reaches item {current}, outside the file "
                    f"({len(view)} bytes): the file is corrupt or slots={slots} is wrong"
                )
            out[write : write + COMPACT_ITEM_SIZE] = view[position : position + COMPACT_ITEM_SIZE]
            (current,) = _I32.unpack_from(view, position + COMPACT_ITEM_SIZE)
            write += COMPACT_ITEM_SIZE
        _SLOT.pack_into(out, HEADER_SIZE + slot * SLOT_SIZE, start, write - start)
    if write == base:
        return b""
    out[:HEADER_SIZE] = _compacted_header(header).encode()
    return bytes(out[:write])


def _compacted_header(header: IndexHeader) -> IndexHeader:
    return IndexHeader(
        END_MAGIC_CODE,
        header.begin_timestamp,
        header.end_timestamp,
        header.hash_slot_count,
        header.item_count,
    )


def _parse_local(
    data: Buffer, slots: int
) -> tuple[IndexHeader, npt.NDArray[np.void], npt.NDArray[np.int32]]:
    if len(data) < HEADER_SIZE:
        raise IndexFileError(f"an index file of {len(data)} bytes has no 28-byte header")
    header = IndexHeader.parse(data)
    needed = HEADER_SIZE + slots * SLOT_SIZE + (header.item_count + 1) * ITEM_SIZE
    if header.item_count < 0 or len(data) < needed:
        raise IndexFileError(
            f"an index file of {len(data)} bytes cannot hold {header.item_count} items with "
            f"{slots} slots ({needed} bytes needed): pass the slot count it was written with"
        )
    base = HEADER_SIZE + slots * SLOT_SIZE
    items = np.frombuffer(data, ITEM_DTYPE, header.item_count, base + ITEM_SIZE)
    heads = np.frombuffer(data, ">i4", slots * 2, HEADER_SIZE)[::2]
    return header, items, heads


def check_compacted(
    head: bytes, size: int, slots: int, sealed: IndexHeader | None = None
) -> IndexHeader:
    """Accept a compacted file made elsewhere: its first 28 bytes ``head`` and its ``size``.

    Checks the END magic, that the size fits ``slots`` and whole items, and, given the SEALED
    file's header, that the counts and timestamps are the ones it was compacted from.

    Raises:
        IndexFileError: naming the first check that failed.
    """
    base = HEADER_SIZE + slots * SLOT_SIZE
    if size == 0 and (sealed is None or sealed.item_count == 0):
        return IndexHeader(END_MAGIC_CODE, 0, 0, 0, 0) if sealed is None else sealed
    header = IndexHeader.parse(head)
    problem = ""
    if header.magic != END_MAGIC_CODE:
        problem = f"magic {header.magic:#x} is not the END magic"
    elif size < base + COMPACT_ITEM_SIZE or (size - base) % COMPACT_ITEM_SIZE:
        problem = f"size {size} is not 28 + {slots}*8 + a positive multiple of 28"
    elif (size - base) // COMPACT_ITEM_SIZE > header.item_count:
        problem = f"size {size} holds more items than the header's {header.item_count}"
    elif sealed is not None and _compacted_header(sealed) != header:
        problem = f"header {header} does not match the sealed file's {sealed}"
    if problem:
        raise IndexFileError(f"compacted index file rejected: {problem}; compact it again")
    return header


class CompactedIndexFile:
    """An uploaded (UPLOAD) compacted file, queried through a provider.

    ``size`` and ``begin_timestamp`` come from the INDEX segment's metadata (its size and
    minTimestamp), so a query costs at most two ranged reads: the slot entry, then its items.
    """

    status: Final = IndexStatus.UPLOAD

    def __init__(
        self,
        provider: Provider,
        key: str,
        *,
        size: int,
        begin_timestamp: int,
        end_timestamp: int = 0,
        slots: int,
    ):
        self.provider = provider
        self.key = key
        self.size = size
        self.begin_timestamp = begin_timestamp
        self.end_timestamp = end_timestamp
        self.slots = slots

    def __repr__(self) -> str:
        return f"CompactedIndexFile({self.key!r}, size={self.size}, begin={self.begin_timestamp})"

    def query(
        self,
        topic: str,
        key: str,
        begin_ms: int,
        end_ms: int,
        max_count: int,
        topic_id: int | None = None,
    ) -> list[IndexItem]:
        """Items of ``topic#key`` stored in ``[begin_ms, end_ms]``, newest first, at most
        ``max_count``, from the newest 1024 items of the key's slot (upstream's cap).

        ``topic_id``, when given, drops other topics' items whose key hash collides.

        Raises:
            IndexFileError: the slot entry points outside the file.
            ProviderError: a read failed.
        """
        if self.size <= HEADER_SIZE:
            return []
        (key_hash,) = index_hashes(topic, [key]).tolist()
        entry = HEADER_SIZE + slot_of(key_hash, self.slots) * SLOT_SIZE
        if entry < 0:
            return []
        raw = self.provider.read(self.key, entry, SLOT_SIZE)
        if len(raw) < SLOT_SIZE:
            return []
        position, length = _SLOT.unpack(raw)
        length = min(length, COMPACT_ITEM_SIZE * MAX_UPLOAD_QUERY_ITEMS)
        if position <= 0 or length <= 0:
            return []
        if position >= self.size:
            raise IndexFileError(
                f"{self.key}: slot entry at {entry} points to {position}, past the end "
                f"({self.size} bytes); the file is corrupt or slots={self.slots} is wrong"
            )
        data = self.provider.read(self.key, position, length)
        if len(data) % COMPACT_ITEM_SIZE:
            _LOG.error(
                "%s: %d item bytes at %d are not whole items",
                self.key,
                len(data),
                position,
                extra={"objectKey": self.key},
            )
            return []
        items = np.frombuffer(data, COMPACT_ITEM_DTYPE)
        stored = self.begin_timestamp + items["time_diff"].astype(np.int64) * 1000
        match = (items["hash"] == key_hash) & (stored >= begin_ms) & (stored <= end_ms)
        if topic_id is not None:
            match &= items["topic_id"] == topic_id
        return [
            IndexItem(int(r["hash"]), int(r["topic_id"]), int(r["queue_id"]), int(r["offset"]),
                      int(r["size"]), int(r["time_diff"]), 0)
            for r in items[match][:max_count]
        ]  # fmt: skip
