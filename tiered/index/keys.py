"""What goes into the tiered index: key hashes (vectorised Java ``String.hashCode``), the key set
of a message in Java ``HashSet`` order, and :class:`IndexBatch`, the unit of a bulk put.

A message is indexed under ``UNIQ_KEY`` (unless blank) and every token of ``KEYS.split(" ")``
(unless ``KEYS`` is blank), deduplicated; upstream iterates that ``HashSet``, which fixes the order
of the message's items in the file (spec §6.4, §6.8). The key of an item is ``topic#key``; its hash
is ``String.hashCode`` negated when negative in 32-bit arithmetic, so ``Integer.MIN_VALUE`` stays
negative (vectors V3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.javautil import java_split_space, java_string_hash

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]

INT_MIN: Final = -(2**31)
_MASK32: Final = 0xFFFFFFFF
_CHUNK_UNITS: Final = 1 << 22  # UTF-16 units hashed per numpy pass (bounded temporaries)
# Character.isWhitespace (StringUtils.isBlank): Zs/Zl/Zp except no-break spaces, plus controls.
_JAVA_BLANK: Final = re.compile(
    "[\t\n\x0b\x0c\r\x1c-\x1f \u1680\u2000-\u2006\u2008-\u200a\u2028\u2029\u205f\u3000]*"
)


def java_hashes(strings: Sequence[str]) -> tuple[U32, I64]:
    """``String.hashCode`` of every string (as unsigned 32-bit) and its length in UTF-16 units.

    Vectorised: the strings are encoded once as UTF-16 and each code unit is weighted by
    ``31**(units after it)``, summed per string modulo 2**32, in chunks of bounded memory.
    """
    n = len(strings)
    hashes = np.zeros(n, dtype=np.uint32)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    done = 0
    while done < n:
        # a chunk of strings holding about _CHUNK_UNITS code points (at least one string)
        ends = np.cumsum(lengths[done:])
        stop = done + max(int(np.searchsorted(ends, _CHUNK_UNITS, side="right")), 1)
        lengths[done:stop] = _hash_chunk(strings[done:stop], hashes[done:stop])
        done = stop
    return hashes, lengths


def _hash_chunk(strings: Sequence[str], out: U32) -> I64:
    """Hash ``strings`` into ``out``; return their UTF-16 lengths."""
    units = np.frombuffer("".join(strings).encode("utf-16-le", "surrogatepass"), dtype="<u2")
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    if units.size != int(lengths.sum()):  # characters outside the BMP take two units
        lengths = np.fromiter(
            (len(s.encode("utf-16-le", "surrogatepass")) // 2 for s in strings),
            dtype=np.int64,
            count=len(strings),
        )
    if not units.size:
        return lengths
    ends = np.cumsum(lengths)
    # units after each unit in its own string (int32: a chunk is far below 2**31 units)
    after = np.repeat(ends.astype(np.int32), lengths)
    after -= np.arange(1, units.size + 1, dtype=np.int32)
    terms = _powers_of_31(int(lengths.max()))[after]
    terms *= units  # uint32 arithmetic wraps modulo 2**32, as Java's int does
    nonempty = np.flatnonzero(lengths)
    sums = np.add.reduceat(terms, (ends - lengths)[nonempty], dtype=np.uint64)
    out[nonempty] = (sums & _MASK32).astype(np.uint32)
    return lengths


def _powers_of_31(count: int) -> U32:
    """``31**i mod 2**32`` for ``i`` in ``0 .. count-1``."""
    powers = np.ones(max(count, 1), dtype=np.uint32)
    step, filled = 31, 1
    while filled < count:  # doubling: powers[filled:2*filled] = powers[:filled] * 31**filled
        take = min(filled, count - filled)
        powers[filled : filled + take] = powers[:take] * np.uint32(step)
        step = step * step & _MASK32
        filled += take
    return powers


def tiered_hash(h: npt.ArrayLike) -> I32:
    """``IndexStoreFile.hashCode``: negate negative hashes in int32 (MIN_VALUE stays negative)."""
    signed = np.asarray(h, dtype=np.int64)
    signed = np.where(signed >= 2**31, signed - 2**32, signed)
    return np.where(signed > INT_MIN, np.abs(signed), signed).astype(np.int32)


def index_hashes(topic: str, keys: Sequence[str]) -> I32:
    """Tiered item hashes of ``topic#key`` for each of ``keys`` (one topic)."""
    key_hash, key_units = java_hashes(keys)
    prefix = java_string_hash(topic + "#") & _MASK32
    lengths, inverse = np.unique(key_units, return_inverse=True)
    shift = np.array([pow(31, int(x), 1 << 32) for x in lengths], dtype=np.uint64)[inverse]
    combined = (np.uint64(prefix) * shift + key_hash.astype(np.uint64)) & _MASK32
    return tiered_hash(combined)


def is_java_blank(text: str | None) -> bool:
    """``StringUtils.isBlank``: None, empty, or only Java whitespace characters."""
    return text is None or _JAVA_BLANK.fullmatch(text) is not None


def message_key_sets(
    uniq_keys: Sequence[str | None], keys: Sequence[str | None]
) -> tuple[list[str], I64]:
    """The key set of each message, flattened, in Java ``HashSet`` iteration order.

    Returns ``(keys, counts)``: message ``i`` owns ``counts[i]`` consecutive entries of ``keys``.
    The order is the one upstream iterates: keys stable-sorted by bucket
    ``(h ^ (h >>> 16)) & (n - 1)`` with ``n`` the final table size (16, doubled while
    ``size > 0.75 n``). Exact for every set in which no bucket gets more than 8 keys (a larger
    bucket makes Java resize early or build a tree bin, which is not emulated).
    """
    flat: list[str] = []
    counts = np.zeros(len(uniq_keys), dtype=np.int64)
    multi = False
    for i, (uniq, joined) in enumerate(zip(uniq_keys, keys, strict=True)):
        members: list[str] = []
        if uniq is not None and not is_java_blank(uniq):
            members.append(uniq)
        if joined is not None and not is_java_blank(joined):
            members.extend(java_split_space(joined))
        if len(members) > 1:
            members = list(dict.fromkeys(members))
            multi = multi or len(members) > 1
        counts[i] = len(members)
        flat.extend(members)
    if not multi:
        return flat, counts
    return _hashset_order(flat, counts), counts


def _hashset_order(flat: list[str], counts: I64) -> list[str]:
    owner = np.repeat(np.arange(counts.size), counts)
    size = counts[owner]
    table = np.full(size.size, 16, dtype=np.int64)
    while np.any(grow := size > table * 3 // 4):
        table[grow] *= 2
    h = java_hashes(flat)[0].astype(np.int64)
    bucket = (h ^ (h >> 16)) & (table - 1)
    position = np.arange(owner.size)
    order = np.lexsort((position, bucket, owner))
    return [flat[j] for j in order.tolist()]


@dataclass(frozen=True)
class IndexBatch:
    """Items to put, one row per key; a message's keys are consecutive rows.

    ``key_counts[i]`` is the number of keys of message ``i`` (its key set's size): upstream puts a
    message's keys all into one file, so a file is full when the next *message* does not fit.
    """

    hashes: I32
    topic_ids: I32
    queue_ids: I32
    offsets: I64
    sizes: I32
    timestamps: I64
    key_counts: I64

    def __post_init__(self) -> None:
        n = self.hashes.shape[0]
        columns = (self.topic_ids, self.queue_ids, self.offsets, self.sizes, self.timestamps)
        if any(c.shape != (n,) for c in columns) or int(self.key_counts.sum()) != n:
            raise ValueError(
                f"IndexBatch columns must all have {n} rows and key_counts must sum to {n}"
            )

    def __len__(self) -> int:
        return int(self.hashes.shape[0])

    @property
    def messages(self) -> int:
        """The number of messages (key sets) in the batch."""
        return int(self.key_counts.shape[0])

    @classmethod
    def of_rows(
        cls,
        hashes: npt.ArrayLike,
        topic_ids: npt.ArrayLike,
        queue_ids: npt.ArrayLike,
        offsets: npt.ArrayLike,
        sizes: npt.ArrayLike,
        timestamps: npt.ArrayLike,
        key_counts: npt.ArrayLike | None = None,
    ) -> IndexBatch:
        """A batch of precomputed hashes; scalars broadcast; default one key per message."""
        h = np.asarray(hashes, dtype=np.int32).reshape(-1)
        n = h.shape[0]
        counts = np.ones(n, np.int64) if key_counts is None else np.asarray(key_counts, np.int64)
        return cls(
            h,
            _column_i32(topic_ids, n),
            _column_i32(queue_ids, n),
            _column_i64(offsets, n),
            _column_i32(sizes, n),
            _column_i64(timestamps, n),
            counts,
        )

    @classmethod
    def for_queue(
        cls,
        topic: str,
        topic_id: int,
        queue_id: int,
        offsets: npt.ArrayLike,
        sizes: npt.ArrayLike,
        store_timestamps: npt.ArrayLike,
        uniq_keys: Sequence[str | None],
        keys: Sequence[str | None],
    ) -> IndexBatch:
        """The batch for messages of one queue: their flat commitlog offsets, sizes, store
        timestamps and ``UNIQ_KEY`` / ``KEYS`` properties (None when absent). A blank topic
        indexes nothing, as upstream."""
        if is_java_blank(topic):
            return cls.of_rows([], 0, 0, 0, 0, 0, [])
        flat, counts = message_key_sets(uniq_keys, keys)
        rows = np.repeat(np.arange(counts.size), counts)
        return cls.of_rows(
            index_hashes(topic, flat),
            topic_id,
            queue_id,
            np.asarray(offsets, np.int64)[rows],
            np.asarray(sizes, np.int32)[rows],
            np.asarray(store_timestamps, np.int64)[rows],
            counts,
        )

    def messages_slice(self, start: int, stop: int | None = None) -> IndexBatch:
        """Messages ``[start, stop)`` of the batch (what is left after a full file)."""
        bounds = np.concatenate(([0], np.cumsum(self.key_counts)))
        stop = self.messages if stop is None else stop
        lo, hi = int(bounds[start]), int(bounds[stop])
        return IndexBatch(
            self.hashes[lo:hi],
            self.topic_ids[lo:hi],
            self.queue_ids[lo:hi],
            self.offsets[lo:hi],
            self.sizes[lo:hi],
            self.timestamps[lo:hi],
            self.key_counts[start:stop],
        )


def _column_i32(values: npt.ArrayLike, n: int) -> I32:
    return np.broadcast_to(np.asarray(values, dtype=np.int32), (n,)).copy()


def _column_i64(values: npt.ArrayLike, n: int) -> I64:
    return np.broadcast_to(np.asarray(values, dtype=np.int64), (n,)).copy()
