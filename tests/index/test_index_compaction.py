"""Compaction against an independent port of upstream's walk (spec §6.5, V6): the single-process
numpy compaction, and the PySpark job on a real local Spark session (in-process, on fsspec and S3
URLs, and through ``spark-submit``)."""

from __future__ import annotations

import ast
import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest
from tiered.providers.testing.servers import S3Endpoint

from tiered.errors import IndexFileError
from tiered.index import IndexBatch
from tiered.index import IndexStoreFile
from tiered.index import compact_numpy
from tiered.index.compaction import compact_file
from tiered.index.compaction import compact_walk

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T0 = 1_700_000_000_000
SealedFactory = Callable[..., tuple[Path, bytes]]
V6_COMPACTED = bytes.fromhex(
    "bcc50285 0000018b cfe56800 0000018b cfe5779f 00000002 00000003 00000044"
    "0000001c 00000060 00000000 00000060 00000000 00000060 00000000 00000060"
    "00000038 0029e6a9 00000007 00000001 00000000 00000064 00000078 00000002"
    "0029e6a8 00000007 00000002 00000000 000000dc 00000082 00000003 0029e6a8"
    "00000007 00000001 00000000 00000000 00000064 00000001".replace(" ", "")
)


def reference_compaction(local: bytes, slots: int) -> bytes:
    """A direct port of upstream ``IndexStoreFile.compactToNewFile`` (a ByteBuffer walk)."""
    count = struct.unpack_from(">i", local, 24)[0]
    write = 28 + slots * 8
    capacity = write + 28 * count
    out = bytearray(capacity)
    position = 0  # the ByteBuffer position; flip() makes it the length
    for i in range(slots):
        slot_position = 28 + i * 8
        value = max(struct.unpack_from(">i", local, slot_position)[0], 0)
        begin = write
        while value > 0 and write < capacity:
            item = 28 + slots * 8 + value * 32
            payload = local[item : item + 32]
            if len(payload) < 32:
                raise IndexError("BufferUnderflowException")
            out[write : write + 28] = payload[:28]
            position = write + 28
            value = struct.unpack_from(">i", payload, 28)[0]
            write += 28
        struct.pack_into(">ii", out, slot_position, begin, write - begin)
    magic = -1127939451  # END_MAGIC_CODE
    struct.pack_into(">i", out, 0, magic)
    out[4:28] = local[4:28]
    return bytes(out[:position])


def local_bytes(f: IndexStoreFile) -> bytes:
    view = f.buffer()
    try:
        return bytes(view)
    finally:
        view.release()


def v6_local(tmp_path: Path) -> IndexStoreFile:
    f = IndexStoreFile.create(tmp_path, T0, slots=5, max_items=20)
    f.put_many(
        IndexBatch.for_queue(
            "TopicTest",
            7,
            1,
            [0, 100],
            [100, 120],
            [T0 + 1500, T0 + 2500],
            [None, None],
            ["k1", "k2"],
        )
    )
    f.put_many(IndexBatch.for_queue("TopicTest", 7, 2, [220], [130], [T0 + 3999], [None], ["k1"]))
    return f


def test_v6_compaction_is_byte_exact(tmp_path: Path) -> None:
    with v6_local(tmp_path) as f:
        data = local_bytes(f)
    assert compact_numpy(data, 5) == V6_COMPACTED
    assert compact_walk(data, 5) == V6_COMPACTED
    assert reference_compaction(data, 5) == V6_COMPACTED


@pytest.mark.parametrize(
    ("items", "slots", "max_items"),
    [
        (2000, 50, 2001),  # collisions everywhere, and a full file (max_items - 1 items)
        (3000, 1, 4000),  # one full slot holding everything
        (40, 1000, 100),  # mostly empty slots
        (1, 7, 2),  # the smallest full file
        (5000, 4096, 6000),  # a power-of-two slot count
    ],
)
def test_numpy_compaction_equals_the_reference(
    sealed_file: SealedFactory, items: int, slots: int, max_items: int
) -> None:
    _, data = sealed_file(items, slots, max_items)
    expected = reference_compaction(data, slots)
    assert len(expected) == 28 + slots * 8 + 28 * items
    assert compact_numpy(data, slots) == expected
    assert compact_walk(data, slots) == expected


def test_min_value_items_are_counted_but_not_compacted(tmp_path: Path) -> None:
    with IndexStoreFile.create(tmp_path, T0, slots=5, max_items=20) as f:
        f.put_many(
            IndexBatch.for_queue(
                "TopicTest",
                1,
                0,
                [0, 10, 20],
                [10, 10, 10],
                [T0, T0, T0],
                [None] * 3,
                ["a", "ogaQmc", "b"],
            )
        )
        data = local_bytes(f)
    assert struct.unpack_from(">i", data, 24)[0] == 3
    expected = reference_compaction(data, 5)
    assert len(expected) == 28 + 5 * 8 + 2 * 28
    assert compact_numpy(data, 5) == expected


def test_empty_and_unreachable_only_files_compact_to_zero_bytes(tmp_path: Path) -> None:
    with IndexStoreFile.create(tmp_path / "a", T0, slots=5, max_items=20) as f:
        assert compact_file(f) == b""
    with IndexStoreFile.create(tmp_path / "b", T0, slots=5, max_items=20) as f:
        f.put_many(IndexBatch.for_queue("TopicTest", 1, 0, [0], [1], [T0], [None], ["ogaQmc"]))
        assert f.item_count == 1
        assert compact_file(f) == b"" == reference_compaction(local_bytes(f), 5)


def corrupt(data: bytes, slots: int, edits: dict[tuple[str, int], int]) -> bytes:
    """Overwrite slot heads (``("slot", i)``) and item next fields (``("next", n)``)."""
    out = bytearray(data)
    for (kind, n), value in edits.items():
        at = 28 + n * 8 if kind == "slot" else 28 + slots * 8 + n * 32 + 28
        struct.pack_into(">i", out, at, value)
    return bytes(out)


@pytest.mark.parametrize(
    "edits",
    [
        {("next", 50): 3},  # a shortcut: items skipped, later ones reachable twice
        {("next", 40): 40},  # a loop, cut by the output's capacity
        {("slot", 3): 250},  # a head past the item count (reads a zero item)
        {("slot", 0): 0, ("slot", 1): -5},  # chains dropped
        {("next", 7): 90, ("next", 90): 7},  # a two-item cycle
    ],
)
def test_chains_that_do_not_follow_slots_are_walked_exactly(
    sealed_file: SealedFactory, edits: dict[tuple[str, int], int]
) -> None:
    _, data = sealed_file(200, 7, 300)
    bad = corrupt(data, 7, edits)
    assert compact_numpy(bad, 7) == reference_compaction(bad, 7)


def test_a_chain_leaving_the_file_is_an_error(sealed_file: SealedFactory) -> None:
    _, data = sealed_file(20, 3, 30)
    bad = corrupt(data, 3, {("slot", 1): 31})
    with pytest.raises(IndexError):
        reference_compaction(bad, 3)
    with pytest.raises(IndexFileError, match="outside the file"):
        compact_numpy(bad, 3)
    with pytest.raises(IndexFileError, match="cannot hold"):
        compact_numpy(data[:200], 3)


# --- the PySpark job -----------------------------------------------------------------------------

JOB_FILE = Path(__file__).resolve().parents[2] / "jobs" / "compact_index.py"


def test_job_constants_are_the_format() -> None:
    from tiered.jobs import compact_index as job

    from tiered.index import format as fmt

    for name in ("HEADER_SIZE", "SLOT_SIZE", "ITEM_SIZE", "COMPACT_ITEM_SIZE", "DEFAULT_SLOTS"):
        assert getattr(job, name) == getattr(fmt, name)
    assert (job.BEGIN_MAGIC_CODE, job.END_MAGIC_CODE) == (fmt.BEGIN_MAGIC_CODE, fmt.END_MAGIC_CODE)


def test_job_file_imports_only_what_executors_have() -> None:
    tree = ast.parse(JOB_FILE.read_text())
    allowed = {
        "__future__",
        "argparse",
        "functools",
        "json",
        "math",
        "os",
        "shutil",
        "struct",
        "sys",
        "time",
        "collections",
        "dataclasses",
        "typing",
        "numpy",
        "pyarrow",
        "pyspark",
        "fsspec",
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
            )
            for name in names:
                assert name.split(".")[0] in allowed | {"tiered"}, name
    tiered_users = [
        f.name
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef)
        and any(
            isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tiered")
            for n in ast.walk(f)
        )
    ]
    assert tiered_users == ["_index_error"]  # the driver only, and only when installed


def spark_compact(spark: SparkSession, source: Path | str, target: Path | str, **kw: Any) -> bytes:
    from tiered.jobs.compact_index import compact_index_file

    report = compact_index_file(spark, str(source), str(target), **kw)
    data = Path(str(target).removeprefix("file://")).read_bytes()
    assert report.output_bytes == len(data)
    assert report.partitions == max(1, -(-report.items // kw.get("items_per_task", 2_000_000)))
    assert not Path(f"{str(target).removeprefix('file://')}.parts").exists()
    return data


@pytest.mark.spark
@pytest.mark.parametrize(
    ("items", "slots", "max_items", "per_task"),
    [
        (2000, 50, 2001, 300),  # collisions, a full file, 7 parts
        (3000, 1, 3001, 1000),  # one slot holding everything: a single non-empty part
        (3, 1000, 10, 1),  # 3 parts over 1000 slots, most of them empty, maybe a whole part
        (20000, 100_000, 30000, 2500),  # 8 parts, mostly empty slots
    ],
)
def test_spark_job_is_byte_identical_to_the_reference(
    spark: SparkSession,
    sealed_file: SealedFactory,
    tmp_path: Path,
    items: int,
    slots: int,
    max_items: int,
    per_task: int,
) -> None:
    path, data = sealed_file(items, slots, max_items, seed=items)
    out = spark_compact(
        spark, path, tmp_path / "out", slots=slots, max_items=max_items, items_per_task=per_task
    )
    assert out == reference_compaction(data, slots)


@pytest.mark.spark
def test_spark_job_v6_min_value_and_empty_files(spark: SparkSession, tmp_path: Path) -> None:
    with v6_local(tmp_path / "v6") as f:
        path = f.path
    assert spark_compact(spark, path, tmp_path / "v6.out", slots=5, items_per_task=1) == (
        V6_COMPACTED
    )
    with IndexStoreFile.create(tmp_path / "min", T0, slots=5, max_items=20) as f:
        f.put_many(
            IndexBatch.for_queue(
                "TopicTest",
                1,
                0,
                [0, 1, 2],
                [1, 1, 1],
                [T0, T0, T0],
                [None] * 3,
                ["a", "ogaQmc", "b"],
            )
        )
        data, path = local_bytes(f), f.path
    assert spark_compact(spark, path, tmp_path / "min.out", slots=5, items_per_task=1) == (
        reference_compaction(data, 5)
    )
    with IndexStoreFile.create(tmp_path / "empty", T0, slots=5, max_items=20) as f:
        path = f.path
    assert spark_compact(spark, path, tmp_path / "empty.out", slots=5) == b""


@pytest.mark.spark
def test_spark_job_reads_and_writes_fsspec_urls(
    spark: SparkSession, sealed_file: SealedFactory, tmp_path: Path
) -> None:
    path, data = sealed_file(5000, 64, 6000)
    target = f"file://{tmp_path}/url-out/compacted"
    (tmp_path / "url-out").mkdir()
    out = spark_compact(spark, f"file://{path}", target, slots=64, items_per_task=900)
    assert out == reference_compaction(data, 64)


@pytest.mark.spark
def test_spark_job_refuses_chains_that_do_not_follow_slots(
    spark: SparkSession, sealed_file: SealedFactory, tmp_path: Path
) -> None:
    from tiered.jobs.compact_index import compact_index_file

    path, data = sealed_file(500, 7, 600)
    path.write_bytes(corrupt(data, 7, {("next", 50): 3}))
    with pytest.raises(IndexFileError, match=r"chains do not follow its hash slots \(1 bad link"):
        compact_index_file(spark, str(path), str(tmp_path / "out"), slots=7, items_per_task=100)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.parts").exists()
    path.write_bytes(corrupt(data, 7, {("slot", 2): 0}))
    with pytest.raises(IndexFileError, match="1 bad slot heads"):
        compact_index_file(spark, str(path), str(tmp_path / "out"), slots=7, items_per_task=100)
    with pytest.raises(IndexFileError, match="pass the values the file was written with"):
        compact_index_file(spark, str(path), str(tmp_path / "out"), slots=7, max_items=601)
    path.write_bytes(bytes(len(data)))
    with pytest.raises(IndexFileError, match="not a tiered index file header"):
        compact_index_file(spark, str(path), str(tmp_path / "out"), slots=7)


@pytest.mark.spark
def test_spark_job_main_prints_one_report_per_file(
    spark: SparkSession,
    sealed_file: SealedFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tiered.jobs.compact_index import main

    path, data = sealed_file(100, 13, 200)
    a, b = tmp_path / "a.out", tmp_path / "b.out"
    argv = ["--input", str(path), "--output", str(a), "--input", str(path), "--output", str(b)]
    assert main([*argv, "--slots", "13", "--max-items", "200", "--items-per-task", "40"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["compacted_items"] for r in reports] == [100, 100]
    assert a.read_bytes() == b.read_bytes() == reference_compaction(data, 13)
    with pytest.raises(SystemExit):
        main(["--input", str(path)])


@pytest.mark.spark
@pytest.mark.s3
def test_spark_job_on_s3_urls(
    spark: SparkSession, sealed_file: SealedFactory, moto_s3: S3Endpoint
) -> None:
    from tiered.jobs.compact_index import compact_index_file

    options = moto_s3.options().s3fs_storage_options()
    s3 = moto_s3.client()
    bucket = moto_s3.new_bucket()
    _, data = sealed_file(3000, 40, 4000)
    s3.put_object(Bucket=bucket, Key="staging/1700000000000", Body=data)
    report = compact_index_file(
        spark,
        f"s3://{bucket}/staging/1700000000000",
        f"s3://{bucket}/compacted/1700000000000",
        slots=40,
        max_items=4000,
        storage_options=options,
        items_per_task=700,
    )
    body = s3.get_object(Bucket=bucket, Key="compacted/1700000000000")["Body"].read()
    assert body == reference_compaction(data, 40)
    assert report.output_bytes == len(body)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="compacted/")["Contents"]
    assert [o["Key"] for o in listed] == ["compacted/1700000000000"]  # parts removed


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_runs_the_job_file(sealed_file: SealedFactory, tmp_path: Path) -> None:
    path, data = sealed_file(2000, 17, 3000)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYTHONPATH", None)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(JOB_FILE),
            "--input",
            str(path),
            "--output",
            str(tmp_path / "out"),
            "--slots",
            "17",
            "--items-per-task",
            "500",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["partitions"] == 4 and report["compacted_items"] == 2000
    assert (tmp_path / "out").read_bytes() == reference_compaction(data, 17)
