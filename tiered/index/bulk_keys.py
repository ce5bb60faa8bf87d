"""The index batch of stored message units, one compiled loop over a whole batch.

For each unit the kernel (``tiered._kernel.index_items``, Rust, tiered/kernel/src/keys.rs) finds
the properties from the header fields, reads ``UNIQ_KEY`` and ``KEYS`` as
``string2messageProperties`` does, splits ``KEYS`` as ``String.split(" ")``, drops blank values
(Java's ``Character.isWhitespace``) and duplicates, orders the keys as Java's ``HashSet``
iterates them and hashes ``topic#key`` over UTF-16 code units (spec §2.1, §6.4, §6.8). It runs
without the GIL and hands back the batch's columns as buffers (a message's flat offset, size
and store time gathered per item in the same call, not in numpy calls that each hand the GIL to
another worker). A unit whose key values are not valid UTF-8 (Java reads them with replacement
characters) is indexed here through :mod:`.key_set`, the message-by-message reference.

:mod:`.numpy_keys` is the reference implementation with numpy array passes, which the tests hold
the kernel to; not a runtime fallback: a sidecar without its kernel would spend several times the
CPU on the broker's node without saying so, so a missing kernel is an import error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Final
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker.javautil import java_string_hash
from tiered.broker.javautil import to_i32
from tiered.index.index_batch import BatchPart
from tiered.index.index_batch import IndexBatch
from tiered.index.java_hash import index_hashes
from tiered.index.key_set import is_java_blank
from tiered.index.key_set import key_properties
from tiered.index.key_set import message_key_sets
from tiered.process.native import kernel

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview

_MASK32: Final = 0xFFFFFFFF


@functools.lru_cache(maxsize=1 << 13)
def _prefix_hash(topic: str) -> int:
    """``String.hashCode`` of ``topic + "#"``, unsigned (a loop over the name: asked per batch,
    so remembered for the topics seen last)."""
    return java_string_hash(topic + "#") & _MASK32


def index_batch_of_units(
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
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    columns, inconsistent = kernel().index_columns(
        data, starts, sizes, _prefix_hash(topic), to_i32(topic_id),
        queue_id, np.ascontiguousarray(flat_offsets, dtype=np.int64),
        np.ascontiguousarray(timestamps, dtype=np.int64),
    )  # fmt: skip
    raw_hash, raw_topics, raw_queues, raw_offsets, raw_sizes, raw_times, raw_counts = columns[:7]
    raw_msg, raw_slow = columns[7:]
    if inconsistent:
        log.warning("%d of %d units have inconsistent field lengths: not indexed", inconsistent, n)
    hashes = np.frombuffer(raw_hash, dtype=np.int32)
    if not raw_slow:  # the columns as the kernel gathered them
        return IndexBatch(
            hashes,
            np.frombuffer(raw_topics, dtype=np.int32),
            np.frombuffer(raw_queues, dtype=np.int32),
            np.frombuffer(raw_offsets, dtype=np.int64),
            np.frombuffer(raw_sizes, dtype=np.int32),
            np.frombuffer(raw_times, dtype=np.int64),
            np.frombuffer(raw_counts, dtype=np.int64),
        )
    msg = np.frombuffer(raw_msg, dtype=np.int64)
    which = np.frombuffer(raw_slow, dtype=np.int64)
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


class UnitsOf(NamedTuple):
    """One queue's batch for :func:`index_batches_of_units`: the arguments of
    :func:`index_batch_of_units`."""

    topic: str
    topic_id: int
    queue_id: int
    data: Buffer
    starts: Int64s
    sizes: Int64s
    flat_offsets: Int64s
    timestamps: Int64s


def index_batches_of_units(batches: Sequence[UnitsOf]) -> list[IndexBatch | BatchPart]:
    """:func:`index_batch_of_units` of many queues' batches (a wide dispatch round's wave):
    every batch's keys found and hashed by one call of the kernel, not one each, each batch's
    items a :class:`~.index_batch.BatchPart` of the wave's. A batch of a blank topic, an
    empty one, or one with a key that is not valid UTF-8 (rare) is indexed on its own."""
    out: list[IndexBatch | BatchPart | None] = [None] * len(batches)
    blank = {t: is_java_blank(t) for t in {b.topic for b in batches}}
    bulk = [i for i, b in enumerate(batches) if len(b.starts) and not blank[b.topic]]
    if bulk:
        chosen = [batches[i] for i in bulk]
        counts = np.fromiter((len(b.starts) for b in chosen), np.int64, len(chosen))
        bounds = np.zeros(len(chosen) + 1, np.int64)
        np.cumsum(counts, out=bounds[1:])

        def column(values: list[Int64s]) -> Int64s:
            return np.concatenate(values).astype(np.int64, copy=False)

        sizes = column([b.sizes for b in chosen])
        columns, inconsistent = kernel().index_columns_many(
            [b.data for b in chosen],
            bounds,
            column([b.starts for b in chosen]),
            sizes,
            np.fromiter((_prefix_hash(b.topic) for b in chosen), np.uint32, len(chosen)),
            column([b.flat_offsets for b in chosen]),
            column([b.timestamps for b in chosen]),
        )
        if inconsistent:
            log.warning("%d of %d units have inconsistent field lengths: not indexed",
                        inconsistent, len(sizes))  # fmt: skip
        msg = np.frombuffer(columns[5], dtype=np.int64)
        rows = np.searchsorted(msg, bounds)  # each batch's items (msg ascends)
        per_batch = np.diff(rows)
        wave = IndexBatch(
            np.frombuffer(columns[0], dtype=np.int32),
            np.repeat(np.array([b.topic_id for b in chosen], np.int64).astype(np.int32), per_batch),
            np.repeat(np.array([b.queue_id for b in chosen], np.int32), per_batch),
            np.frombuffer(columns[1], dtype=np.int64),
            np.frombuffer(columns[2], dtype=np.int32),
            np.frombuffer(columns[3], dtype=np.int64),
            np.frombuffer(columns[4], dtype=np.int64),
        )
        slow = np.frombuffer(columns[6], dtype=np.int64)
        redo = set((np.searchsorted(bounds, slow, side="right") - 1).tolist())
        units, lo = bounds.tolist(), rows.tolist()
        for j, i in enumerate(bulk):
            if j not in redo:  # (one with slow units: indexed alone, below, slow ones too)
                out[i] = BatchPart(wave, units[j], units[j + 1], lo[j], lo[j + 1])
    return [index_batch_of_units(*batches[i]) if got is None else got for i, got in enumerate(out)]
