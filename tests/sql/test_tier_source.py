"""``rocketmq_tiered`` through real Spark: the local session of the run reads the posix tier with
the same rows ``fetch`` returns; filters Spark pushes down return the rows Spark keeps without
pushdown, from fewer objects (also with a session time zone other than UTC); a schema subset;
``rmq-tiered export`` writes Parquet that Spark reads back with the same rows; and the real
standalone cluster of the run scans the moto S3 tier."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest
from tiered.jobs.tier_source import TierSource
from tiered.providers.testing.servers import S3Endpoint

from tiered.errors import ConfigError
from tiered.testing.spark_cluster import spark_env
from tiered.testing.sql_tier import SqlTier
from tiered.testing.sql_tier import TierCopy
from tiered.testing.sql_tier import as_fetch_json
from tiered.testing.sql_tier import damageable
from tiered.testing.sql_tier import flip_body_byte

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


@pytest.fixture(scope="module")
def tiered_spark(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(TierSource)
    return spark


def table(spark: SparkSession, tier: SqlTier, **options: str) -> DataFrame:
    return spark.read.format("rocketmq_tiered").options(**tier.options, **options).load()


def ident(row: dict[str, Any]) -> tuple[str, int, int]:
    return (row["topic"], row["queueId"], row["queueOffset"])


def objects_read(stats: Path) -> tuple[set[str], int]:
    tasks = [json.loads(p.read_text()) for p in stats.glob("*.json")]
    return {o for t in tasks for o in t["objects"]}, sum(t["bytes"] for t in tasks)


def test_every_message_as_fetch_returns_it(tiered_spark: SparkSession, posix_tier: SqlTier) -> None:
    rows = [r.asDict(recursive=True) for r in table(tiered_spark, posix_tier).collect()]
    assert len(rows) == len(posix_tier.fetched) == len({ident(r) for r in rows})
    for row in rows:
        row["properties"] = list(row["properties"].items())
        want = posix_tier.fetched[ident(row)]
        got = as_fetch_json(row)
        assert got == {k: want[k] for k in got}, ident(row)


@pytest.fixture
def session_zone(tiered_spark: SparkSession, request: pytest.FixtureRequest) -> Iterator[str]:
    zone: str = request.param
    before = tiered_spark.conf.get("spark.sql.session.timeZone")
    tiered_spark.conf.set("spark.sql.session.timeZone", zone)
    yield zone
    tiered_spark.conf.set("spark.sql.session.timeZone", before or "UTC")


WHERE = [
    "topic = 'GenTopic1'",
    "queueId IN (0, 2) AND topic <> 'GenTopic0'",
    "topic = 'GenTopic2' AND queueId = 1 AND queueOffset >= 30 AND queueOffset < 75",
    "storeTimestamp >= timestamp_millis({lo}) AND storeTimestamp < timestamp_millis({hi})",
    "storeTimestamp > timestamp_millis({lo}) AND storeTimestamp <= timestamp_millis({hi})",
    "uniqKey = '{uniq}'",
    "broker = 'broker-a' AND cluster = 'DefaultCluster' AND queueOffset = 5",
]


CASES = [(w, "UTC") for w in WHERE] + [
    (w, "Asia/Shanghai")
    for w in WHERE
    if "storeTimestamp" in w  # the zone matters to these
]


@pytest.mark.parametrize(("where", "session_zone"), CASES, indirect=["session_zone"])
def test_pushed_filters_keep_what_spark_keeps_and_read_less(
    tiered_spark: SparkSession, posix_tier: SqlTier, where: str, session_zone: str, tmp_path: Path
) -> None:
    times = sorted(v["storeTimestamp"] for v in posix_tier.fetched.values())
    uniq = sorted(v["uniqKey"] for v in posix_tier.fetched.values())[11]
    lo, hi = times[len(times) // 2], times[len(times) // 2 + len(times) // 10]
    sql = where.format(lo=lo, hi=hi, uniq=uniq)
    plain = table(tiered_spark, posix_tier, pushdown="false", statsDir=str(tmp_path / "a"))
    pushed = table(tiered_spark, posix_tier, statsDir=str(tmp_path / "b"))
    cols = ["topic", "queueId", "queueOffset"]
    want = sorted(ident(r.asDict()) for r in plain.where(sql).select(*cols).collect())
    got = sorted(ident(r.asDict()) for r in pushed.where(sql).select(*cols).collect())
    assert got == want and want, sql
    all_objects, all_bytes = objects_read(tmp_path / "a")
    objects, read = objects_read(tmp_path / "b")
    assert len(objects) < len(all_objects) and read < all_bytes, sql


def test_a_schema_subset_and_a_wrong_one(tiered_spark: SparkSession, posix_tier: SqlTier) -> None:
    df = (
        tiered_spark.read.format("rocketmq_tiered")
        .options(**posix_tier.options)
        .schema("tags string, storeTimestamp timestamp, queueOffset bigint")
        .load()
    )
    counts = {r["tags"]: r["count"] for r in df.groupBy("tags").count().collect()}
    want: dict[str | None, int] = {}
    for v in posix_tier.fetched.values():
        want[v["tags"]] = want.get(v["tags"], 0) + 1
    assert counts == want
    wrong = tiered_spark.read.format("rocketmq_tiered").options(**posix_tier.options)
    with pytest.raises(Exception, match="column 'queueOffset' is bigint"):
        wrong.schema("queueOffset string").load().count()
    with pytest.raises(Exception, match="column 'offset' is not a column of rocketmq_tiered"):
        wrong.schema("offset bigint").load().count()


def test_an_option_error_reaches_the_user(tiered_spark: SparkSession, posix_tier: SqlTier) -> None:
    with pytest.raises(Exception, match="since='yesterday' is not a time"):
        table(tiered_spark, posix_tier, since="yesterday").count()
    assert issubclass(ConfigError, ValueError)


def _export(*args: str | Path, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [RMQ_TIERED, "export", *map(str, args), "--json"],
        cwd=cwd, env=spark_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def test_export_writes_parquet_spark_reads_back(
    tiered_spark: SparkSession, posix_tier: SqlTier, tmp_path: Path
) -> None:
    out = tmp_path / "orders"
    summary = _export("--config", posix_tier.conf, "--topic", "GenTopic0", "--where",
                      "tags IS NOT NULL", "--to", out, cwd=tmp_path)  # fmt: skip
    back = tiered_spark.read.parquet(str(out))
    source = table(tiered_spark, posix_tier).where("topic = 'GenTopic0' AND tags IS NOT NULL")
    assert summary["messages"] == back.count() == source.count() > 0
    assert back.schema == source.schema
    rows = sorted((r.asDict(recursive=True) for r in back.collect()), key=ident)
    assert rows == sorted((r.asDict(recursive=True) for r in source.collect()), key=ident)
    assert summary["bytesRead"] > 0 and summary["tasks"] > 0


@pytest.mark.s3
def test_the_standalone_cluster_scans_the_s3_tier(
    spark_cluster: str, s3_tier: SqlTier, tmp_path: Path
) -> None:
    out = tmp_path / "all"
    summary = _export("--config", s3_tier.conf, "--master", spark_cluster, "--format", "json",
                      "--columns", "topic,queueId,queueOffset,msgId,bodyCrc", "--to", out,
                      cwd=tmp_path)  # fmt: skip
    lines = [line for p in sorted(out.glob("part-*.json")) for line in p.read_text().splitlines()]
    rows = [json.loads(line) for line in lines]
    assert summary["messages"] == len(rows) == len(s3_tier.fetched)
    for row in rows:
        want = s3_tier.fetched[ident(row)]
        assert (row["msgId"], row["bodyCrc"]) == (want["msgId"], want["bodyCRC"])


def test_a_damaged_message_fails_the_query_naming_it(
    tiered_spark: SparkSession, posix_copy: TierCopy, tmp_path: Path
) -> None:
    tier = posix_copy()
    rows = [r.asDict(recursive=True) for r in table(tiered_spark, tier).collect()]
    row = damageable(rows)
    key, flat = flip_body_byte(tier, row)
    where = f"topic = '{row['topic']}' AND queueId = {row['queueId']}"
    named = rf"object {re.escape(key)} \(queue offset \d+ at flat offset {flat}: body CRC"
    with pytest.raises(Exception, match=named):
        table(tiered_spark, tier).where(where).count()
    skipped = table(tiered_spark, tier, onCorrupt="skip", statsDir=str(tmp_path / "s"))
    assert (
        skipped.where(where).count() == sum(1 for r in rows if ident(r)[:2] == ident(row)[:2]) - 1
    )
    tasks = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*.json")]
    assert sum(t["skipped"] for t in tasks) == 1


@pytest.mark.s3
def test_export_to_an_s3_url(posix_tier: SqlTier, moto_s3: S3Endpoint, tmp_path: Path) -> None:
    bucket = moto_s3.new_bucket()
    options = {
        "key": moto_s3.access_key,
        "secret": moto_s3.secret_key,
        "client_kwargs": {"endpoint_url": moto_s3.url, "region_name": moto_s3.region},
    }
    summary = _export("--config", posix_tier.conf, "--topic", "GenTopic2", "--format", "json",
                      "--columns", "topic,queueId,queueOffset,msgId", "--to",
                      f"s3://{bucket}/exports/g2", "--storage-options", json.dumps(options),
                      cwd=tmp_path)  # fmt: skip
    client = moto_s3.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys and all(k.startswith("exports/g2/part-") for k in keys), keys
    rows = [
        json.loads(line)
        for k in keys
        for line in client.get_object(Bucket=bucket, Key=k)["Body"].read().decode().splitlines()
    ]
    want = {k for k in posix_tier.fetched if k[0] == "GenTopic2"}
    assert {ident(r) for r in rows} == want and summary["messages"] == len(want)
