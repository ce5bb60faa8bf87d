"""PySpark job: compact SEALED tiered index files into the contiguous-slot format (spec §6.5).

The output is byte-identical to upstream's ``IndexStoreFile.compactToNewFile`` linked-list walk.
Spark does the work (:func:`_run_stages`); the driver handles only the 28-byte header, one small
row per output part, the slot table and the final concatenation.

In-process: ``compact_index_file(local_spark_session(), "/data/…/1700000000000", "/out/…")``.
On a cluster, unchanged, with inputs and outputs every node can reach (fsspec URLs)::

    spark-submit --master spark://master:7077 jobs/compact_index.py \\
        --input s3://bucket/index-staging/1700000000000 \\
        --output s3://bucket/index-compacted/1700000000000 --slots 5000000

This file imports only the standard library, numpy, pyarrow, pyspark and fsspec, so executors
need ``pyspark[sql]`` and ``fsspec`` (plus ``s3fs`` for ``s3://``), not rocketmq-tiered.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import BinaryIO
from typing import Final
from typing import cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The format (spec §6.2-6.5); tests check these equal tiered.index.format.
HEADER_SIZE: Final = 28
SLOT_SIZE: Final = 8
ITEM_SIZE: Final = 32
COMPACT_ITEM_SIZE: Final = 28
BEGIN_MAGIC_CODE: Final = -1127939447
END_MAGIC_CODE: Final = -1127939451
DEFAULT_SLOTS: Final = 5_000_000
DEFAULT_ITEMS_PER_TASK: Final = 2_000_000
_HEADER: Final = struct.Struct(">iqqii")
_V28: Final = np.dtype((np.void, COMPACT_ITEM_SIZE))
_V32: Final = np.dtype((np.void, ITEM_SIZE))
_COPY_CHUNK: Final = 8 << 20
BLOCK_SCHEMA: Final = "part int, idx binary, items binary"
PART_SCHEMA: Final = (
    "part int, items long, bad_links long, bad_heads long, run_slots binary, run_counts binary"
)


@dataclass(frozen=True)
class CompactionReport:
    """What one compaction did."""

    input_url: str
    output_url: str
    begin_timestamp: int
    end_timestamp: int
    items: int  # the header's item count
    compacted_items: int  # items reachable from a slot, written out
    output_bytes: int
    partitions: int
    seconds: float


@dataclass(frozen=True)
class _Job:
    """What every task needs to know (pickled into the tasks)."""

    input_url: str
    slots: int
    items: int
    partitions: int
    staging: str = ""
    storage_options: dict[str, Any] = field(default_factory=dict)

    @property
    def items_base(self) -> int:
        return HEADER_SIZE + self.slots * SLOT_SIZE


# --- byte I/O for local paths and fsspec URLs (driver and tasks) --------------------------------


def _is_url(path: str) -> bool:
    return "://" in path


def _fs(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(url, **options)  # type: ignore[no-any-return]


def read_range(url: str, start: int, length: int, options: dict[str, Any] | None = None) -> bytes:
    """``length`` bytes at ``start`` of a local file or fsspec URL (short only at the end)."""
    if not _is_url(url):
        with open(url, "rb") as fh:
            return os.pread(fh.fileno(), length, start)
    fs, path = _fs(url, options or {})
    return bytes(fs.cat_file(path, start=start, end=start + length))


def _size(url: str, options: dict[str, Any]) -> int:
    if not _is_url(url):
        return os.path.getsize(url)
    fs, path = _fs(url, options)
    return int(fs.size(path))


def _open(url: str, mode: str, options: dict[str, Any]) -> BinaryIO:
    if not _is_url(url):
        return cast(BinaryIO, open(url, mode))  # the caller closes it
    fs, path = _fs(url, options)
    return cast(BinaryIO, fs.open(path, mode))


def _make_dirs(url: str, options: dict[str, Any]) -> None:
    if not _is_url(url):
        os.makedirs(url, exist_ok=True)
        return
    fs, path = _fs(url, options)
    fs.makedirs(path, exist_ok=True)


def _remove_tree(url: str, options: dict[str, Any]) -> None:
    if not _is_url(url):
        shutil.rmtree(url, ignore_errors=True)
        return
    fs, path = _fs(url, options)
    if fs.exists(path):
        fs.rm(path, recursive=True)


# --- tasks ----------------------------------------------------------------------------------------


def part_of(slot: npt.NDArray[np.int64], slots: int, parts: int) -> npt.NDArray[np.int64]:
    """The output part (a fixed range of slots) each slot belongs to: ``slot * parts // slots``."""
    return slot * parts // slots


def part_slots(part: int, slots: int, parts: int) -> tuple[int, int]:
    """The slots ``[lo, hi)`` of output part ``part``."""
    return -(-part * slots // parts), -(-(part + 1) * slots // parts)


def _read_items(job: _Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 1: parse this task's share of items ``1..items`` and cut it into one block per
    output part: ``(part, item indexes as i32, the 32-byte items)``."""
    for batch in batches:
        for p in batch.column(0).to_numpy().tolist():
            lo = 1 + p * job.items // job.partitions
            hi = 1 + (p + 1) * job.items // job.partitions
            raw = read_range(
                job.input_url,
                job.items_base + lo * ITEM_SIZE,
                (hi - lo) * ITEM_SIZE,
                job.storage_options,
            )
            if len(raw) != (hi - lo) * ITEM_SIZE:
                raise ValueError(f"{job.input_url}: items {lo}..{hi - 1} cut short by the end")
            slot = np.fmod(np.frombuffer(raw, ">i4")[:: ITEM_SIZE // 4].astype(np.int64), job.slots)
            kept = np.flatnonzero(slot >= 0)  # a MIN_VALUE hash has no slot: no chain reaches it
            if kept.size:
                yield _blocks(job, lo, raw, kept, part_of(slot[kept], job.slots, job.partitions))


def _blocks(
    job: _Job, lo: int, raw: bytes, kept: npt.NDArray[np.int64], part: npt.NDArray[np.int64]
) -> pa.RecordBatch:
    """One row per output part met: its item indexes (i32) and its 32-byte items, as binary
    values that share two buffers (no per-block copies)."""
    by_part = np.argsort(part.astype(np.int16), kind="stable")  # a radix sort: parts <= 4096
    rows = kept[by_part]
    part = part[by_part]
    starts = np.flatnonzero(np.concatenate(([True], part[1:] != part[:-1])))
    bounds = np.append(starts, rows.size).astype(np.int32)
    items = np.frombuffer(raw, _V32)[rows]
    idx = (rows + lo).astype("<i4")
    n = starts.size
    return pa.RecordBatch.from_arrays(
        [
            pa.array(part[starts].astype(np.int32), pa.int32()),
            pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(bounds * 4), pa.py_buffer(idx)]
            ),
            pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(bounds * ITEM_SIZE), pa.py_buffer(items)]
            ),
        ],
        names=["part", "idx", "items"],
    )


def _binary_values(column: pa.Array) -> list[npt.NDArray[np.uint8]]:
    """The values of a binary column as numpy views of its data buffer (no copies)."""
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[
        column.offset : column.offset + len(column) + 1
    ]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer else np.zeros(0, np.uint8)
    return [data[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]


def _write_parts(job: _Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 2: gather each output part's blocks (they arrive sorted by part) and compact it."""
    current = -1
    idx: list[npt.NDArray[np.uint8]] = []
    items: list[npt.NDArray[np.uint8]] = []
    for batch in batches:
        parts = batch.column(0).to_pylist()
        columns = (parts, _binary_values(batch.column(1)), _binary_values(batch.column(2)))
        for part, i, it in zip(*columns, strict=True):
            if part != current and idx:
                yield _compact_part(job, current, np.concatenate(idx), np.concatenate(items))
                idx, items = [], []
            current = part
            idx.append(i)
            items.append(it)
    if idx:
        yield _compact_part(job, current, np.concatenate(idx), np.concatenate(items))


def _compact_part(
    job: _Job, part: int, idx_raw: npt.NDArray[np.uint8], item_raw: npt.NDArray[np.uint8]
) -> pa.RecordBatch:
    """Order one part's items (slot ascending, newest first), write them to ``part-NNNNN``,
    and check the order is upstream's walk: each item's ``next`` is the following item of its
    slot (or <= 0 at a slot's end), each slot head the slot's first item (or <= 0 if empty).
    True for every file upstream's or our put writes; any other file is refused
    (``tiered.index.compact_numpy`` walks such chains exactly)."""
    lo, hi = part_slots(part, job.slots, job.partitions)
    idx = idx_raw.view("<i4").astype(np.int64)
    words = item_raw.view(">i4").reshape(-1, ITEM_SIZE // 4)
    slot = np.fmod(words[:, 0].astype(np.int64), job.slots)
    order = np.argsort((slot << 32) - idx)  # slots ascending, newest first; keys are unique
    slot, idx, nxt = slot[order], idx[order], words[order, 7].astype(np.int64)
    firsts = np.ndarray((idx.size,), _V28, buffer=item_raw, strides=(ITEM_SIZE,))
    with _open(f"{job.staging}/part-{part:05d}", "wb", job.storage_options) as out:
        out.write(np.take(firsts, order).view(np.uint8).data)
    same = slot[1:] == slot[:-1]
    bad_links = np.count_nonzero(~np.where(same, nxt[:-1] == idx[1:], nxt[:-1] <= 0))
    bad_links += int(nxt[-1] > 0)
    opens = np.concatenate(([True], ~same))
    expected = np.zeros(hi - lo, dtype=np.int64)
    expected[slot[opens] - lo] = idx[opens]
    raw = read_range(
        job.input_url, HEADER_SIZE + lo * SLOT_SIZE, (hi - lo) * SLOT_SIZE, job.storage_options
    )
    heads = np.maximum(np.frombuffer(raw, ">i4")[::2].astype(np.int64), 0)
    counts = np.bincount(slot - lo, minlength=hi - lo)
    filled = np.flatnonzero(counts)
    return pa.RecordBatch.from_pydict(
        {
            "part": pa.array([part], pa.int32()),
            "items": pa.array([idx.size], pa.int64()),
            "bad_links": pa.array([int(bad_links)], pa.int64()),
            "bad_heads": pa.array([int(np.count_nonzero(heads != expected))], pa.int64()),
            "run_slots": pa.array([(filled + lo).astype(np.int32).tobytes()], pa.binary()),
            "run_counts": pa.array([counts[filled].astype(np.int32).tobytes()], pa.binary()),
        }
    )


# --- driver ---------------------------------------------------------------------------------------


def _index_error(message: str) -> Exception:
    """tiered's IndexFileError when rocketmq-tiered is installed, else a ValueError."""
    try:
        from tiered.errors import IndexFileError
    except ImportError:
        return ValueError(message)
    return IndexFileError(message)


def compact_index_file(
    spark: SparkSession,
    input_url: str,
    output_url: str,
    *,
    slots: int = DEFAULT_SLOTS,
    max_items: int | None = None,
    storage_options: dict[str, Any] | None = None,
    items_per_task: int = DEFAULT_ITEMS_PER_TASK,
) -> CompactionReport:
    """Compact the SEALED file ``input_url`` into ``output_url`` (local paths or fsspec URLs).

    ``slots`` must be the slot count the file was written with; ``max_items``, when given, is
    checked against the file size. Part files are staged at ``{output_url}.parts/`` and removed.

    Raises:
        IndexFileError: (ValueError without rocketmq-tiered) the input is not a tiered index file
            of this shape, or its chains do not follow its hash slots.
    """
    started = time.monotonic()
    options = dict(storage_options or {})
    size = _size(input_url, options)
    header = read_range(input_url, 0, HEADER_SIZE, options)
    if len(header) < HEADER_SIZE:
        raise _index_error(f"{input_url}: {size} bytes, shorter than an index header")
    magic, begin, end, slot_count, items = _HEADER.unpack(header)
    base = HEADER_SIZE + slots * SLOT_SIZE
    if magic not in (BEGIN_MAGIC_CODE, END_MAGIC_CODE) or items < 0:
        raise _index_error(f"{input_url}: magic {magic:#x} is not a tiered index file header")
    if size < base + (items + 1) * ITEM_SIZE or (
        max_items is not None and size != base + max_items * ITEM_SIZE
    ):
        raise _index_error(
            f"{input_url}: {size} bytes does not fit slots={slots} (items={items}, "
            f"max_items={max_items}): pass the values the file was written with"
        )
    partitions = max(1, min(4096, math.ceil(items / max(items_per_task, 1))))
    job = _Job(input_url, slots, items, partitions, f"{output_url}.parts", options)
    try:
        parts = _run_stages(spark, job) if items else []
        written = sum(int(row["items"]) for row in parts)
        out_header = _HEADER.pack(END_MAGIC_CODE, begin, end, slot_count, items)
        output_bytes = _assemble(job, output_url, out_header, parts) if written else 0
        if not written:
            _write_whole(output_url, b"", options)
    finally:
        _remove_tree(job.staging, options)
    return CompactionReport(
        input_url, output_url, begin, end, items, written, output_bytes, partitions,
        round(time.monotonic() - started, 3),
    )  # fmt: skip


def _ship_by_value() -> None:
    """Send this module's task code to the workers by value: a worker then never imports it
    (no rocketmq-tiered needed there, and a worker started in a source checkout, whose cwd
    shadows the installed package, still runs)."""
    if __name__ != "__main__":
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]


def _run_stages(spark: SparkSession, job: _Job) -> list[dict[str, Any]]:
    """Each task reads its own byte range of items and cuts them into one block per output part
    (:func:`_read_items`); Spark's shuffle brings every block of a part to one task, which orders
    and writes the part (:func:`_write_parts`). Moving blocks, not rows, keeps the JVM out of the
    per-item path, where a per-item Spark sort would spend most of its time. The parts' per-slot
    counts come back to the driver."""
    _ship_by_value()
    _remove_tree(job.staging, job.storage_options)
    _make_dirs(job.staging, job.storage_options)
    items = spark.range(0, job.partitions, numPartitions=job.partitions).mapInArrow(
        functools.partial(_read_items, job), BLOCK_SCHEMA
    )
    ordered = items.repartition(job.partitions, "part").sortWithinPartitions("part")
    written = ordered.mapInArrow(functools.partial(_write_parts, job), PART_SCHEMA)
    parts = sorted((row.asDict() for row in written.collect()), key=lambda p: int(p["part"]))
    _check_parts(job, parts)
    return parts


def _check_parts(job: _Job, parts: list[dict[str, Any]]) -> None:
    """Refuse a file whose chains do not follow its hash slots (then the sort is not the walk)."""
    numbers = [int(p["part"]) for p in parts]
    if len(set(numbers)) != len(numbers):
        raise RuntimeError(f"Spark split an output part over two partitions: {numbers}")
    bad_links = sum(int(p["bad_links"]) for p in parts)
    bad_heads = sum(int(p["bad_heads"]) for p in parts)
    for missing in sorted(set(range(job.partitions)) - set(numbers)):  # parts without items
        lo, hi = part_slots(missing, job.slots, job.partitions)
        raw = read_range(
            job.input_url, HEADER_SIZE + lo * SLOT_SIZE, (hi - lo) * SLOT_SIZE, job.storage_options
        )
        bad_heads += int(np.count_nonzero(np.frombuffer(raw, ">i4")[::2] > 0))
    if bad_links or bad_heads:
        raise _index_error(
            f"{job.input_url}: its chains do not follow its hash slots ({bad_links} bad links, "
            f"{bad_heads} bad slot heads): the file is corrupt or slots={job.slots} is wrong; "
            "tiered.index.compact_numpy walks such a file's chains exactly as upstream does"
        )


def _assemble(job: _Job, output_url: str, header: bytes, parts: list[dict[str, Any]]) -> int:
    """Build the slot table from the parts' counts and write header, table and the part files
    (in part order) to the output; the bytes written."""
    counts = np.zeros(job.slots, dtype=np.int64)
    for p in parts:
        counts[np.frombuffer(p["run_slots"], np.int32)] = np.frombuffer(p["run_counts"], np.int32)
    ends = job.items_base + np.cumsum(counts) * COMPACT_ITEM_SIZE
    table = np.empty((job.slots, 2), dtype=">i4")
    table[:, 1] = counts * COMPACT_ITEM_SIZE
    table[:, 0] = ends - table[:, 1]
    # a local output appears whole (rename); an object store publishes it when the upload closes
    temporary = output_url if _is_url(output_url) else f"{output_url}.tmp"
    try:
        with _open(temporary, "wb", job.storage_options) as out:
            out.write(header)
            out.write(table.tobytes())
            for p in parts:
                part_url = f"{job.staging}/part-{int(p['part']):05d}"
                with _open(part_url, "rb", job.storage_options) as f:
                    shutil.copyfileobj(f, out, _COPY_CHUNK)
        if temporary != output_url:
            os.replace(temporary, output_url)
    finally:
        if temporary != output_url and os.path.exists(temporary):
            os.unlink(temporary)
    return int(ends[-1])


def _write_whole(url: str, data: bytes, options: dict[str, Any]) -> None:
    with _open(url, "wb", options) as out:
        out.write(data)


STAGING_DIR: Final = "index-staging"
COMPACTED_DIR: Final = "index-compacted"


def pending_pairs(root: str, options: dict[str, Any]) -> list[tuple[str, str]]:
    """``(input, output)`` for every staged file below ``root`` that has no result yet."""
    root = root.rstrip("/")
    staging = f"{root}/{STAGING_DIR}"
    if _is_url(root):
        fs, path = _fs(staging, options)
        names = [n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(path, detail=False)]
    else:
        names = os.listdir(staging) if os.path.isdir(staging) else []
        os.makedirs(f"{root}/{COMPACTED_DIR}", exist_ok=True)
    pairs = []
    for name in sorted(n for n in names if n.isdigit()):
        output = f"{root}/{COMPACTED_DIR}/{name}"
        if not _exists(output, options):
            pairs.append((f"{staging}/{name}", output))
    return pairs


def _exists(url: str, options: dict[str, Any]) -> bool:
    if not _is_url(url):
        return os.path.exists(url)
    fs, path = _fs(url, options)
    return bool(fs.exists(path))


def main(argv: list[str] | None = None) -> int:
    """``spark-submit jobs/compact_index.py --input URL --output URL [...]``; prints one JSON
    report per file. ``--input``/``--output`` may be repeated, in pairs."""
    parser = argparse.ArgumentParser(
        prog="compact_index.py", description="Compact SEALED tiered index files (PySpark)."
    )
    parser.add_argument("--input", action="append", default=[], help="SEALED file path/URL")
    parser.add_argument("--output", action="append", default=[], help="compacted file path/URL")
    parser.add_argument(
        "--pending",
        metavar="ROOT",
        help="compact every ROOT/index-staging/{begin} without a ROOT/index-compacted/{begin} "
        "(the sidecar's staging area: `rmq-tiered compact-index --stage` prints ROOT)",
    )
    parser.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="hash slots per file")
    parser.add_argument("--max-items", type=int, default=None, help="items per file (checked)")
    parser.add_argument("--items-per-task", type=int, default=DEFAULT_ITEMS_PER_TASK)
    parser.add_argument(
        "--storage-options", default="{}", help='fsspec options as JSON, e.g. {"anon": false}'
    )
    args = parser.parse_args(argv)
    if len(args.input) != len(args.output):
        parser.error("give one --output for each --input")
    if not args.input and not args.pending:
        parser.error("give --input/--output pairs or --pending ROOT")
    options = json.loads(args.storage_options)
    pairs = list(zip(args.input, args.output, strict=True))
    if args.pending:
        pairs += pending_pairs(args.pending, options)
    if not pairs:
        print(json.dumps({"pending": 0}), flush=True)
        return 0
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("rmq-tiered-compact-index").getOrCreate()
    for source, target in pairs:
        report = compact_index_file(
            spark, source, target, slots=args.slots, max_items=args.max_items,
            storage_options=options, items_per_task=args.items_per_task,
        )  # fmt: skip
        print(json.dumps(asdict(report)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
