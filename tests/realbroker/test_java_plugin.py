"""Taking over a tier that RocketMQ's own in-broker tieredstore plugin (5.3.3) wrote.

A broker runs with ``messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore`` and
the posix backend, small segments and small index files (so they seal and upload), and takes
keyed messages until its dispatcher (every 20 s) has uploaded them all; it is stopped (SIGTERM:
the plugin uploads its last index file) and started again without the plugin. Then the sidecar
adopts the same tier -- with the plugin's own metadata file (written by real fastjson) and, apart,
with none at all (``recover --from-backend``) -- serves every message the plugin uploaded, finds
their keys through the plugin's INDEX files, and carries on offloading the broker's newer
messages into the same tier with no gap and no duplicate at the hand-over.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tiered.jobs import tier_read
from tiered.jobs import tier_scan
from tiered.providers.registry import from_config

from tiered.broker import message as msgcodec
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.errors import TieredStoreError
from tiered.index.service import IndexService
from tiered.metadata import LONG_MAX
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataDocument
from tiered.metadata import parse_metadata
from tiered.metadata import read_metadata
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.replay_check import Key
from tiered.testing.replay_check import Message
from tiered.testing.replay_check import assert_same
from tiered.testing.replay_check import assert_stored_alike
from tiered.testing.replay_check import comparable
from tiered.testing.replay_check import messages
from tiered.testing.replay_check import read_raw
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import tier_messages
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import RMQ_TIERED
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier

TOPIC = "PluginTopic"
QUEUES = 2
FIRST, MORE = 3000, 1000
INDEX_GEOMETRY = {"tieredStoreIndexFileMaxHashSlotNum": 100, "tieredStoreIndexFileMaxIndexNum": 400}


def plugin_keys(tier: Path) -> dict[str, object]:
    return {
        "messageStorePlugIn": "org.apache.rocketmq.tieredstore.TieredMessageStore",
        "tieredBackendServiceProvider": "org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
        "tieredMetadataServiceProvider": (
            "org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore"
        ),
        "tieredStoreFilePath": tier,
        "tieredStorageLevel": "NOT_IN_DISK",
        "tieredStoreGroupCommit": "false",
        "tieredStoreCommitLogMaxSize": 1 << 20,
        "tieredStoreConsumeQueueMaxSize": 20000,
        "tieredStoreFileReservedTime": 100000,
        **INDEX_GEOMETRY,
    }


@dataclass
class Adopted:
    broker: Broker
    cfg: TieredConfig
    conf: Path
    sidecar: Sidecar
    plugin_reference: dict[Key, Message]
    plugin_raw: dict[Key, bytes]
    hand_over: dict[int, int]
    recovered: dict[Key, tuple[int, bytes]]
    key_hits: dict[str, list[str]]
    keyed: dict[str, str]
    """KEYS -> UNIQ_KEY of the keyed messages the plugin uploaded"""
    plugin_segments: dict[str, int]
    rocketmq: Runtime
    plugin_metadata: Path
    """the plugin's own metadata file as it left it (the hand-back later replaces the broker's)"""


def plugin_uploaded(b: Broker, cfg: TieredConfig, ends: dict[int, int]) -> bool:
    """Whether the plugin's metadata (copied out of the broker's store into ``cfg``'s data dir,
    which may not be inside it) records every queue's messages up to ``ends``."""
    source = b.store / "config" / "tieredStoreMetadata.json"
    (cfg.tiered_data_dir / "config").mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy(source, cfg.tiered_data_dir / "config")  # the plugin may be replacing it
        held = tier_messages(cfg, from_config(cfg))
    except (AssertionError, OSError, TieredStoreError):
        return False  # the plugin is between writing a segment and its metadata
    got: dict[int, int] = {}
    for _, qid, off in held:
        got[qid] = max(got.get(qid, 0), off + 1)
    return got == ends


def read_all(rocketmq: Runtime, name_server: str, group: str) -> dict[Key, Message]:
    """Every message of the topic, read by a Java lite consumer of a new group through
    ``name_server`` (the broker's or the sidecar's)."""
    lines = rocketmq.driver(
        "consume", mode="lite", group=group, topics=[TOPIC], maxMs=60_000, namesrv=name_server
    )
    return messages(lines)


def keys_through_index(cfg: TieredConfig, keys: list[str]) -> dict[str, list[str]]:
    """Each key's hits (their UNIQ_KEYs) in the tier's key index as ``cfg``'s metadata lists it:
    before the sidecar ran, that is the plugin's uploaded INDEX files alone."""
    provider = from_config(cfg)
    try:
        with IndexService.reader(cfg, provider) as service:
            return {
                k: [
                    msgcodec.decode(h.data).properties.get("UNIQ_KEY", "")
                    for h in service.query(TOPIC, k, 0, LONG_MAX, 32)
                ]
                for k in keys
            }
    finally:
        provider.close()


def segment_counts(doc: MetadataDocument) -> dict[str, int]:
    return {t.name: sum(len(v) for v in doc.segment_table(t).values()) for t in FileSegmentType}


@pytest.fixture(scope="module")
def adopted(
    rocketmq: Runtime, namesrv: NameServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Adopted]:
    work = tmp_path_factory.mktemp("plugin")
    (work / "broker").mkdir()
    tier = work / "tier"
    b = Broker(rocketmq, "broker", work / "broker", namesrv=namesrv.address,
               conf_keys={"brokerName": "broker-p", **plugin_keys(tier)})  # fmt: skip
    conf = sidecar_conf(work / "sidecar.conf", work, tieredStorageLevel="FORCE", **INDEX_GEOMETRY)
    car = Sidecar(conf, work / "run", broker_conf=b.conf)
    try:
        b.start()
        yield from _adopted(rocketmq, namesrv, b, car, work, conf)
    finally:
        car.stop()
        b.stop()


def _adopted(
    rocketmq: Runtime, namesrv: NameServer, b: Broker, car: Sidecar, work: Path, conf: Path
) -> Iterator[Adopted]:
    # every bulk (re)creates the topic and waits for its route: a restarted broker registers
    # with the name server some seconds after its boot line
    common: dict[str, Any] = {
        "namesrv": namesrv.address, "broker": b.address, "topics": {TOPIC: QUEUES}
    }  # fmt: skip
    rocketmq.driver("bulk", topic=TOPIC, count=FIRST, size=1024, seed=5, keyEvery=10, tag="p",
                    **common)  # fmt: skip
    ref = read_all(rocketmq, namesrv.address, "it-plugin-ref")
    raw = read_raw(b, ref)
    ends: dict[int, int] = {}
    for _, qid, off in ref:
        ends[qid] = max(ends.get(qid, 0), off + 1)
    # the plugin's view: its metadata in the broker's store, its tier
    view = load_config([b.conf, conf], overrides={"tieredDataDir": str(work / "plugin-view")})
    wait_for("the plugin to upload every message", lambda: plugin_uploaded(b, view, ends), 150)
    b.stop()  # SIGTERM: the plugin seals and uploads its last index file
    # the same broker without the plugin; the sidecar takes the tier over
    b.conf.unlink()
    for key in ("messageStorePlugIn", "tieredBackendServiceProvider",
                "tieredMetadataServiceProvider"):  # fmt: skip
        b.conf_keys.pop(key)
    b.start()
    data = work / "data" / "config"
    data.mkdir(parents=True)
    shutil.copy(b.store / "config" / "tieredStoreMetadata.json", data)
    plugin_file = shutil.copy(data / "tieredStoreMetadata.json", work / "plugin-metadata.json")
    cfg = load_config([b.conf, conf])
    # apart: no metadata at all, rebuilt from a listing of the plugin's objects
    bare = sidecar_conf(work / "bare.conf", work, tieredDataDir=work / "bare", **INDEX_GEOMETRY)
    subprocess.run([RMQ_TIERED, "recover", "--from-backend", "-c", b.conf, "-c", bare], check=True)
    recovered = tier_messages(load_config([b.conf, bare]), from_config(cfg))
    by_key = {m["keys"]: m["msgId"] for m in ref.values() if m.get("keys")}
    uniq = sorted(m["msgId"] for m in ref.values())[::10]
    hits = keys_through_index(cfg, sorted(by_key) + uniq)
    segments = segment_counts(read_metadata(cfg.tiered_data_dir)[0])
    car.start()
    rocketmq.driver("bulk", topic=TOPIC, count=MORE, size=1024, seed=6, keyEvery=10, tag="q",
                    **common)  # fmt: skip
    provider = from_config(cfg)
    wait_for("the sidecar to offload the broker's newer messages",
             lambda: check_tier(cfg, provider, topics={TOPIC}).problems == [], 90)  # fmt: skip
    yield Adopted(b, cfg, conf, car, ref, raw, ends, recovered, hits, by_key, segments, rocketmq,
                  Path(plugin_file))  # fmt: skip


def test_the_sidecar_reads_what_the_plugin_uploaded(adopted: Adopted) -> None:
    """With the plugin's metadata file and, apart, with metadata rebuilt from the objects alone:
    every message the plugin uploaded, stored alike."""
    tier = tier_messages(adopted.cfg, from_config(adopted.cfg))
    plugin_part = {k: v for k, v in tier.items() if k in adopted.plugin_reference}
    assert set(plugin_part) == set(adopted.plugin_reference)
    assert_stored_alike(plugin_part, adopted.plugin_raw)
    assert set(adopted.recovered) == set(adopted.plugin_reference)
    assert_stored_alike(adopted.recovered, adopted.plugin_raw)


def test_keys_are_found_through_the_plugin_index_files(adopted: Adopted) -> None:
    """Every KEYS token and every tenth UNIQ_KEY of what the plugin uploaded, found once through
    the plugin's own INDEX files (before the sidecar indexed anything)."""
    assert adopted.plugin_segments["INDEX"] >= 2, adopted.plugin_segments
    for key, uniq in adopted.keyed.items():
        assert adopted.key_hits[key] == [uniq], key
    looked_up = [k for k in adopted.key_hits if k not in adopted.keyed]
    assert looked_up and all(adopted.key_hits[k] == [k] for k in looked_up)
    print(f"plugin segments {adopted.plugin_segments}; {len(adopted.keyed)} keys and "
          f"{len(looked_up)} unique keys found through its INDEX files")  # fmt: skip


def test_the_sidecar_goes_on_where_the_plugin_stopped(adopted: Adopted) -> None:
    """check_tier: per queue every offset once from 0 to the broker's max, bytes alike -- across
    the hand-over point (and the segment the plugin left unsealed)."""
    report = check_tier(adopted.cfg, from_config(adopted.cfg), topics={TOPIC})
    report.assert_ok(FIRST + MORE)
    for qid, end in adopted.hand_over.items():
        lo, hi = report.ranges[(TOPIC, qid)]
        assert lo == 0 and hi > end, (qid, lo, hi, end)
    print(f"hand-over offsets per queue: {adopted.hand_over}; tier now {report.ranges}")


def test_java_consumer_replays_the_plugin_tier_through_the_sidecar(adopted: Adopted) -> None:
    got = read_all(adopted.rocketmq, adopted.sidecar.name_server, "it-plugin-replay")
    plugin_part = {k: v for k, v in got.items() if k in adopted.plugin_reference}
    assert_same(plugin_part, adopted.plugin_reference)


@dataclass
class HandedBack:
    replayed: dict[Key, Message]
    reference: dict[Key, Message]
    key_output: str
    queried: list[str]
    """keys of the sidecar's part (and one of the plugin's) looked up through the broker"""
    compaction: list[dict[str, Any]]
    plugin_doc: MetadataDocument
    sidecar_doc: MetadataDocument


@pytest.fixture(scope="module")
def handed_back(adopted: Adopted, namesrv: NameServer) -> HandedBack:
    """The other way: the sidecar's index compacted by Spark and uploaded, its metadata given to
    the broker, the broker started with the plugin again under ``tieredStorageLevel=FORCE`` (every
    read and key query from the tier)."""
    b, rocketmq = adopted.broker, adopted.rocketmq
    reference = read_all(rocketmq, namesrv.address, "it-plugin-all")
    adopted.sidecar.stop()
    done = subprocess.run(
        [RMQ_TIERED, "compact-index", "--seal", "--engine", "spark", "--json",
         "-c", b.conf, "-c", adopted.conf],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    compaction = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    sidecar_doc = read_metadata(adopted.cfg.tiered_data_dir)[0]
    b.stop()
    b.conf.unlink()
    b.conf_keys.update(plugin_keys(Path(adopted.cfg.tiered_store_file_path)))
    b.conf_keys["tieredStorageLevel"] = "FORCE"
    shutil.copy(adopted.cfg.tiered_data_dir / "config" / "tieredStoreMetadata.json",
                b.store / "config")  # fmt: skip
    (b.store / "config" / "tieredStoreMetadata.json.bak").unlink(missing_ok=True)
    b.start()
    replayed = read_all(rocketmq, namesrv.address, "it-plugin-back")
    queried = [*(f"bulk-q-{n}" for n in range(0, MORE, 200)), "bulk-p-0"]
    out = rocketmq.mqadmin(
        namesrv.address,
        *(["queryMsgByKey", "-t", TOPIC, "-k", k] for k in queried),
    )
    # the plugin's own rewrite of the sidecar's metadata survives a broker restart
    b.stop()
    b.start()
    b.wait_registered()
    out += rocketmq.mqadmin(namesrv.address, ["queryMsgByKey", "-t", TOPIC, "-k", queried[0]])
    plugin_doc = parse_metadata(
        (b.store / "config" / "tieredStoreMetadata.json").read_text("utf-8"), source="plugin"
    )
    return HandedBack(replayed, reference, "\n".join(out), queried, compaction, plugin_doc,
                      sidecar_doc)  # fmt: skip


def test_the_plugin_serves_the_sidecar_tier(handed_back: HandedBack) -> None:
    """A Java consumer reads every message through the broker, which (FORCE) reads the tier the
    sidecar wrote -- the plugin's part and the sidecar's."""
    assert_same(handed_back.replayed, handed_back.reference)
    assert len(handed_back.reference) == FIRST + MORE


def test_the_plugin_finds_keys_through_the_sidecar_index(handed_back: HandedBack) -> None:
    """The broker's queryMessage (mqadmin queryMsgByKey; FORCE: the tier's index only) finds the
    keys the sidecar indexed, through the files its Spark job compacted."""
    assert handed_back.compaction and all(
        r.get("engine") == "spark" for r in handed_back.compaction
    ), handed_back.compaction
    by_key = {m.get("keys"): m["msgId"] for m in handed_back.reference.values()}
    for key in handed_back.queried:
        assert by_key[key] in handed_back.key_output, (key, handed_back.key_output)
    after_restart = handed_back.key_output.split("#Message ID")[-1]
    assert by_key[handed_back.queried[0]] in after_restart, after_restart


def test_the_plugin_keeps_every_segment_of_the_sidecar_metadata(handed_back: HandedBack) -> None:
    """The plugin loaded the sidecar's metadata file and rewrote it without losing a segment (as
    it stands after a broker restart)."""
    for t in FileSegmentType:
        mine = handed_back.sidecar_doc.segment_table(t)
        theirs = handed_back.plugin_doc.segment_table(t)
        for path, segments in mine.items():  # the plugin may add its own index file at stop
            assert set(segments) <= set(theirs.get(path, {})), (t, path)


def test_the_sql_source_reads_the_plugin_tier_as_the_java_client_does(adopted: Adopted) -> None:
    """``rocketmq_tiered`` (without Spark: its planner and reader) over the plugin's tier, planned
    from the plugin's own metadata file (a plugin keeps no mirror): every message the plugin
    uploaded, each field as the Java client's ``MessageExt`` has it."""
    plugin_file = adopted.plugin_metadata
    options = {
        "config": f"{adopted.broker.conf},{adopted.conf}",
        "metadata": str(plugin_file),
        "topic": TOPIC,
    }
    sources = tier_scan.load_sources(options)
    rows: dict[Key, dict[str, Any]] = {}
    with sources[0].provider() as provider:
        for part in tier_scan.plan(sources, tier_scan.Bounds.from_options(options)):
            for batch in tier_read.PartitionReader(provider, tier_scan.ALL_COLUMNS).read(part):
                for row in batch.to_pylist():
                    rows[(row["topic"], row["queueId"], row["queueOffset"])] = row
    assert set(rows) == set(adopted.plugin_reference)
    for key, java in adopted.plugin_reference.items():
        row = rows[key]
        props = dict(row["properties"])
        got = {
            "msgId": row["msgId"],
            "bornTimestamp": round(row["bornTimestamp"].timestamp() * 1000),
            "storeTimestamp": round(row["storeTimestamp"].timestamp() * 1000),
            "bornHost": row["bornHost"],
            "storeHost": row["storeHost"],
            "sysFlag": row["sysFlag"],
            "flag": row["flag"],
            "reconsumeTimes": row["reconsumeTimes"],
            "bodyCRC": row["bodyCrc"],
            "storeSize": row["storeSize"],
            "tags": row["tags"],
            "keys": props.get("KEYS"),
            "bodyLength": len(row["body"]),
            "bodySha256": hashlib.sha256(row["body"]).hexdigest(),
            "properties": props,
        }
        want = {k: java.get(k) for k in got} | {"properties": comparable(java)["properties"]}
        assert got == want, key
