"""Planning and reading the tier table without Spark, over real offloaded tiers (posix, moto S3):
every field of every message equals ``fetch``; each pushed bound returns the rows the same
filter keeps from a full scan, from fewer objects; a key lookup answered by the uploaded key index
reads at most 3 objects; damage fails naming object and offset, or is skipped and counted; bad
options are named with their fix."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiered.jobs import tier_read as tr
from tiered.jobs import tier_scan as ts

from tiered.errors import ConfigError
from tiered.errors import IntegrityError
from tiered.errors import MetadataError
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sql_tier import SqlTier
from tiered.testing.sql_tier import TierCopy
from tiered.testing.sql_tier import as_fetch_json
from tiered.testing.sql_tier import damageable
from tiered.testing.sql_tier import flip_body_byte

Row = dict[str, Any]


def scan(
    tier: SqlTier, bounds: ts.Bounds | None = None, *, columns: list[str] | None = None, **opts: str
) -> tuple[list[Row], tr.ReadStats, int]:
    """Every row of the plan, what the readers read, and how many partitions it had."""
    sources = ts.load_sources(tier.options | opts)
    parts = ts.plan(sources, bounds or ts.Bounds.from_options(opts))
    rows: list[Row] = []
    total = tr.ReadStats()
    for part in parts:
        with sources[part.queue.source].provider() as provider:
            reader = tr.PartitionReader(
                provider, columns or ts.ALL_COLUMNS, on_corrupt=opts.get("onCorrupt", "fail")
            )
            for batch in reader.read(part):
                rows += batch.to_pylist()
            st = reader.stats
            total.reads += st.reads
            total.bytes += st.bytes
            total.objects |= st.objects
            total.requests += st.requests
            total.messages += st.messages
            total.skipped += st.skipped
    return rows, total, len(parts)


def ident(row: Row) -> tuple[str, int, int]:
    return (row["topic"], row["queueId"], row["queueOffset"])


@pytest.fixture(scope="module")
def full(posix_tier: SqlTier) -> tuple[list[Row], tr.ReadStats]:
    rows, stats, _ = scan(posix_tier)
    return rows, stats


def test_every_field_equals_fetch_on_posix(posix_tier: SqlTier, full: Any) -> None:
    rows, stats = full
    assert len(rows) == len(posix_tier.fetched) == len({ident(r) for r in rows})
    keys = posix_tier.fetched
    for row in rows:
        want = keys[ident(row)]
        assert as_fetch_json(row) == {k: want[k] for k in as_fetch_json(row)}, ident(row)
    assert {r["broker"] for r in rows} == {"broker-a"}
    assert stats.skipped == 0 and stats.messages == len(rows)


@pytest.mark.s3
def test_every_field_equals_fetch_on_s3(s3_tier: SqlTier) -> None:
    rows, stats, parts = scan(s3_tier)
    assert len(rows) == len(s3_tier.fetched)
    for row in rows:
        want = s3_tier.fetched[ident(row)]
        assert as_fetch_json(row) == {k: want[k] for k in as_fetch_json(row)}, ident(row)
    assert stats.requests >= stats.reads >= parts


def _times(rows: list[Row]) -> list[int]:
    return sorted(int(r["storeTimestamp"].timestamp() * 1000 + 0.5) for r in rows)


def _pushdowns(rows: list[Row]) -> list[tuple[str, ts.Bounds, Any]]:
    times = _times(rows)
    lo, hi = times[len(times) // 3], times[len(times) // 3 + len(times) // 10]
    uniq = sorted(r["uniqKey"] for r in rows)[17]
    return [
        ("topic", ts.Bounds(topics=frozenset({"GenTopic1"})), lambda r: r["topic"] == "GenTopic1"),
        ("queueId", ts.Bounds(queue_ids=frozenset({0, 2})), lambda r: r["queueId"] in (0, 2)),
        ("broker", ts.Bounds(brokers=frozenset({"broker-x"})), lambda r: False),
        (
            "queueOffset",
            ts.Bounds(topics=frozenset({"GenTopic0"}), queue_ids=frozenset({1}), q_lo=40, q_hi=90),
            lambda r: ident(r)[:2] == ("GenTopic0", 1) and 40 <= r["queueOffset"] < 90,
        ),
        (
            "storeTimestamp",
            ts.Bounds(t_lo=lo, t_hi=hi),
            lambda r: lo <= int(r["storeTimestamp"].timestamp() * 1000 + 0.5) < hi,
        ),
        ("uniqKey", ts.Bounds(uniq_keys=frozenset({uniq})), lambda r: r["uniqKey"] == uniq),
    ]


@pytest.mark.parametrize("case", range(6))
def test_each_pushdown_keeps_what_a_full_scan_keeps_and_reads_less(
    posix_tier: SqlTier, full: Any, case: int
) -> None:
    rows, stats = full
    name, bounds, keep = _pushdowns(rows)[case]
    got, got_stats, _ = scan(posix_tier, bounds)
    assert sorted(map(ident, got)) == sorted(ident(r) for r in rows if keep(r)), name
    assert got_stats.bytes < stats.bytes, name
    assert len(got_stats.objects) < len(stats.objects), name
    if name == "storeTimestamp":  # a tenth of the data: the segments it clips are searched
        assert got_stats.bytes < 0.5 * stats.bytes, (got_stats.bytes, stats.bytes)


def test_a_key_lookup_reads_the_index_and_the_message_objects_only(
    posix_tier: SqlTier, full: Any
) -> None:
    rows, _ = full
    row = rows[len(rows) // 2]
    for key in [row["uniqKey"], *row["keys"]]:
        got, stats, parts = scan(posix_tier, key=key)
        assert ident(row) in {ident(r) for r in got}, key
        assert all(key == r["uniqKey"] or key in r["keys"] for r in got)
        assert {ident(r) for r in got} == {
            ident(r) for r in rows if key == r["uniqKey"] or key in r["keys"]
        }
        kinds = sorted(o.split("/")[-2] for o in stats.objects)
        assert len(stats.objects) <= 3 and kinds.count("COMMIT_LOG") >= 1, stats.objects
        assert "CONSUME_QUEUE" not in kinds  # no scan: the index covers every queue
        assert parts == 1


def test_an_uncovered_queue_tail_is_scanned_for_the_key(posix_copy: TierCopy, full: Any) -> None:
    tier = posix_copy()
    rows, _ = full
    row = max(rows, key=lambda r: (r["topic"], r["queueId"], r["queueOffset"]))
    # the index's progress copy says nothing of this queue past offset 0: the queue is scanned
    progress = next(Path(tier.cfg.tiered_store_file_path).rglob("tieredIndexProgress.json"))
    doc = json.loads(progress.read_text())
    for entry in doc["queues"]:
        if (entry[0], entry[1]) == (row["topic"], row["queueId"]):
            entry[2] = 0
    progress.write_text(json.dumps(doc))
    got, stats, _ = scan(tier, key=row["uniqKey"])
    assert [ident(r) for r in got] == [ident(row)]
    assert any("CONSUME_QUEUE" in o for o in stats.objects)


def test_a_damaged_message_fails_naming_object_and_offset_or_is_skipped(
    posix_copy: TierCopy, full: Any
) -> None:
    tier = posix_copy()
    rows, _ = full
    row = damageable(rows)
    key, flat = flip_body_byte(tier, row)
    with pytest.raises(IntegrityError) as err:
        scan(tier, topic=row["topic"], queueId=str(row["queueId"]))
    assert key in str(err.value) and f"flat offset {flat}" in str(err.value)
    assert f"queue offset {row['queueOffset']} at flat offset {flat}: body CRC mismatch" in str(
        err.value
    )
    assert err.value.key == key and err.value.offset == flat
    got, stats, _ = scan(tier, topic=row["topic"], queueId=str(row["queueId"]), onCorrupt="skip")
    assert stats.skipped == 1
    want = {ident(r) for r in rows if ident(r)[:2] == ident(row)[:2]} - {ident(row)}
    assert {ident(r) for r in got} == want


def test_every_broker_under_the_cluster(posix_copy: TierCopy, full: Any, tmp_path: Path) -> None:
    tier = posix_copy()
    other = build_sample_tier(
        tmp_path / "b", rolling_spec(seed=9, topics=1, queues=2, messages=300), "posix",
        brokerName="broker-b", tieredStoreFilePath=tier.cfg.tiered_store_file_path,
    )  # fmt: skip
    other.sidecar.close()
    got, _, _ = scan(tier, brokers="*")
    counts = Counter(r["broker"] for r in got)
    assert counts == {"broker-a": len(full[0]), "broker-b": 300}
    only_b, _, _ = scan(tier, brokers="broker-b")
    assert {r["broker"] for r in only_b} == {"broker-b"} and len(only_b) == 300
    pruned, stats, _ = scan(tier, ts.Bounds(brokers=frozenset({"broker-b"})), brokers="*")
    assert len(pruned) == 300 and all("/broker-b/" in o for o in stats.objects)


def test_a_schema_subset_builds_only_those_columns(posix_tier: SqlTier) -> None:
    rows, _, _ = scan(posix_tier, columns=["tags", "queueOffset"], topic="GenTopic2")
    assert rows and set(rows[0]) == {"tags", "queueOffset"}


def test_bad_options_are_named_with_their_fix(posix_tier: SqlTier, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="since"):
        ts.Bounds.from_options({"since": "last tuesday"})
    with pytest.raises(ConfigError, match="queueId"):
        ts.Bounds.from_options({"queueId": "1,x"})
    with pytest.raises(
        ConfigError,
        match=r"option: unknown key 'tieredstorefilepth' \(did you mean 'tieredStoreFilePath'",
    ):
        ts.load_sources(posix_tier.options | {"tieredStoreFilePth": "/x"})
    with pytest.raises(MetadataError, match=r"broker 'broker-z'.*option metadata="):
        ts.load_sources(posix_tier.options | {"brokers": "broker-z"})
    with pytest.raises(ConfigError, match="onCorrupt='x': give fail or skip"):
        scan(posix_tier, topic="GenTopic0", onCorrupt="x")
    meta = tmp_path / "m.json"
    meta.write_text("{not json")
    with pytest.raises(MetadataError):
        ts.load_sources(posix_tier.options | {"metadata": str(meta)})
    assert ts.parse_time("2026-03-01", "since") == 1_772_323_200_000
    assert ts.parse_time("1772323200000", "since") == 1_772_323_200_000
    assert ts.parse_time("2026-03-01T01:00:00+01:00", "since") == 1_772_323_200_000


def test_a_local_metadata_file_plans_like_the_mirror(posix_tier: SqlTier, full: Any) -> None:
    meta = next(Path(posix_tier.cfg.tiered_store_file_path).rglob("tieredStoreMetadata.json"))
    got, _, _ = scan(posix_tier, metadata=str(meta), topic="GenTopic0")
    assert sorted(map(ident, got)) == sorted(ident(r) for r in full[0] if r["topic"] == "GenTopic0")
    assert np.all(np.diff([r["queueOffset"] for r in got if r["queueId"] == 0]) == 1)


def test_backend_keys_as_options_instead_of_a_file(posix_tier: SqlTier, full: Any) -> None:
    cfg = posix_tier.cfg
    options = {
        "tieredbackendserviceprovider": "posix",  # Spark hands options over lower-cased
        "tieredStoreFilePath": cfg.tiered_store_file_path,
        "brokerClusterName": cfg.broker_cluster_name,
        "brokerName": cfg.broker_name,
        "tieredStoreIndexFileMaxHashSlotNum": str(cfg.tiered_store_index_file_max_hash_slot_num),
    }
    sources = ts.load_sources(options)
    assert [(s.cluster, s.broker) for s in sources] == [("DefaultCluster", "broker-a")]
    parts = ts.plan(sources, ts.Bounds(topics=frozenset({"GenTopic1"})))
    rows = []
    with sources[0].provider() as provider:
        for part in parts:
            for batch in tr.PartitionReader(provider, ["topic", "queueOffset"]).read(part):
                rows += batch.to_pylist()
    assert len(rows) == sum(1 for r in full[0] if r["topic"] == "GenTopic1")
