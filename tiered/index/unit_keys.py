"""The index batch of stored message units: their ``UNIQ_KEY`` and ``KEYS`` properties, found
without decoding the messages (spec §2.1, §6.8).

The properties of a unit are its last ``PROPLEN`` bytes. Where they start depends on the host
sizes (sysflag), the body length and the topic length field (one byte in v1, two in v2), so
:func:`property_spans` locates them for a whole batch with a few numpy gathers;
:func:`units_batch` then finds the keys in them for the whole batch at once
(:mod:`.key_tokens`). :func:`key_properties` is the message-by-message reference (upstream
``string2messageProperties``), used for the few messages with non-ASCII keys.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.index.key_tokens import batch_tokens, composite_hashes
from tiered.index.keys import (
    IndexBatch,
    index_hashes,
    is_java_blank,
    message_key_sets,
    tiered_hash,
)
from tiered.javautil import to_i32

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview

_V6_EXTRA: Final = 12  # a 20-byte IPv6 host instead of 8 bytes
_BODY_LENGTH_V4: Final = msgcodec.BORN_HOST_POSITION + 8 + 8 + 8 + 4 + 8  # 84
_KEYS_MARK: Final = (msgcodec.PROPERTY_KEYS + msgcodec.NAME_VALUE_SEPARATOR).encode()
_UNIQ_MARK: Final = (msgcodec.PROPERTY_UNIQ_KEY + msgcodec.NAME_VALUE_SEPARATOR).encode()


def _gather(buf: npt.NDArray[np.uint8], positions: Int64s, width: int) -> Int64s:
    """Big-endian signed integers of ``width`` (1, 2 or 4) bytes at ``positions``."""
    raw = np.ascontiguousarray(buf[positions[:, None] + np.arange(width)])
    kind = {1: ">u1", 2: ">i2", 4: ">i4"}[width]
    return raw.view(kind).reshape(-1).astype(np.int64)


def property_spans(data: Buffer, starts: Int64s, sizes: Int64s) -> tuple[Int64s, Int64s]:
    """Where each unit's properties are: ``(start, length)`` in ``data``; length -1 for a unit
    whose field lengths do not add up to its size (it is not indexed)."""
    n = len(starts)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    ends = starts + np.asarray(sizes, dtype=np.int64)
    ok = (ends <= buf.size) & (ends - starts >= msgcodec.MIN_UNIT_SIZE)
    safe = np.where(ok, starts, 0)
    sys_flag = _gather(buf, safe + msgcodec.SYSFLAG_POSITION, 4)
    v2 = _gather(buf, safe + 4, 4) == msgcodec.MAGIC_V2
    hosts = np.where(sys_flag & msgcodec.BORNHOST_V6_FLAG, _V6_EXTRA, 0) + np.where(
        sys_flag & msgcodec.STOREHOST_V6_FLAG, _V6_EXTRA, 0
    )
    body_at = safe + _BODY_LENGTH_V4 + hosts
    limit = np.where(ok, ends, 0)
    ok &= body_at + 4 <= limit
    body_len = _gather(buf, np.where(ok, body_at, 0), 4)
    topic_at = body_at + 4 + body_len
    ok &= (body_len >= 0) & (topic_at + 2 <= limit)
    topic_at = np.where(ok, topic_at, 0)
    topic_len = np.where(v2, _gather(buf, topic_at, 2), _gather(buf, topic_at, 1))
    props_at = topic_at + np.where(v2, 2, 1) + topic_len
    ok &= (topic_len >= 0) & (props_at + 2 <= limit)
    props_len = _gather(buf, np.where(ok, props_at, 0), 2)
    ok &= (props_len >= 0) & (props_at + 2 + props_len == limit)
    if not ok.all():
        log.warning("%d of %d units have inconsistent field lengths: not indexed", n - ok.sum(), n)
    return np.where(ok, props_at + 2, 0), np.where(ok, props_len, -1)


def key_properties(
    data: Buffer, starts: Int64s, sizes: Int64s
) -> tuple[list[str | None], list[str | None]]:
    """``UNIQ_KEY`` and ``KEYS`` of each unit (None when absent), as the broker decodes them."""
    at, length = property_spans(data, starts, sizes)
    view = memoryview(data)
    uniq: list[str | None] = []
    keys: list[str | None] = []
    for a, n in zip(at.tolist(), length.tolist(), strict=True):
        raw = bytes(view[a : a + n]) if n > 0 else b""
        if _KEYS_MARK not in raw and _UNIQ_MARK not in raw:
            uniq.append(None)
            keys.append(None)
            continue
        props = msgcodec.decode_properties(raw)
        uniq.append(props.get(msgcodec.PROPERTY_UNIQ_KEY))
        keys.append(props.get(msgcodec.PROPERTY_KEYS))
    return uniq, keys


def units_batch(
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

    Equal to ``IndexBatch.for_queue`` over :func:`key_properties`, computed for the whole batch
    with numpy (:mod:`.key_tokens`); messages with non-ASCII key bytes go the Python way.
    """
    n = len(starts)
    if is_java_blank(topic) or not n:
        return IndexBatch.of_rows([], 0, 0, 0, 0, 0, np.zeros(n, np.int64))
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    at, length = property_spans(data, starts, sizes)
    tokens, raw, slow = batch_tokens(np.frombuffer(data, np.uint8), at, length)
    msg = tokens.msg
    hashes = tiered_hash(composite_hashes(topic, raw, tokens.end - tokens.start))
    if slow.any():
        which = np.flatnonzero(slow)
        uniq, keys = key_properties(data, starts[which], sizes[which])
        flat, counts = message_key_sets(uniq, keys)
        msg = np.concatenate((msg, np.repeat(which, counts)))
        hashes = np.concatenate((hashes, index_hashes(topic, flat)))
        by_message = np.argsort(msg, kind="stable")
        msg, hashes = msg[by_message], hashes[by_message]
    return IndexBatch(
        hashes.astype(np.int32),
        np.full(msg.size, to_i32(topic_id), dtype=np.int32),
        np.full(msg.size, queue_id, dtype=np.int32),
        np.asarray(flat_offsets, dtype=np.int64)[msg],
        sizes[msg].astype(np.int32),
        np.asarray(timestamps, dtype=np.int64)[msg],
        np.bincount(msg, minlength=n).astype(np.int64),
    )
