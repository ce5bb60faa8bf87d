"""The tiered index file format shared by local and compacted files (spec §6.2, §6.3).

Big-endian throughout. A 28-byte header ``(magic i32, beginTimestamp i64, endTimestamp i64,
hashSlotCount i32, indexItemCount i32)``, then ``slots`` 8-byte slot entries, then items.

- Local (UNSEALED/SEALED) file: a slot is ``(i32 newest item index, i32 0)``; item ``n`` (n >= 1,
  item 0 is never written) is 32 bytes at ``28 + slots*8 + n*32``: ``(hash i32, topicId i32,
  queueId i32, offset i64, size i32, timeDiff i32, next i32)``.
- Compacted (UPLOAD) file: a slot is ``(i32 absolute position, i32 byte length)`` of its items,
  which are the first 28 bytes of the local items (``next`` dropped), newest first.

``hashSlotCount`` counts slots that became non-empty, not the configured slot count, which is not
recorded anywhere in a local file: writer and reader must be given the same ``slots``.
"""

from __future__ import annotations

import enum
import functools
import mmap
import struct
from dataclasses import dataclass
from typing import Any
from typing import Final
from typing import NamedTuple

import numpy as np

from tiered.broker.javautil import to_i32
from tiered.index.java_hash import index_hashes

HEADER_SIZE: Final = 28
SLOT_SIZE: Final = 8
ITEM_SIZE: Final = 32
COMPACT_ITEM_SIZE: Final = 28
BEGIN_MAGIC_CODE: Final = to_i32(0xCCDDEEFF ^ (1880681586 + 4))  # 0xBCC50289
END_MAGIC_CODE: Final = to_i32(0xCCDDEEFF ^ (1880681586 + 8))  # 0xBCC50285
MAX_QUERY_COUNT: Final = 512
"""Items a query of a local file visits at most (upstream ``MAX_QUERY_COUNT``)."""
MAX_UPLOAD_QUERY_ITEMS: Final = 1024
"""Items a query of a compacted file reads at most from one slot (the newest)."""
DEFAULT_SLOTS: Final = 5_000_000
DEFAULT_MAX_ITEMS: Final = 20_000_000

_COMPACT_FIELDS: Final = [
    ("hash", ">i4"),
    ("topic_id", ">i4"),
    ("queue_id", ">i4"),
    ("offset", ">i8"),
    ("size", ">i4"),
    ("time_diff", ">i4"),
]
COMPACT_ITEM_DTYPE: Final = np.dtype(_COMPACT_FIELDS)
"""An item of a compacted file: a local item without its chain link."""
ITEM_DTYPE: Final = np.dtype([*_COMPACT_FIELDS, ("next", ">i4")])
"""An item of a local index file: the compacted fields, then ``next`` (the chain)."""
_HEADER: Final = struct.Struct(">iqqii")


class IndexStatus(enum.Enum):
    """Upstream ``IndexStatusEnum``: where an index file is in its life."""

    SHUTDOWN = "SHUTDOWN"
    UNSEALED = "UNSEALED"
    SEALED = "SEALED"
    UPLOAD = "UPLOAD"


class IndexHeader(NamedTuple):
    """The 28-byte header of a local or compacted index file."""

    magic: int
    begin_timestamp: int
    end_timestamp: int
    hash_slot_count: int
    item_count: int

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview | mmap.mmap) -> IndexHeader:
        """Decode the first 28 bytes of ``data`` (no validation)."""
        return cls(*_HEADER.unpack_from(data, 0))

    def encode(self) -> bytes:
        """The header's 28 bytes."""
        return _HEADER.pack(
            self.magic,
            self.begin_timestamp,
            self.end_timestamp,
            self.hash_slot_count,
            self.item_count,
        )

    def compacted(self) -> IndexHeader:
        """The header of this file's compacted form: the END magic, counts and times kept."""
        return self._replace(magic=END_MAGIC_CODE)


class IndexItem(NamedTuple):
    """One index item as a query returns it; ``item_index`` is 0 for compacted items."""

    hash: int
    topic_id: int
    queue_id: int
    offset: int
    size: int
    time_diff: int
    item_index: int

    def store_timestamp(self, begin_timestamp: int) -> int:
        """The store time the item encodes, seconds precision: ``begin + timeDiff * 1000``."""
        return begin_timestamp + self.time_diff * 1000


@dataclass(frozen=True)
class KeyQuery:
    """One key lookup in an index file, local or compacted: the items of ``topic#key`` stored in
    ``[begin_ms, end_ms]``, up to ``max_count``; with ``topic_id``, another topic's key whose
    hash collides is dropped before it counts."""

    topic: str
    key: str
    begin_ms: int
    end_ms: int
    max_count: int
    topic_id: int | None = None

    @functools.cached_property
    def key_hash(self) -> int:
        """The index hash of ``topic#key``."""
        (h,) = index_hashes(self.topic, [self.key]).tolist()
        return int(h)

    def matches(self, key_hash: Any, stored: Any, topic_id: Any) -> Any:
        """Whether items (ints, or numpy arrays of them) answer the query: the key's hash, a
        store time within the range and, when the query names one, the topic id."""
        match = (key_hash == self.key_hash) & (stored >= self.begin_ms) & (stored <= self.end_ms)
        if self.topic_id is not None:
            match = match & (topic_id == self.topic_id)
        return match


def local_file_size(slots: int, max_items: int) -> int:
    """Bytes of a local index file: ``28 + slots*8 + max_items*32`` (680,000,028 by default)."""
    return HEADER_SIZE + slots * SLOT_SIZE + max_items * ITEM_SIZE


def compacted_size(slots: int, items: int) -> int:
    """Bytes of a compacted file holding ``items`` items (0 when there are none, as upstream)."""
    return HEADER_SIZE + slots * SLOT_SIZE + items * COMPACT_ITEM_SIZE if items else 0


def slot_of(key_hash: int, slots: int) -> int:
    """``hash % slots`` with Java's remainder (negative for ``Integer.MIN_VALUE``)."""
    r = abs(key_hash) % slots
    return -r if key_hash < 0 else r
