"""What one bulk put into the index holds: :class:`IndexBatch`, one row per key, the rows of a
message consecutive (in Java ``HashSet`` order, :mod:`.key_set`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tiered.index.java_hash import index_hashes
from tiered.index.key_set import is_java_blank
from tiered.index.key_set import message_key_sets

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)  # arrays: no value equality
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

    @classmethod
    def concat(cls, batches: Sequence[IndexBatch | BatchPart]) -> IndexBatch:
        """The rows of ``batches`` one after the other (one put for many queues' batches); the
        parts of one batch that follow each other are taken as one view of it."""
        whole = BatchPart.joined(batches)
        if len(whole) == 1:
            return whole[0]
        return cls(
            np.concatenate([b.hashes for b in whole]),
            np.concatenate([b.topic_ids for b in whole]),
            np.concatenate([b.queue_ids for b in whole]),
            np.concatenate([b.offsets for b in whole]),
            np.concatenate([b.sizes for b in whole]),
            np.concatenate([b.timestamps for b in whole]),
            np.concatenate([b.key_counts for b in whole]),
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


class BatchPart:
    """Messages ``[first, end)`` of ``batch``, its rows ``[lo, hi)``: one queue's share of a
    batch indexed for many queues at once (:func:`~.bulk_keys.index_batches_of_units`), made
    a batch of its own only when put alone (:meth:`rows`)."""

    __slots__ = ("batch", "end", "first", "hi", "lo")

    def __init__(self, batch: IndexBatch, first: int, end: int, lo: int, hi: int) -> None:
        self.batch, self.first, self.end, self.lo, self.hi = batch, first, end, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def rows(self) -> IndexBatch:
        """The part as a batch (views of the whole batch's columns)."""
        b, lo, hi = self.batch, self.lo, self.hi
        return IndexBatch(
            b.hashes[lo:hi], b.topic_ids[lo:hi], b.queue_ids[lo:hi], b.offsets[lo:hi],
            b.sizes[lo:hi], b.timestamps[lo:hi], b.key_counts[self.first : self.end],
        )  # fmt: skip

    @staticmethod
    def joined(batches: Sequence[IndexBatch | BatchPart]) -> list[IndexBatch]:
        """``batches`` with each run of parts that follow each other in one batch made one
        batch (a wave's queues put in the order they were indexed: one view of the lot)."""
        out: list[IndexBatch] = []
        run: BatchPart | None = None  # (the run's first part, then ``end``/``hi`` grown)
        end = hi = 0
        for b in [*batches, None]:
            if (
                isinstance(b, BatchPart)
                and run is not None
                and b.batch is run.batch
                and (b.first == end)
            ):
                end, hi = b.end, b.hi
                continue
            if run is not None:
                whole = run.first == 0 and end == run.batch.messages
                out.append(run.batch if whole else BatchPart(run.batch, run.first, end,
                                                             run.lo, hi).rows())  # fmt: skip
                run = None
            if isinstance(b, BatchPart):
                run, end, hi = b, b.end, b.hi
            elif b is not None:
                out.append(b)
        return out


def _column_i32(values: npt.ArrayLike, n: int) -> I32:
    return np.broadcast_to(np.asarray(values, dtype=np.int32), (n,)).copy()


def _column_i64(values: npt.ArrayLike, n: int) -> I64:
    return np.broadcast_to(np.asarray(values, dtype=np.int64), (n,)).copy()
