"""The reference implementation of the index batch of stored units, with numpy: what the
compiled kernel (:mod:`.bulk_keys`, ``tiered._kernel``) computes in one loop over the messages,
done here in some thirty array passes. The sidecar runs the kernel; the tests hold the kernel to
this module (differential tests over generated units), as this module was held to the decoder.

What :mod:`.key_set` does message by message in Python -- parse the properties, take ``UNIQ_KEY``
and the ``KEYS.split(" ")`` tokens unless blank, deduplicate, order them as Java's ``HashSet``
iterates, hash ``topic#key`` -- is done here on the property bytes of every unit together, packed
back to back (:class:`_Props`; the bodies are never scanned), so the cost per message is a few
array elements, not a few Python calls (spec §2.1, §6.4, §6.8). A message whose key values hold
a non-ASCII byte (where bytes and UTF-16 units differ) takes the Python path of :mod:`.key_set`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.broker.javautil import to_i32
from tiered.broker.unit_fields import as_uint8
from tiered.broker.unit_fields import property_spans
from tiered.broker.unit_fields import span_index
from tiered.index.index_batch import IndexBatch
from tiered.index.java_hash import hashset_order
from tiered.index.java_hash import index_hashes
from tiered.index.java_hash import keyed_hashes
from tiered.index.java_hash import substring_hashes
from tiered.index.key_set import is_java_blank
from tiered.index.key_set import key_properties
from tiered.index.key_set import message_key_sets

Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Bytes = npt.NDArray[np.uint8]
Buffer = bytes | bytearray | memoryview

_ITEM_SEPARATOR: Final = 2
_SPACE: Final = 0x20
_UNIQ_NAME: Final = b"UNIQ_KEY\x01"
_KEYS_NAME: Final = b"KEYS\x01"


def _is_blank(data: Bytes) -> Bools:
    """``Character.isWhitespace`` of each byte below 0x80: ``\\t \\n \\x0b \\x0c \\r`` (9..13) and
    ``\\x1c..\\x1f`` plus the space (28..32); uint8 subtraction wraps, so one compare per range."""
    return ((data - np.uint8(9)) <= 4) | ((data - np.uint8(28)) <= 4)


class _Props:
    """The property sections of a batch packed back to back: ``data``; message ``msg[r]``'s
    section is ``data[first[r]:end[r]]``, sections in message order."""

    def __init__(self, buf: Bytes, at: Int64s, length: Int64s) -> None:
        self.msg = np.flatnonzero(length > 0)
        size = length[self.msg]
        self.data = np.take(buf, span_index(at[self.msg], size))
        self.end = np.cumsum(size)
        self.first = self.end - size

    def items(self) -> tuple[Int64s, Int64s]:
        """``[start, end)`` of every item: cut at the separators and at section bounds."""
        bound = np.zeros(self.data.size + 1, dtype=np.bool_)
        bound[self.first] = True
        bound[np.flatnonzero(self.data == _ITEM_SEPARATOR) + 1] = True
        bound[-1] = True
        cuts = np.flatnonzero(bound)
        start, after = cuts[:-1], cuts[1:]
        # an item ends before its separator; the last item of a section may have none
        return start, after - (self.data[after - 1] == _ITEM_SEPARATOR)

    def values(self, start: Int64s, end: Int64s, name: bytes) -> tuple[Int64s, Int64s, Int64s]:
        """``(message, value start, value end)`` of the last item named ``name`` (with its
        ``\\x01``) with a non-empty value, for each message that has one."""
        k = len(name)
        hit = (self.data[start] == name[0]) & (start + k < end)
        start, end = start[hit], end[hit]
        for j in range(1, k):
            hit = self.data[start + j] == name[j]
            start, end = start[hit], end[hit]
        section = np.searchsorted(self.first, start, side="right") - 1
        last = np.ones(section.size, dtype=np.bool_)
        last[:-1] = section[1:] != section[:-1]  # a later item replaces an earlier one
        return self.msg[section[last]], start[last] + k, end[last]


def _split(props: _Props, msg: Int64s, start: Int64s, end: Int64s) -> tuple[Int64s, ...]:
    """``value.split(" ")`` of each ``KEYS`` value ``[start, end)`` of message ``msg``: the
    tokens ``(message, start, end)``, trailing empty tokens dropped."""
    if not msg.size:
        return msg, start, end
    spaces = np.flatnonzero(props.data == _SPACE)
    owner = np.searchsorted(start, spaces, side="right") - 1
    inside = (owner >= 0) & (spaces < end[np.maximum(owner, 0)])
    cuts = np.sort(np.concatenate((start - 1, spaces[inside], end)))
    cut_owner = np.searchsorted(start - 1, cuts, side="right") - 1
    pair = cut_owner[1:] == cut_owner[:-1]
    owner, t_start, t_end = cut_owner[1:][pair], cuts[:-1][pair] + 1, cuts[1:][pair]
    if not owner.size:
        return owner, t_start, t_end
    heads = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
    counts = np.diff(np.append(heads, owner.size))
    rank = np.arange(owner.size)
    last = np.maximum.reduceat(np.where(t_end > t_start, rank, -1), heads)
    keep = rank <= np.repeat(last, counts)
    return msg[owner[keep]], t_start[keep], t_end[keep]


def _facts(data: Bytes, start: Int64s, end: Int64s) -> tuple[npt.NDArray[np.uint32], Bools, Bools]:
    """Per token ``[start, end)`` of ``data``: its ``String.hashCode`` (unsigned), whether it
    has a non-ASCII byte, whether it is all Java whitespace (empty tokens are); the tokens' bytes
    are never copied."""
    hashes = substring_hashes(data, start, end)
    length = end - start
    # blank needs a whitespace first byte: only those few tokens are counted byte by byte
    blank = length == 0
    maybe = ~blank
    maybe[maybe] = _is_blank(data[start[maybe]])
    if maybe.any():
        blank[maybe] = _count_in(_is_blank(data), start[maybe], end[maybe]) == length[maybe]
    return hashes, _count_in(data >= 0x80, start, end) > 0, blank


def _count_in(mask: Bools, start: Int64s, end: Int64s) -> Int64s:
    """How many set positions of ``mask`` each ``[start, end)`` holds (few are set: non-ASCII
    and whitespace bytes, so their positions are searched instead of summing every byte)."""
    where = np.flatnonzero(mask)
    return np.searchsorted(where, end) - np.searchsorted(where, start)


def _first_of_each(
    data: Bytes, msg: Int64s, start: Int64s, end: Int64s, hashes: npt.NDArray[np.uint32]
) -> Bools:
    """Keep-mask of the tokens (sorted by message): a token equal to an earlier one of its
    message is dropped. Only tokens sharing message and hash are compared byte by byte."""
    keep = np.ones(msg.size, dtype=np.bool_)
    if msg.size < 2:
        return keep
    key = msg * (1 << 32) + hashes
    order = np.argsort(key, kind="stable")
    key = key[order]
    same = key[1:] == key[:-1]
    if not same.any():
        return keep
    bounds = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
    for lo, hi in zip(bounds[::2].tolist(), bounds[1::2].tolist(), strict=True):
        seen: set[bytes] = set()
        for t in order[lo : hi + 1].tolist():  # by position within the run
            content = data[start[t] : end[t]].tobytes()
            if content in seen:
                keep[t] = False
            seen.add(content)
    return keep


def _tokens(
    props: _Props, n: int
) -> tuple[Int64s, npt.NDArray[np.uint32], Int64s, npt.NDArray[np.bool_]]:
    """The keys of every message as Java's ``HashSet`` iterates them: ``(message, hash,
    length)`` per key, and the mask of the messages left to the Python path.

    The items (``name\\x01value\\x02``) are cut at the separators and ``UNIQ_KEY`` and ``KEYS``
    matched at item starts, the last valid one of a message winning (as
    ``string2messageProperties``); the ``KEYS`` values are split (:func:`_split`); every token is
    hashed where it lies (:func:`_facts`); duplicates are dropped (:func:`_first_of_each`) and
    the ``HashSet`` order applied (:mod:`.java_hash`)."""
    start, end = props.items()
    u_msg, u_start, u_end = props.values(start, end, _UNIQ_NAME)
    k_msg, k_start, k_end = _split(props, *props.values(start, end, _KEYS_NAME))
    u_count = u_msg.size
    msg = np.concatenate((u_msg, k_msg))
    t_start = np.concatenate((u_start, k_start))
    t_end = np.concatenate((u_end, k_end))
    hashes, high, blank = _facts(props.data, t_start, t_end)
    slow = np.zeros(n, dtype=np.bool_)
    slow[msg[high]] = True
    keys_used = np.zeros(n, dtype=np.bool_)
    keys_used[k_msg[~blank[u_count:]]] = True  # KEYS is blank when every token is
    use = ~slow[msg]
    use[:u_count] &= ~blank[:u_count]
    use[u_count:] &= keys_used[k_msg]
    msg, t_start, t_end, hashes = msg[use], t_start[use], t_end[use], hashes[use]
    order = np.argsort(msg, kind="stable")  # UNIQ_KEY first, then the KEYS tokens
    msg, t_start, t_end, hashes = msg[order], t_start[order], t_end[order], hashes[order]
    keep = _first_of_each(props.data, msg, t_start, t_end, hashes)
    msg, hashes, length = msg[keep], hashes[keep], (t_end - t_start)[keep]
    order = hashset_order(msg, hashes)
    return msg[order], hashes[order], length[order], slow


def reference_index_batch(
    topic: str,
    topic_id: int,
    queue_id: int,
    data: Buffer,
    starts: Int64s,
    sizes: Int64s,
    flat_offsets: Sequence[int] | Int64s,
    timestamps: Int64s,
) -> IndexBatch:
    """The index batch of units of one queue held back to back in ``data`` (``starts``,
    ``sizes``), stored at ``flat_offsets`` of the queue's flat commitlog at ``timestamps``.

    Equal to ``IndexBatch.for_queue`` over :func:`~.key_set.key_properties`."""
    n = len(starts)
    if is_java_blank(topic) or not n:
        return IndexBatch.of_rows([], 0, 0, 0, 0, 0, np.zeros(n, np.int64))
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    props = _Props(as_uint8(data), *property_spans(data, starts, sizes))
    msg, key_hashes, lengths, slow = _tokens(props, n)
    hashes = keyed_hashes(topic, key_hashes, lengths)
    if slow.any():
        which = np.flatnonzero(slow)
        flat, counts = message_key_sets(*key_properties(data, starts[which], sizes[which]))
        msg = np.concatenate((msg, np.repeat(which, counts)))
        hashes = np.concatenate((hashes, index_hashes(topic, flat)))
        by_message = np.argsort(msg, kind="stable")
        msg, hashes = msg[by_message], hashes[by_message]
    return IndexBatch(
        hashes,
        np.full(msg.size, to_i32(topic_id), dtype=np.int32),
        np.full(msg.size, queue_id, dtype=np.int32),
        np.asarray(flat_offsets, dtype=np.int64)[msg],
        sizes[msg].astype(np.int32),
        np.asarray(timestamps, dtype=np.int64)[msg],
        np.bincount(msg, minlength=n).astype(np.int64),
    )
