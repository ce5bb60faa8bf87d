"""Compaction through the PySpark job on a real local Spark session: in-process from the index
service, and on a "cluster" through staging -- the job run by ``spark-submit`` with the exact
command line ``compact-index --stage`` prints, its results picked up by the sidecar."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tiered.jobs.compact_index import main as job_main
from tiered.providers import build_provider

from tiered.core.sidecar import Sidecar
from tiered.index import compact_numpy
from tiered.index.compaction import Compactor
from tiered.index.service import IndexService
from tiered.index.staging import COMPACTED_DIR
from tiered.index.staging import STAGING_DIR
from tiered.index.staging import submit_command
from tiered.testing.index_keys import IndexCase
from tiered.testing.index_keys import assert_all_found

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def staging_objects(index: IndexService) -> list[str]:
    root = index.staging.root
    return [
        *index.provider.list(f"{root}/{STAGING_DIR}/"),
        *index.provider.list(f"{root}/{COMPACTED_DIR}/"),
    ]


def test_in_process_spark_compaction_uploads_the_walk_bytes(
    spark: SparkSession, index_case: IndexCase
) -> None:
    cfg = index_case.config(
        provider="posix",
        tieredIndexSparkMaster="local[2]",
        tieredStoreIndexFileMaxIndexNum="1500",
    )
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        index = sidecar.index
        assert index is not None
        sidecar.dispatcher.run_pass(flush=True)
        assert index.seal() is not None  # the UNSEALED file too: two files
        index.compactor = Compactor(spark_master="local[2]", engine="spark")
        walk = {}
        for f in index.local.sealed():
            view = f.buffer()
            walk[f.begin_timestamp] = compact_numpy(view, f.slots)
            view.release()
        results = index.compact_sealed()
        assert {(r.action, r.engine) for r in results} == {("uploaded", "spark")}
        for r in index.uploaded.records():
            key = index.uploaded.key(r.base_offset)
            assert index.provider.read(key, 0, r.size) == walk[r.begin_timestamp]
        assert not list(index.local.compacting_dir.iterdir())
        assert_all_found(index, expected)


@pytest.mark.slow
def test_spark_submit_on_staged_files_is_picked_up(
    spark: SparkSession, tmp_path: Path, index_case: IndexCase
) -> None:
    """``tieredIndexSparkMaster=external``: large files are staged, not compacted; the job runs
    elsewhere (in-process ``--pending`` for one file, ``spark-submit`` for the rest) and the
    next compaction run picks the results up."""
    cfg = index_case.config(provider="posix", tieredIndexSparkMaster="external")
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        index = sidecar.index
        assert index is not None
        sidecar.dispatcher.run_pass(flush=True)
        index.compactor.spark_min_items = 0  # every file counts as large
        sealed = len(index.local.sealed())
        staged = index.compact_sealed()
        assert {r.action for r in staged} == {"staged"} and len(staged) == sealed
        assert index.staging.staged() == [r.begin_timestamp for r in staged]
        assert {r.action for r in index.compact_sealed()} == {"waiting"}
        assert_all_found(index, expected, 5)  # still searched locally meanwhile

        # one file compacted by the job's --pending mode (in this process's Spark session)
        first = staged[0].begin_timestamp
        root = Path(cfg.tiered_store_file_path) / index.staging.root
        keep = [p for p in (root / STAGING_DIR).iterdir() if p.name != str(first)]
        aside = tmp_path / "aside"
        aside.mkdir()
        for p in keep:
            p.rename(aside / p.name)
        assert job_main(["--pending", str(root), "--slots", "97"]) == 0
        for p in keep:
            (aside / p.name).rename(root / STAGING_DIR / p.name)
        picked = index.compact_sealed()
        head = picked[0]
        assert (head.begin_timestamp, head.action, head.engine) == (first, "uploaded", "external")
        assert {r.action for r in picked[1:]} == {"waiting"}

        # the rest by spark-submit, with the command line compact-index --stage prints
        command = submit_command(cfg, master="local[1]")
        assert command is not None
        args = shlex.split(command)
        args[0] = str(Path(sys.executable).parent / "spark-submit")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(
            [*args[:3], "--conf", "spark.ui.enabled=false", *args[3:]],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(done.stdout.strip().splitlines()) == sealed - 1  # one report per file
        picked = index.compact_sealed()
        assert {(r.action, r.engine) for r in picked} == {("uploaded", "external")}
        assert len(index.uploaded.records()) == sealed
        assert staging_objects(index) == []
        assert not list(index.local.compacting_dir.iterdir())
        assert_all_found(index, expected)
