"""Benchmark: ``gen-store`` MB/s for 1 KiB bodies, beside a raw sequential write of the same bytes.

Run with ``make bench``. Medians over repetitions; the ratio is what to compare across machines.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store

MESSAGES = 200_000
REPEAT = 3
SPEC = GenSpec(seed=1, topics=4, queues=4, messages=MESSAGES, min_body=1024, max_body=1024,
               commitlog_file_size=256 << 20, keys_per_message=1)  # fmt: skip


def _raw_write(path: Path, nbytes: int) -> float:
    chunk = os.urandom(8 << 20)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[: min(left, len(chunk))])
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def test_generator_mb_per_s(tmp_path: Path) -> None:
    gen, raw = [], []
    nbytes = 0
    for i in range(REPEAT):
        out = tmp_path / f"store{i}"
        report = generate_store(out, SPEC)
        assert report.messages == MESSAGES
        nbytes = report.bytes
        gen.append(report.bytes / 1e6 / report.seconds)
        shutil.rmtree(out)
        seconds = _raw_write(tmp_path / "raw", nbytes)
        raw.append(nbytes / 1e6 / seconds)
        (tmp_path / "raw").unlink()
    g, r = statistics.median(gen), statistics.median(raw)
    print(
        f"\ngen-store, {MESSAGES} messages of 1 KiB ({nbytes / 1e6:.0f} MB), median of {REPEAT}:\n"
        f"  generator          {g:8.1f} MB/s  (runs: {', '.join(f'{x:.0f}' for x in gen)})\n"
        f"  raw os.write       {r:8.1f} MB/s  (same bytes, same disk, no encoding)\n"
        f"  ratio gen/raw      {g / r:8.3f}\n"
        f"  target             >= 100 MB/s: {'met' if g >= 100 else 'NOT met'}"
    )
