"""An uploaded compacted ("contiguous-slot") index file: accepting one made elsewhere
(:func:`check_compacted`) and querying it through a provider with at most two ranged reads
(:class:`CompactedIndexFile`; spec §6.5, §6.6). :mod:`.compaction` makes them.

A compacted file is ``header (END magic) + slots * (i32 position, i32 byte length) + items``:
each slot's items stored together, newest first, slots in ascending order, 28-byte items. Empty
slots point at the current write cursor with length 0. A file with no reachable item compacts to
0 bytes (upstream ``flip()``).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import KW_ONLY
from dataclasses import dataclass
from typing import ClassVar
from typing import Final

import numpy as np

from tiered.errors import IndexFileError
from tiered.index.format import COMPACT_ITEM_DTYPE
from tiered.index.format import COMPACT_ITEM_SIZE
from tiered.index.format import END_MAGIC_CODE
from tiered.index.format import HEADER_SIZE
from tiered.index.format import MAX_UPLOAD_QUERY_ITEMS
from tiered.index.format import SLOT_SIZE
from tiered.index.format import IndexHeader
from tiered.index.format import IndexItem
from tiered.index.format import IndexStatus
from tiered.index.format import KeyQuery
from tiered.index.format import slot_of
from tiered.providers.base import Provider

_LOG = logging.getLogger(__name__)
_SLOT: Final = struct.Struct(">ii")


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
    elif sealed is not None and sealed.compacted() != header:
        problem = f"header {header} does not match the sealed file's {sealed}"
    if problem:
        raise IndexFileError(f"compacted index file rejected: {problem}; compact it again")
    return header


@dataclass(eq=False)
class CompactedIndexFile:
    """An uploaded (UPLOAD) compacted file, queried through a provider.

    ``size`` and ``begin_timestamp`` come from the INDEX segment's metadata (its size and
    minTimestamp), so a query costs at most two ranged reads: the slot entry, then its items.
    """

    status: ClassVar[IndexStatus] = IndexStatus.UPLOAD

    provider: Provider
    key: str
    _: KW_ONLY
    size: int
    begin_timestamp: int
    end_timestamp: int = 0
    slots: int

    def __repr__(self) -> str:
        return f"CompactedIndexFile({self.key!r}, size={self.size}, begin={self.begin_timestamp})"

    def query(self, q: KeyQuery) -> list[IndexItem]:
        """The items answering ``q``, newest first, at most ``max_count``, from the newest 1024
        items of the key's slot (upstream's cap).

        Raises:
            IndexFileError: the slot entry points outside the file.
            ProviderError: a read failed.
        """
        if self.size <= HEADER_SIZE:
            return []
        entry = HEADER_SIZE + slot_of(q.key_hash, self.slots) * SLOT_SIZE
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
        match = q.matches(items["hash"], stored, items["topic_id"])
        return [
            IndexItem(int(r["hash"]), int(r["topic_id"]), int(r["queue_id"]), int(r["offset"]),
                      int(r["size"]), int(r["time_diff"]), 0)
            for r in items[match][: q.max_count]
        ]  # fmt: skip
