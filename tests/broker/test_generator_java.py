"""The generator's Java-client mode and broker files against facts read from a real broker store.

The literals marked REAL come from a store a real RocketMQ 5.3.3 broker (Maven Central jars,
default broker.conf, cluster DefaultCluster, broker broker-a) wrote for a Java 5.x producer sending
plain, keyed, batch, ordered, delayed (level 1) and transactional messages; the store itself is
not part of the repository, so the tests hold the facts, not the files.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from collections import Counter
from collections import defaultdict
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tiered.broker import broker_index
from tiered.broker import consumequeue as cqmod
from tiered.broker import gen_broker_files as gbf
from tiered.broker import java_props as jp
from tiered.broker import message as msgcodec
from tiered.broker import verify
from tiered.broker.checkpoint import read_checkpoint
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.broker.configjson import load_config_json
from tiered.broker.configjson import load_topics
from tiered.broker.fastjson import dumps_fastjson
from tiered.broker.fastjson import parse_fastjson
from tiered.broker.generator import GenReport
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.broker.javautil import tags_code
from tiered.errors import ConfigError
from tiered.index.bulk_keys import index_batch_of_units
from tiered.index.index_batch import IndexBatch
from tiered.index.key_set import key_properties

SPEC = GenSpec(
    seed=21, topics=2, queues=3, messages=2000, min_body=0, max_body=6000,
    commitlog_file_size=1 << 20, cq_file_entries=100, keys_per_message=1, with_index=True,
    index_slots=1009, index_max_items=20000, java_client=True, client_ipv6_fraction=0.5,
    user_property_fraction=0.2, delay_fraction=0.1, transaction_fraction=0.15,
    batch_fraction=0.03, batch_size=6, broker_files=True,
)  # fmt: skip
CQ_FILE = SPEC.cq_file_entries * cqmod.CQ_UNIT_SIZE

# REAL: property names in stored order, per kind of message
REAL_PLAIN_NAMES = ["MSG_REGION", "UNIQ_KEY", "CLUSTER", "TAGS", "KEYS", "WAIT", "TRACE_ON"]
REAL_USER_NAMES = ["MSG_REGION", "UNIQ_KEY", "CLUSTER", "region", "TAGS", "KEYS", "WAIT",
                   "TRACE_ON", "名前"]  # fmt: skip
REAL_DELAYED_NAMES = ["MSG_REGION", "UNIQ_KEY", "CLUSTER", "DELAY", "TAGS", "KEYS", "WAIT",
                      "TRACE_ON", "REAL_TOPIC", "REAL_QID"]  # fmt: skip
REAL_HALF_NAMES = ["MSG_REGION", "UNIQ_KEY", "CLUSTER", "PGROUP", "__transactionId__", "TAGS",
                   "TRAN_MSG", "KEYS", "WAIT", "TRACE_ON", "REAL_TOPIC", "REAL_QID"]  # fmt: skip
REAL_BATCH_NAMES = ["KEYS", "UNIQ_KEY", "WAIT", "TAGS", "MSG_REGION", "UNIQ_KEY", "CLUSTER",
                    "WAIT", "TRACE_ON"]  # fmt: skip
REAL_OP_PROPS = b"WAIT\x01true\x02TAGS\x01d\x02"
REAL_OP_TAG_CODE = 100  # hash("d")
REAL_COMMIT_FLAG, REAL_HALF_FLAG, REAL_ZLIB_FLAG = 0x8, 0x0, 0x301
# REAL: what a default 5.3.3 broker keeps beside commitlog/, consumequeue/, index/
REAL_FILES = {
    "abort.bak", "checkpoint", "lock",
    "compaction/position-checkpoint", "compaction/position-checkpoint.bak",
    *(f"config/{n}{b}" for n in ("consumerFilter.json", "consumerOffset.json",
      "consumerOrderInfo.json", "delayOffset.json", "subscriptionGroup.json", "topics.json",
      "transactionMetrics") for b in ("", ".bak")),
}  # fmt: skip
# REAL: topics.json's broker-made topics (queues, perm)
REAL_SYSTEM_TOPICS = {
    "SCHEDULE_TOPIC_XXXX": (18, 6), "SELF_TEST_TOPIC": (1, 6), "DefaultCluster": (16, 7),
    "DefaultCluster_REPLY_TOPIC": (1, 6), "rmq_sys_REVIVE_LOG_DefaultCluster": (8, 6),
    "rmq_sys_SYNC_BROKER_MEMBER_broker-a": (1, 1), "broker-a": (1, 7), "TBW102": (4, 7),
    "BenchmarkTest": (1024, 6), "OFFSET_MOVED_EVENT": (1, 6),
    "RMQ_SYS_TRANS_HALF_TOPIC": (1, 6), "RMQ_SYS_TRANS_OP_HALF_TOPIC": (1, 6),
}  # fmt: skip
# REAL: topics.json order for the real store's topic set (ConcurrentHashMap(1024) iteration)
REAL_TOPIC_ORDER = [
    "RealMain", "RealEight", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "%RETRY%ref",
    "DefaultCluster", "DefaultCluster_REPLY_TOPIC", "rmq_sys_REVIVE_LOG_DefaultCluster",
    "RealOne", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_SYNC_BROKER_MEMBER_broker-a", "broker-a",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TBW102", "BenchmarkTest", "OFFSET_MOVED_EVENT",
]  # fmt: skip
REAL_GROUP_ORDER = ["SELF_TEST_C_GROUP", "ref", "CID_ONSAPI_OWNER", "CID_ONSAPI_PERMISSION",
                    "CID_RMQ_SYS_TRANS", "TOOLS_CONSUMER", "CID_ONS-HTTP-PROXY",
                    "FILTERSRV_CONSUMER", "CID_ONSAPI_PULL"]  # fmt: skip
REAL_CONSUMER_OFFSET = (
    '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1795677080986'
    '\n\t},\n\t"groupTopicMap":{\n\t\t"ref":["RealOne","RealMain","RealEight"],\n\t\t'
    '"CID_RMQ_SYS_TRANS":["RMQ_SYS_TRANS_HALF_TOPIC","RMQ_SYS_TRANS_OP_HALF_TOPIC"]\n\t},\n\t'
    '"offsetTable":{\n\t\t"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:10\n\t\t},\n\t\t'
    '"RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:1\n\t\t},\n\t\t"RealOne@ref":{0:0\n\t\t},'
    '\n\t\t"RealEight@ref":{0:0,1:0,2:0,3:0,4:0,5:0,6:0,7:0\n\t\t},\n\t\t'
    '"RealMain@ref":{0:0,1:0,2:0,3:0\n\t\t}\n\t}\n}'
)
REAL_DELAY_OFFSET = (
    '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1795677081221'
    '\n\t},\n\t"offsetTable":{1:5\n\t}\n}'
)
REAL_TRANSACTION_METRICS = (
    '{"dataVersion":{"counter":20,"stateVersion":0,"timestamp":1795677225417},'
    '"transactionCount":{"RealMain":{"count":0,"timeStamp":1795677225417}}}'
)
REAL_SMALL_FILES = {
    "config/consumerFilter.json": '{\n\t"filterDataByTopic":{}\n}',
    "config/consumerOrderInfo.json": '{\n\t"table":{}\n}',
    "compaction/position-checkpoint": '{\n\t"empty":true,\n\t"queueOffsetMap":{}\n}',
}
REAL_GROUP_ENTRY = (  # one subscriptionGroupTable entry, as written
    '"CID_RMQ_SYS_TRANS":{\n\t\t\t"attributes":{},\n\t\t\t"brokerId":0,\n\t\t\t'
    '"consumeBroadcastEnable":true,\n\t\t\t"consumeEnable":true,\n\t\t\t'
    '"consumeFromMinEnable":true,\n\t\t\t"consumeMessageOrderly":false,\n\t\t\t'
    '"consumeTimeoutMinute":15,\n\t\t\t"groupName":"CID_RMQ_SYS_TRANS",\n\t\t\t'
    '"groupRetryPolicy":{\n\t\t\t\t"type":"CUSTOMIZED"\n\t\t\t},\n\t\t\t"groupSysFlag":0,\n\t\t\t'
    '"notifyConsumerIdsChangedEnable":true,\n\t\t\t"retryMaxTimes":16,\n\t\t\t'
    '"retryQueueNums":1,\n\t\t\t"whichBrokerWhenConsumeSlowly":1\n\t\t}'
)


@dataclass(frozen=True)
class Unit:
    offset: int
    raw: bytes
    m: msgcodec.Message

    @property
    def props(self) -> bytes:
        """The stored properties section (duplicates and all), after the fields before it."""
        p = msgcodec.BORN_HOST_POSITION
        p += msgcodec.host_size(self.m.sys_flag, msgcodec.BORNHOST_V6_FLAG) + 8
        p += msgcodec.host_size(self.m.sys_flag, msgcodec.STOREHOST_V6_FLAG) + 12
        (body_len,) = struct.unpack_from(">i", self.raw, p)
        p += 4 + body_len + (2 if self.m.version == "v2" else 1) + len(self.m.topic.encode())
        return self.raw[p + 2 :]

    @property
    def names(self) -> list[str]:
        return [item.split(b"\x01")[0].decode() for item in self.props.split(b"\x02") if item]


@dataclass
class Store:
    root: Path
    report: GenReport
    units: list[Unit]
    cq_tags: dict[int, int]  # physical offset -> consumequeue tag code

    def of(self, topic: str) -> list[Unit]:
        return [u for u in self.units if u.m.topic == topic]


def _scan(root: Path) -> list[Unit]:
    out = []
    for f in list_files([root / "commitlog"]):
        data = f.path.read_bytes()
        for it in scan_file(f.path, f.base):
            if it.message is not None:
                raw = data[it.position : it.position + it.message.total_size]
                out.append(Unit(it.offset, raw, it.message))
    return out


def _cq_tags(root: Path) -> dict[int, int]:
    tags: dict[int, int] = {}
    for topic, qid in cqmod.list_queues(root / "consumequeue"):
        cq = cqmod.ConsumeQueue.for_queue(root / "consumequeue", topic, qid, file_size=CQ_FILE)
        units = cq.read_units(cq.min_offset(), cq.max_offset() - cq.min_offset())
        tags.update(zip(units["offset"].tolist(), units["tags_code"].tolist(), strict=True))
    return tags


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("java") / "store"
    report = generate_store(root, SPEC, manifest=True)
    return Store(root, report, _scan(root), _cq_tags(root))


def test_every_unit_reads_back_and_the_store_verifies(store: Store) -> None:
    assert store.report.messages == SPEC.messages
    assert len(store.units) == store.report.units == len(store.report.manifest)
    assert store.report.units > SPEC.messages  # re-puts, halves and ops on top of the sends
    for u in store.units:
        key = (u.m.topic, u.m.queue_id, u.m.queue_offset)
        assert store.report.manifest[key][0] == hashlib.sha256(u.raw).hexdigest()
    check = verify.check_store(store.root, SPEC.commitlog_file_size, CQ_FILE)
    assert check.problems == []
    assert check.checked == store.report.units
    stamps = [u.m.store_timestamp for u in store.units]
    assert all(a <= b for a, b in itertools.pairwise(stamps))  # a batch shares one store time


def test_properties_are_the_java_clients_in_the_real_order(store: Store) -> None:
    seen: Counter[str] = Counter()
    for u in store.units:
        names, p = u.names, u.m.properties
        tagged = "TAGS" in p and "region" not in p
        if u.m.topic == jp.OP_TOPIC:
            assert u.props == REAL_OP_PROPS
            seen["op"] += 1
        elif names.count("UNIQ_KEY") == 2:
            if tagged:
                assert names == REAL_BATCH_NAMES
                seen["batch"] += 1
        elif "PGROUP" in p:
            if tagged:
                assert names == REAL_HALF_NAMES
                seen["half"] += 1
        elif "DELAY" in p:
            if tagged:
                assert names == REAL_DELAYED_NAMES
                seen["delayed"] += 1
        elif "region" in p and "TAGS" in p:
            assert names == REAL_USER_NAMES
            seen["user"] += 1
        elif tagged:
            assert names == REAL_PLAIN_NAMES
            seen["plain"] += 1
    assert set(seen) == {"op", "batch", "half", "delayed", "user", "plain"}, seen


def test_delayed_messages_go_through_schedule_topic_then_are_reput(store: Store) -> None:
    by_uniq = defaultdict(list)
    for u in store.units:
        if u.m.topic != jp.SCHEDULE_TOPIC:
            by_uniq[u.m.properties.get("UNIQ_KEY")].append(u)
    scheduled = store.of(jp.SCHEDULE_TOPIC)
    assert scheduled
    levels: Counter[int] = Counter()
    for u in scheduled:
        level = int(u.m.properties["DELAY"])
        levels[level] += 1
        assert u.m.queue_id == level - 1
        deliver = u.m.store_timestamp + jp.DELAY_LEVELS_MS[level - 1]
        assert store.cq_tags[u.offset] == deliver  # REAL: the tag code is the delivery time
        (copy,) = by_uniq[u.m.properties["UNIQ_KEY"]]
        assert (copy.m.topic, copy.m.queue_id) == (
            u.m.properties["REAL_TOPIC"],
            int(u.m.properties["REAL_QID"]),
        )
        assert copy.props == u.props  # REAL: DELAY, REAL_TOPIC, REAL_QID stay
        assert (copy.m.body, copy.m.sys_flag, copy.m.born_timestamp, copy.m.born_host) == (
            u.m.body,
            u.m.sys_flag,
            u.m.born_timestamp,
            u.m.born_host,
        )
        assert copy.m.store_timestamp >= deliver
        assert store.cq_tags[copy.offset] == tags_code(copy.m.tags)
    assert set(levels) == {1, 2, 3}
    delay = load_config_json(store.root / "config" / "delayOffset.json")["offsetTable"]
    assert {int(k): v for k, v in delay.items()} == levels  # all delivered


def test_transactions_half_commit_op(store: Store) -> None:
    halves = store.of(jp.HALF_TOPIC)
    commits = {u.m.prepared_transaction_offset: u for u in store.units
               if u.m.sys_flag & msgcodec.TRANSACTION_MASK}  # fmt: skip
    assert halves and 0 < len(commits) < len(halves)
    for h in halves:
        assert h.m.sys_flag & msgcodec.TRANSACTION_MASK == REAL_HALF_FLAG
        assert h.m.queue_id == 0 and h.m.properties["TRAN_MSG"] == "true"
        assert h.m.properties["__transactionId__"] == h.m.properties["UNIQ_KEY"]
        c = commits.get(h.offset)
        if c is not None:
            assert c.m.sys_flag & msgcodec.TRANSACTION_MASK == REAL_COMMIT_FLAG
            assert c.props == h.props  # REAL: TRAN_MSG, REAL_TOPIC, REAL_QID stay
            assert (c.m.topic, c.m.queue_id) == (
                h.m.properties["REAL_TOPIC"],
                int(h.m.properties["REAL_QID"]),
            )
            assert c.m.body == h.m.body and c.m.born_timestamp == h.m.born_timestamp
    ops = store.of(jp.OP_TOPIC)
    removed = [int(x) for op in ops for x in op.m.body.decode().split(",") if x]
    assert sorted(removed) == sorted(h.m.queue_offset for h in halves)  # each half ended once
    for op in ops:
        assert op.m.body.endswith(b",") and op.m.queue_id == 0
        assert op.m.born_host == op.m.store_host
        assert store.cq_tags[op.offset] == REAL_OP_TAG_CODE
    offsets = load_config_json(store.root / "config" / "consumerOffset.json")["offsetTable"]
    assert offsets == {
        "RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS": {"0": len(halves)},
        "RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS": {"0": len(ops)},
    }
    metrics = load_config_json(store.root / "config" / "transactionMetrics")
    assert metrics["dataVersion"]["counter"] == 2 * len(halves)


def test_batches_share_time_file_and_the_batch_uniq_key(store: Store) -> None:
    batches = defaultdict(list)
    for u in store.units:
        if u.names.count("UNIQ_KEY") == 2:
            batches[u.m.properties["UNIQ_KEY"]].append(u)
    assert len(batches) >= 3
    index = [broker_index.IndexFile.open(p, slots=SPEC.index_slots)
             for p in sorted((store.root / "index").iterdir())]  # fmt: skip
    try:
        for uniq, members in batches.items():
            assert 2 <= len(members) <= SPEC.batch_size
            assert len({(u.m.topic, u.m.queue_id, u.m.store_timestamp) for u in members}) == 1
            offsets = [u.m.queue_offset for u in members]
            assert offsets == list(range(offsets[0], offsets[0] + len(members)))
            ends = [u.offset + len(u.raw) for u in members]
            assert [u.offset for u in members[1:]] == ends[:-1]
            assert len({u.offset // SPEC.commitlog_file_size for u in members}) == 1
            hits = {h.phys_offset for f in index for h in f.lookup(members[0].m.topic, uniq)}
            assert {u.offset for u in members} <= hits  # the batch's id is indexed ...
            for u in members:
                inner = u.props.split(b"\x02")[1].split(b"\x01")[1].decode()
                hits = {h.phys_offset for f in index for h in f.lookup(u.m.topic, inner)}
                assert u.offset not in hits  # ... the inner ones are not (REAL)
            data = b"".join(u.raw for u in members)
            starts = np.cumsum([0] + [len(u.raw) for u in members[:-1]])
            sizes = np.array([len(u.raw) for u in members])
            uniqs, _ = key_properties(data, starts, sizes)  # the tiered index reads the same
            assert uniqs == [uniq] * len(members)
    finally:
        for f in index:
            f.close()


def test_tiered_index_reads_the_keys_the_broker_indexed(store: Store) -> None:
    for topic, qid in {(u.m.topic, u.m.queue_id) for u in store.units}:
        units = [u for u in store.units if (u.m.topic, u.m.queue_id) == (topic, qid)]
        data = b"".join(u.raw for u in units)
        sizes = np.array([len(u.raw) for u in units], np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        stamps = np.array([u.m.store_timestamp for u in units], np.int64)
        uniqs, keys = key_properties(data, starts, sizes)
        assert uniqs == [u.m.properties.get("UNIQ_KEY") for u in units]  # the last one wins
        bulk = index_batch_of_units(topic, 1, qid, data, starts, sizes, starts, stamps)
        slow = IndexBatch.for_queue(topic, 1, qid, starts, sizes, stamps, uniqs, keys)
        assert np.array_equal(bulk.hashes, slow.hashes), topic


def test_uniq_keys_compression_and_index(store: Store) -> None:
    uniqs = {u.m.properties["UNIQ_KEY"] for u in store.units if "UNIQ_KEY" in u.m.properties}
    assert {len(k) for k in uniqs} == {32, 56}
    assert all(k.startswith("FD00") for k in uniqs if len(k) == 56)
    for u in store.units:
        sent = u.m.decompressed_body()
        if len(sent) >= jp.COMPRESS_OVER and u.m.topic != jp.OP_TOPIC:
            in_batch = u.names.count("UNIQ_KEY") == 2
            assert u.m.sys_flag & 0x701 == (0 if in_batch else REAL_ZLIB_FLAG)
            if not in_batch:
                assert u.m.body[:2] == bytes.fromhex("785e")  # REAL: level 5
        elif u.m.topic != jp.OP_TOPIC:
            assert u.m.compression is None
    (path,) = sorted((store.root / "index").iterdir())
    with broker_index.IndexFile.open(path, slots=SPEC.index_slots) as idx:
        for u in store.units[::5]:
            keys = [*u.m.keys, u.m.properties["UNIQ_KEY"]] if u.m.topic != jp.OP_TOPIC else []
            for key in keys:  # REAL: system-topic units too, under their own topic
                assert u.offset in [h.phys_offset for h in idx.lookup(u.m.topic, key)], key
        assert idx.header.index_count - 1 == sum(
            len(u.m.keys) + 1 for u in store.units if u.m.topic != jp.OP_TOPIC
        )
    cp = read_checkpoint(store.root / "checkpoint")
    assert cp.index_msg_timestamp == 0  # REAL: one index file, none full yet
    last = max(u.m.store_timestamp for u in store.units)
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == last


def test_broker_files(store: Store) -> None:
    root = store.root
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert {f for f in files if not f.startswith(("commitlog/", "consumequeue/", "index/"))} == (
        REAL_FILES
    )
    assert (root / "abort.bak").read_bytes() == b"" and (root / "lock").read_bytes() == b"lock"
    for f in REAL_FILES:
        if f.endswith(".bak") and f != "abort.bak":
            assert (root / f).read_bytes() == (root / f.removesuffix(".bak")).read_bytes()
    for name, text in REAL_SMALL_FILES.items():
        assert (root / name).read_text(encoding="utf-8") == text
    topics = load_topics(root / "config" / "topics.json").topic_config_table
    for name, (queues, perm) in REAL_SYSTEM_TOPICS.items():
        assert (topics[name].write_queue_nums, topics[name].perm) == (queues, perm), name
    assert topics["GenTopic1"].read_queue_nums == SPEC.queues
    assert '"CID_RMQ_SYS_TRANS":{' in (root / "config" / "subscriptionGroup.json").read_text()
    # a broker makes a queue's directory with its first unit: no empty ones
    made = set(cqmod.list_queues(root / "consumequeue"))
    assert {q for q in made if q[0] == jp.SCHEDULE_TOPIC} == {(jp.SCHEDULE_TOPIC, i)
                                                             for i in range(3)}  # fmt: skip
    for topic, qid in made:
        assert any(p.is_file() for p in (root / "consumequeue" / topic / str(qid)).iterdir())


def test_config_renderers_reproduce_the_real_files() -> None:
    real = (("RealMain", 4), ("RealEight", 8), ("%RETRY%ref", 1), ("RealOne", 1))
    real_users = {n: gbf.topic_config(n, q) for n, q in real}
    text = gbf.topics_json(real_users, transactions=True, counter=4, ms=1795677229713)
    table = parse_fastjson(text)["topicConfigTable"]
    assert list(table) == REAL_TOPIC_ORDER
    assert '\t\t"TBW102":{\n\t\t\t"attributes":{},\n\t\t\t"order":false,\n\t\t\t"perm":7,' in text
    groups = {g: gbf.group_config(g) for g in (*gbf.SYSTEM_GROUPS, "ref")}
    assert jp.hash_order(groups, 2048) == REAL_GROUP_ORDER
    assert REAL_GROUP_ENTRY in gbf.subscription_group_json(0)
    offsets = {
        ("RMQ_SYS_TRANS_HALF_TOPIC", "CID_RMQ_SYS_TRANS"): {0: 10},
        ("RMQ_SYS_TRANS_OP_HALF_TOPIC", "CID_RMQ_SYS_TRANS"): {0: 1},
        ("RealOne", "ref"): {0: 0},
        ("RealEight", "ref"): dict.fromkeys(range(8), 0),
        ("RealMain", "ref"): dict.fromkeys(range(4), 0),
    }
    assert gbf.consumer_offset_json(offsets, 1795677080986) == REAL_CONSUMER_OFFSET
    assert gbf.delay_offset_json({1: 5}, 1795677081221) == REAL_DELAY_OFFSET
    metrics = gbf.transaction_metrics({"RealMain": 10}, 1795677225417, 0)
    assert metrics == REAL_TRANSACTION_METRICS
    empty_filter = REAL_SMALL_FILES["config/consumerFilter.json"]
    assert dumps_fastjson({"filterDataByTopic": {}}) == empty_filter


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_java_mode_is_deterministic_and_appends(tmp_path: Path) -> None:
    spec = replace(SPEC, messages=400, with_index=False, commitlog_file_size=1 << 18)
    generate_store(tmp_path / "a", spec)
    generate_store(tmp_path / "b", spec)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    before = _cq_ends(tmp_path / "a")
    more = generate_store(tmp_path / "a", replace(spec, seed=4, messages=300, append=True))
    for queue, (lo, _) in more.queues.items():
        assert lo == before.get(queue, 0)
    check = verify.check_store(tmp_path / "a", spec.commitlog_file_size, CQ_FILE)
    assert check.problems == []


def _cq_ends(root: Path) -> dict[tuple[str, int], int]:
    out = {}
    for topic, qid in cqmod.list_queues(root / "consumequeue"):
        cq = cqmod.ConsumeQueue.for_queue(root / "consumequeue", topic, qid, file_size=CQ_FILE)
        out[(topic, qid)] = cq.max_offset()
    return out


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"delay_fraction": 0.1}, "--delay-fraction=0.1 needs --java-client"),
        ({"batch_fraction": 0.1}, "--batch-fraction=0.1 needs --java-client"),
        (
            {"java_client": True, "delay_fraction": 0.6, "transaction_fraction": 0.6},
            "plus --transaction-fraction must be <= 1",
        ),
        ({"java_client": True, "batch_size": 1}, "--batch-size=1 must be >= 2"),
        (
            {"java_client": True, "batch_fraction": 0.1, "commitlog_file_size": 20_000},
            "cannot hold a batch of 10",
        ),
    ],
)
def test_java_options_are_checked(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        replace(GenSpec(), **changes).validate()  # type: ignore[arg-type]
