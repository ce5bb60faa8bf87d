"""Benchmark: the tiered key index — bulk puts, compaction, key queries of uploaded files.

Run with ``make bench`` (about 3-5 minutes on 2 cores). In one run, side by side:

- bulk ``put_many`` filling a full default-size file (20,000,000 items, 680 MB) and the
  dispatcher-shaped path (4096-message batches with keys hashed from strings);
- the PySpark compaction of that full file on ``local[2]``: wall time and items/s;
- on a 1,000,000-item file (250,000 slots, the default's 4 items per slot): the single-process
  numpy compaction and a pure-Python port of upstream's loop, as ratios to the Spark job;
- key-query latency over 10 uploaded compacted files (at most 2 ranged reads each).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
from tiered.providers.posix import PosixProvider

from tiered.broker.javautil import java_string_hash
from tiered.index import CompactedIndexFile
from tiered.index import IndexBatch
from tiered.index import IndexStoreFile
from tiered.index import compact_numpy
from tiered.index.compaction import compact_walk
from tiered.index.format import KeyQuery
from tiered.index.java_hash import index_hashes

T0 = 1_700_000_000_000
FULL_SLOTS, FULL_ITEMS = 5_000_000, 20_000_000
SMALL_SLOTS, SMALL_ITEMS = 250_000, 1_000_001  # 1,000,000 usable items
QUERY_FILES, QUERY_KEYS = 10, 300


def _fill(directory: Path, begin: int, slots: int, max_items: int, seed: int) -> IndexStoreFile:
    """A full file of random keys put in 1M-item batches (topic ids 0..63, 16 queues)."""
    rng = np.random.default_rng(seed)
    f = IndexStoreFile.create(directory, begin, slots=slots, max_items=max_items)
    done, total = 0, max_items - 1
    while done < total:
        n = min(1_000_000, total - done)
        rows = done + np.arange(n)
        batch = IndexBatch.of_rows(
            rng.integers(0, 2**31 - 1, n), rng.integers(0, 64, n), rng.integers(0, 16, n),
            rows * 1024, 1024, begin + rows // 100,
        )  # fmt: skip
        assert f.put_many(batch) == n
        done += n
    f.seal()
    return f


def _dispatcher_shaped_puts(directory: Path) -> tuple[float, int]:
    """Items/s of ``for_queue`` + ``put_many`` in 4096-message batches (2 keys each)."""
    f = IndexStoreFile.create(directory, T0, slots=FULL_SLOTS, max_items=FULL_ITEMS)
    messages, per_batch = 200 * 4096, 4096
    uniq = [f"7F0000011F9018B4AAC2{i:012X}" for i in range(messages)]
    keys = [f"order-{i}" for i in range(messages)]
    offsets = np.arange(messages) * 1024
    started = time.perf_counter()
    for lo in range(0, messages, per_batch):
        hi = lo + per_batch
        batch = IndexBatch.for_queue(
            "TopicTest", 3, lo % 16, offsets[lo:hi], np.full(per_batch, 1024),
            T0 + offsets[lo:hi] // 1024, uniq[lo:hi], keys[lo:hi],
        )  # fmt: skip
        f.put_many(batch)
    seconds = time.perf_counter() - started
    items = f.item_count
    f.close()
    f.path.unlink()
    return seconds, items


def test_index_benchmark(tmp_path: Path) -> None:
    from tiered.jobs.compact_index import compact_index_file
    from tiered.jobs.session import local_spark_session

    lines = ["", "tiered key index"]

    # --- key hashing and puts -----------------------------------------------------------------
    strings = [f"order-{i}" for i in range(1_000_000)]
    started = time.perf_counter()
    index_hashes("TopicTest", strings)
    vectorised = len(strings) / (time.perf_counter() - started)
    started = time.perf_counter()
    for s in strings[:100_000]:
        java_string_hash(f"TopicTest#{s}")
    per_key = 100_000 / (time.perf_counter() - started)
    lines.append(
        f"  key hashing         {vectorised / 1e6:8.2f} M keys/s vectorised, {per_key / 1e6:.2f} M"
        f" keys/s per-key Python: ratio {vectorised / per_key:.1f}"
    )
    seconds, items = _dispatcher_shaped_puts(tmp_path)
    lines.append(
        f"  for_queue+put_many  {items / seconds / 1e6:8.2f} M items/s  (4096-message batches, "
        f"UNIQ_KEY + 1 KEYS token, {items} items)"
    )
    started = time.perf_counter()
    full = _fill(tmp_path / "full", T0, FULL_SLOTS, FULL_ITEMS, seed=1)  # closed: msync'd
    fill_seconds = time.perf_counter() - started
    full.close()
    lines.append(
        f"  put_many (bulk)     {(FULL_ITEMS - 1) / fill_seconds / 1e6:8.2f} M items/s  "
        f"(full default file, {FULL_ITEMS - 1} items, 680 MB, {fill_seconds:.1f} s incl. rng)"
    )

    # --- compaction: numpy, pure Python and Spark on 1M items; Spark on the full file ----------
    small = _fill(tmp_path / "small", T0, SMALL_SLOTS, SMALL_ITEMS, seed=2)
    view = small.buffer()
    data = bytes(view)
    view.release()
    small.close()
    numpy_runs = []
    for _ in range(3):
        started = time.perf_counter()
        compacted = compact_numpy(data, SMALL_SLOTS)
        numpy_runs.append(time.perf_counter() - started)
    started = time.perf_counter()
    walked = compact_walk(data, SMALL_SLOTS)
    python_seconds = time.perf_counter() - started
    assert walked == compacted
    started = time.perf_counter()
    spark = local_spark_session("local[2]", app_name="bench-index")
    lines.append(f"  Spark start         {time.perf_counter() - started:8.1f} s")
    small_runs = []
    for _ in range(2):  # the first one also warms the JVM and the Python workers up
        small_spark = compact_index_file(
            spark, str(small.path), str(tmp_path / "small.compacted"), slots=SMALL_SLOTS
        )
        assert (tmp_path / "small.compacted").read_bytes() == compacted
        small_runs.append(small_spark.seconds)
    n = SMALL_ITEMS - 1
    numpy_rate = n / statistics.median(numpy_runs)
    python_rate = n / python_seconds
    runs = []
    for i in range(2):
        report = compact_index_file(
            spark, str(full.path), str(tmp_path / f"full.compacted{i}"), slots=FULL_SLOTS,
            max_items=FULL_ITEMS,
        )  # fmt: skip
        assert report.compacted_items == FULL_ITEMS - 1
        runs.append(report.seconds)
        (tmp_path / f"full.compacted{i}").unlink()
    full.path.unlink()
    spark_rate = (FULL_ITEMS - 1) / min(runs)
    lines += [
        (
            f"  Spark local[2], 20M {min(runs):8.1f} s = {spark_rate / 1e6:.2f} M items/s  (runs: "
            f"{', '.join(f'{r:.1f}' for r in runs)} s; {report.partitions} parts)"
        ),
        (
            f"  Spark local[2], 1M  {min(small_runs):8.2f} s = {n / min(small_runs) / 1e6:.2f} M "
            f"items/s  (runs: {', '.join(f'{r:.2f}' for r in small_runs)} s; job overhead)"
        ),
        (
            f"  numpy, 1M items     {statistics.median(numpy_runs):8.2f} s = "
            f"{numpy_rate / 1e6:.2f} M items/s  (median of 3, one process)"
        ),
        (
            f"  Python loop, 1M     {python_seconds:8.2f} s = {python_rate / 1e6:.2f} M items/s"
            "  (upstream's walk, ported)"
        ),
        f"  ratio numpy/Python  {numpy_rate / python_rate:8.1f}  (same file, same bytes out)",
        (
            f"  ratio Spark(20M)/numpy(1M) items/s {spark_rate / numpy_rate:.2f};"
            f"  Spark(20M)/Python(1M) {spark_rate / python_rate:.2f}"
        ),
    ]

    # --- key queries over 10 uploaded files -----------------------------------------------------
    provider = PosixProvider(tmp_path / "tier")
    files = []
    for i in range(QUERY_FILES):
        local = _fill(tmp_path / "q", T0 + i * 10**7, SMALL_SLOTS, SMALL_ITEMS, seed=100 + i)
        view = local.buffer()
        body = compact_numpy(view, SMALL_SLOTS)
        view.release()
        local.close()
        local.path.unlink()
        key = f"c/b/rmq_sys_INDEX/0/INDEX/{i:020d}"
        provider.put(key, body)
        files.append(
            CompactedIndexFile(
                provider, key, size=len(body), begin_timestamp=T0 + i * 10**7, slots=SMALL_SLOTS
            )
        )
    requests: list[str] = []
    provider.add_request_listener(requests.append)
    latencies = []
    for k in range(QUERY_KEYS):
        started = time.perf_counter()
        for uploaded in files:
            uploaded.query(KeyQuery("TopicTest", f"missing-or-not-{k}", 0, 2**62, 32))
        latencies.append(time.perf_counter() - started)
    per_file = len(requests) / (QUERY_KEYS * QUERY_FILES)
    p50 = statistics.median(latencies) * 1e3
    p99 = sorted(latencies)[int(len(latencies) * 0.99) - 1] * 1e3
    lines.append(
        f"  query, 10 files     {p50:8.2f} ms median, {p99:.2f} ms p99 per key "
        f"({per_file:.2f} reads per file; posix provider, page cache warm)"
    )
    print("\n".join(lines))
