"""Compacting a SEALED index file into the compacted ("contiguous-slot") form (spec §6.5).

The algorithm: :func:`compact_numpy` produces exactly the bytes of upstream's linked-list walk.
For a file whose chains follow its hash slots (every file upstream's or our put writes) it
computes the layout with one stable sort, after checking that assumption against every ``next``
field and slot head; any other file (corrupt, hand-made) goes through :func:`compact_walk`, a
direct port of the walk. The PySpark job (``tiered.jobs.compact_index``) distributes the same
computation.

The engine (:class:`Compactor`): ``auto`` picks numpy below ``spark_min_items`` items (such a file
compacts with one sort in less time than starting Spark takes) and the PySpark job (on
``local_spark_session(tieredIndexSparkMaster)``) above. Both produce the same bytes. Without pyspark
installed, large files fall back to numpy with a warning. Spark writes its output to
``compacting/{begin}``; numpy returns bytes. Reading the result: :mod:`.compacted_file`.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import Final
from typing import Literal
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered import metrics
from tiered.broker.javautil import to_i32
from tiered.errors import IndexFileError
from tiered.errors import MissingDependencyError
from tiered.index.format import COMPACT_ITEM_SIZE
from tiered.index.format import HEADER_SIZE
from tiered.index.format import ITEM_DTYPE
from tiered.index.format import ITEM_SIZE
from tiered.index.format import SLOT_SIZE
from tiered.index.format import IndexHeader
from tiered.index.format import compacted_size
from tiered.index.index_store_file import IndexStoreFile

log = logging.getLogger(__name__)

_SLOT: Final = struct.Struct(">ii")
_I32: Final = struct.Struct(">i")
_V28: Final = np.dtype((np.void, COMPACT_ITEM_SIZE))

Buffer = bytes | bytearray | memoryview

Engine = Literal["auto", "numpy", "spark"]
SPARK_MIN_ITEMS: Final = 1_000_000
"""``auto``: files with at least this many items go through Spark."""


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
    out[:HEADER_SIZE] = np.frombuffer(header.compacted().encode(), np.uint8)
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


def compact_file(f: IndexStoreFile) -> bytes:
    """:func:`compact_numpy` of a local index file's mapped bytes (the numpy engine)."""
    view = f.buffer()
    try:
        return compact_numpy(view, f.slots)
    finally:
        view.release()


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
    out[:HEADER_SIZE] = header.compacted().encode()
    return bytes(out[:write])


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


@dataclass
class CompactionResult:
    """What :meth:`~.service.IndexService.compact_sealed` did with one SEALED file."""

    begin_timestamp: int
    items: int
    action: str  # uploaded | staged | waiting | empty | failed
    engine: str = ""
    bytes: int = 0
    base_offset: int = -1
    seconds: float = 0.0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        """The report line of ``rmq-tiered compact-index``."""
        return {
            "beginTimestamp": self.begin_timestamp,
            "items": self.items,
            "action": self.action,
            "engine": self.engine,
            "bytes": self.bytes,
            "baseOffset": self.base_offset,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }


class Compacted(NamedTuple):
    """A compacted file ready to upload."""

    header: IndexHeader  # the SEALED file's header
    size: int  # 0: nothing to upload (no reachable item)
    payload: bytes | Path
    engine: str
    seconds: float


class Compactor:
    """Compacts SEALED files with the configured engine."""

    def __init__(
        self,
        *,
        spark_master: str = "local[*]",
        spark_min_items: int = SPARK_MIN_ITEMS,
        engine: Engine = "auto",
    ) -> None:
        self.spark_master = spark_master
        self.spark_min_items = spark_min_items
        self.engine = engine
        self._spark_missing = False

    def wants_spark(self, f: IndexStoreFile) -> bool:
        """Whether ``f`` goes through the Spark job (by engine and size)."""
        if self.engine != "auto":
            return self.engine == "spark"
        return f.item_count >= self.spark_min_items and not self._spark_missing

    @metrics.counts_index_failures("compact")
    def compact(self, f: IndexStoreFile, out_dir: Path) -> Compacted:
        """Compact ``f`` (SEALED) into bytes, or into ``out_dir/{begin}`` with Spark; counted
        (and timed) per engine in :mod:`tiered.metrics`.

        Raises:
            IndexFileError: the file is corrupt (or was written with other slot counts).
            MissingDependencyError: ``engine="spark"`` without pyspark installed.
        """
        done = self._compact(f, out_dir)
        metrics.INDEX_FILES_COMPACTED.labels(done.engine).inc()
        metrics.INDEX_COMPACTION_DURATION.labels(done.engine).observe(done.seconds)
        return done

    def _compact(self, f: IndexStoreFile, out_dir: Path) -> Compacted:
        started = time.monotonic()
        if self.wants_spark(f):
            try:
                return self._spark(f, out_dir, started)
            except MissingDependencyError as e:
                if self.engine == "spark":
                    raise
                self._spark_missing = True
                log.warning("%s; compacting large index files with numpy instead", e)
        data = compact_file(f)
        return Compacted(f.header, len(data), data, "numpy", time.monotonic() - started)

    def _spark(self, f: IndexStoreFile, out_dir: Path, started: float) -> Compacted:
        from tiered.jobs.session import local_spark_session

        spark = local_spark_session(self.spark_master)
        from tiered.jobs.compact_index import compact_index_file

        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / str(f.begin_timestamp)
        report = compact_index_file(
            spark, str(f.path), str(out), slots=f.slots, max_items=f.max_items
        )
        return Compacted(f.header, report.output_bytes, out, "spark", time.monotonic() - started)
