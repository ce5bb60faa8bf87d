"""Index a range of a queue again from the tier: the messages the dispatcher uploaded but whose
keys were never put (a crash between the upload and the index put, or a failed put).

The range is read in chunks: one ranged read of the flat consumequeue, then one of the flat
commitlog for the chunk's messages (they are contiguous there), and the keys of the whole chunk
are put as one batch. Queue offsets the flat consumequeue does not hold (a gap: local data the
broker deleted before it was offloaded) are stepped over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import numpy as np

from tiered.broker.consumequeue import CQ_UNIT_DTYPE
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.unit_fields import store_timestamps
from tiered.errors import ReadPastEndError
from tiered.file.flat_message_file import FlatMessageFile
from tiered.index.bulk_keys import index_batch_of_units
from tiered.index.index_batch import IndexBatch

log = logging.getLogger(__name__)

CHUNK_UNITS: Final = 4096
CHUNK_BYTES: Final = 8 << 20

Put = Callable[[IndexBatch, int, int], None]
"""``put(batch, first queue offset, end queue offset)``: index a chunk (and record it)."""


def _next_unit(flat: FlatMessageFile, queue_offset: int) -> int | None:
    """The first committed queue offset above ``queue_offset`` (past a gap), or None."""
    for seg in flat.consume_queue.segments:
        first = seg.base // CQ_UNIT_SIZE
        if first > queue_offset and seg.size:
            return first
    return None


def reindex(
    flat: FlatMessageFile,
    start: int,
    end: int,
    topic_id: int,
    put: Put,
    *,
    chunk_units: int = CHUNK_UNITS,
    chunk_bytes: int = CHUNK_BYTES,
) -> int:
    """Index queue offsets ``[start, end)`` of ``flat``; returns how many messages were read.

    The caller holds ``flat.lock`` (no upload moves the range meanwhile).

    Raises:
        ProviderError: a read failed; chunks put so far stay put.
    """
    q = start
    done = 0
    while q < end:
        try:
            units = flat.consume_queue.read_units(q, min(chunk_units, end - q))
        except ReadPastEndError:
            units = np.empty(0, dtype=CQ_UNIT_DTYPE)
        if not len(units):
            nxt = _next_unit(flat, q)
            if nxt is None or nxt >= end:
                break
            log.info("%s: queue offsets [%d, %d) are not in the tier (a gap)", flat.path, q, nxt)
            q = nxt
            continue
        offsets = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        ends = offsets + sizes - offsets[0]
        k = max(int(np.searchsorted(ends, chunk_bytes, side="right")), 1)
        data = flat.commitlog.read(int(offsets[0]), int(ends[k - 1]))
        starts = offsets[:k] - offsets[0]
        whole = int(np.count_nonzero(starts + sizes[:k] <= len(data)))
        if whole == 0:
            raise ReadPastEndError(
                f"{flat.path}: the flat commitlog has no message at {int(offsets[0])} for queue "
                f"offset {q}; the index catch-up of this queue is retried later"
            )
        k = whole
        batch = index_batch_of_units(
            flat.topic, topic_id, flat.queue_id, data, starts[:k], sizes[:k], offsets[:k],
            store_timestamps(data, starts[:k]),
        )  # fmt: skip
        put(batch, q, q + k)
        q += k
        done += k
    return done
