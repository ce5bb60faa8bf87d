"""Index compaction on a real Spark standalone cluster (a master and one worker started from the
``pyspark`` package on 127.0.0.1, one core each): SEALED files staged in an S3 bucket (moto), the
exact ``spark-submit`` line ``compact-index --stage`` prints run against ``spark://…`` with the
endpoint in ``--storage-options``, then picked up by the sidecar -- the uploaded INDEX segments are
byte-identical to the sidecar's own (numpy) compaction of the same files, and every key is found.
And ``tieredIndexSparkMaster=spark://…`` (a driver in ``rmq-tiered compact-index``, executors on
the cluster, sharing ``tieredDataDir`` as on one host)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tiered.providers import build_provider

from tiered.core.sidecar import Sidecar
from tiered.index import compact_numpy
from tiered.index.staging import submit_command
from tiered.testing.index_keys import IndexCase
from tiered.testing.index_keys import assert_all_found
from tiered.testing.spark_cluster import spark_env

BIN = Path(sys.executable).parent
RMQ_TIERED = BIN / "rmq-tiered"
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_spark_submit_on_a_standalone_cluster_is_picked_up_byte_identical(
    spark_cluster: str, tmp_path: Path, index_case: IndexCase, s3_keys: dict[str, str]
) -> None:
    cfg = index_case.config(provider="s3", tieredIndexSparkMaster="external", **s3_keys)
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        index = sidecar.index
        assert index is not None
        sidecar.dispatcher.run_pass(flush=True)
        index.compactor.spark_min_items = 0  # every file goes to the cluster
        sealed = index.local.sealed()
        want = {}
        for f in sealed:  # what the sidecar's own compaction makes of each file
            view = f.buffer()
            want[f.begin_timestamp] = bytes(compact_numpy(view, f.slots))
            view.release()
        assert {r.action for r in index.compact_sealed()} == {"staged"}

        command = submit_command(cfg, master=spark_cluster)
        assert command is not None and "--storage-options" in command
        args = shlex.split(command)
        args[0] = str(BIN / "spark-submit")
        # credentials from the environment: the driver's, and the executors' (spark.executorEnv)
        aws = {"AWS_ACCESS_KEY_ID": s3_keys["objectStoreAccessKey"],
               "AWS_SECRET_ACCESS_KEY": s3_keys["objectStoreSecretKey"],
               "AWS_DEFAULT_REGION": s3_keys["objectStoreRegion"]}  # fmt: skip
        env = {**spark_env(), **aws}
        executor_env = [a for k, v in aws.items() for a in ("--conf", f"spark.executorEnv.{k}={v}")]
        done = subprocess.run(
            [*args[:3], "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.cores=1",
             "--conf", "spark.executor.memory=512m", *executor_env, *args[3:]],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        picked = index.compact_sealed()
        assert {(r.action, r.engine) for r in picked} == {("uploaded", "external")}
        records = {r.begin_timestamp: r for r in index.uploaded.records()}
        assert set(records) == set(want)
        for begin, data in want.items():
            r = records[begin]
            got = index.provider.read(index.uploaded.key(r.base_offset), 0, r.size)
            assert got == data, f"index file {begin}: the cluster's bytes differ"
        assert_all_found(index, expected, 3)


def test_an_in_process_driver_with_cluster_executors(
    spark_cluster: str, tmp_path: Path, index_case: IndexCase
) -> None:
    cfg = index_case.config(provider="posix", tieredIndexSparkMaster=spark_cluster)
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        assert sidecar.index is not None
        sealed = len(sidecar.index.local.sealed())
    assert sealed > 0
    conf = tmp_path / "sidecar.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items() if v != ""))
    done = subprocess.run(
        [RMQ_TIERED, "compact-index", "--config", conf, "--engine", "spark", "--json"],
        env=spark_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count('"spark"') >= 1, done.stdout
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        index = sidecar.index
        assert index is not None
        assert len(index.uploaded.records()) == sealed and not index.local.sealed()
        assert_all_found(index, expected, 3)
