"""Compact one SEALED index file, in-process: numpy for small files, the PySpark job for large.

``auto`` picks numpy below ``spark_min_items`` items (a 1M-item file compacts in well under a
second with one sort, where starting Spark alone takes seconds) and the PySpark job
(``tiered.jobs.compact_index``, on ``local_spark_session(tieredIndexSparkMaster)``) above. Both
produce the same bytes (upstream's walk). Without pyspark installed, large files fall back to
numpy with a warning. Spark writes its output to ``compacting/{begin}``; numpy returns bytes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from tiered import metrics
from tiered.errors import MissingDependencyError
from tiered.index.compacted import compact_numpy
from tiered.index.format import IndexHeader
from tiered.index.index_file import IndexStoreFile

log = logging.getLogger(__name__)

Engine = Literal["auto", "numpy", "spark"]
SPARK_MIN_ITEMS: Final = 1_000_000
"""``auto``: files with at least this many items go through Spark."""


@dataclass(frozen=True)
class Compacted:
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
        view = f.buffer()
        try:
            data = compact_numpy(view, f.slots)
        finally:
            view.release()
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
