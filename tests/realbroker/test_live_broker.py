"""The sidecar beside a real, live RocketMQ 5.3.3 broker.

One history for the module (:func:`live`): ``rmq-tiered run`` is started on the broker's own
broker.conf while the Java producer sends every kind of message (plain, keyed, tagged, with
non-ASCII properties, 1 B to 1 MiB bodies -- compressed above 4 KiB --, batches, ordered sends to
chosen queues, delayed and transactional messages, topics of 1, 4 and 8 queues) and then enough
bulk to roll the broker's 4 MiB commitlog files; a Java reference consumer reads everything from
the broker; the broker then deletes its old commitlog files for real (``fileReservedTime=0`` and
``deleteExpiredCommitLog``). The tests compare what the tier holds and what real Java consumers and
mqadmin read through the sidecar with that reference.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest
from tiered.providers.registry import from_config

from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.remoting.client import RemotingClient
from tiered.testing.http import get
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.replay_check import Key
from tiered.testing.replay_check import ReadOnlyWatch
from tiered.testing.replay_check import assert_same
from tiered.testing.replay_check import assert_stored_alike
from tiered.testing.replay_check import delete_old_commitlog
from tiered.testing.replay_check import messages
from tiered.testing.replay_check import read_raw
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import sidecar_status
from tiered.testing.replay_check import tier_messages
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier

MAIN, ONE, EIGHT, LOCAL_ONLY = "RealMain", "RealOne", "RealEight", "RealLocalOnly"
TOPICS = {MAIN: 4, ONE: 1, EIGHT: 8}
BULK = 5000  # 2 KiB bodies: ~11 MiB, three 4 MiB commitlog files rolled


@dataclass
class History:
    """What the module's tests share."""

    broker: Broker
    namesrv: NameServer
    rocketmq: Runtime
    sidecar: Sidecar
    cfg: TieredConfig
    reference: dict[Key, dict[str, Any]]
    raw: dict[Key, bytes]
    produced: list[dict[str, Any]]
    min_after_delete: dict[tuple[str, int], int] = field(default_factory=dict)
    watch: ReadOnlyWatch | None = None

    def drive(self, command: str, **args: Any) -> list[dict[str, Any]]:
        return self.rocketmq.driver(command, **args)

    @property
    def tier_only(self) -> list[Key]:
        """Reference messages the broker no longer holds."""
        return [k for k in self.reference if k[2] < self.min_after_delete.get(k[:2], 0)]


def _batch_entry(body: bytes, properties: str) -> bytes:
    """One message of a batch body, as the Java client's MessageDecoder.encodeMessage lays it."""
    props = properties.encode()
    head = struct.pack(">iiiii", 22 + len(body) + len(props), 0, zlib.crc32(body), 0, len(body))
    return head + body + struct.pack(">h", len(props)) + props


def send_empty_bodies(broker: Broker, topic: str, count: int) -> list[dict[str, Any]]:
    """Messages with a 0-byte body, in one batch sent over the remoting protocol
    (SEND_BATCH_MESSAGE with the client's V2 header). The Java client refuses an empty body and
    a 5.3.3 broker fails a single empty SEND_MESSAGE (it reads the frame's body as null), but it
    stores an empty message inside a batch: a real broker can hold them."""
    uniq = [f"0000000000000000000000000000EMPTY{i:06d}" for i in range(count)]
    body = b"".join(
        _batch_entry(b"", f"UNIQ_KEY\x01{u}\x02KEYS\x01empty-{i}\x02WAIT\x01true\x02")
        for i, u in enumerate(uniq)
    )
    host, port = broker.address.split(":")
    with RemotingClient(host, int(port)) as client:
        reply = client.call(
            320, body, a="it-empty", b=topic, c="TBW102", d=4, e=0, f=0,
            g=int(time.time() * 1000), h=0, i="WAIT\x01true\x02", j=0, k="false", m="true",
        )  # fmt: skip
    assert reply.code == 0, reply.remark
    return [{"sent": {"kind": "empty", "count": 1, "msgId": u}} for u in uniq]


@pytest.fixture(scope="module")
def live(
    broker: Broker, namesrv: NameServer, rocketmq: Runtime, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[History]:
    work = tmp_path_factory.mktemp("live")
    conf = sidecar_conf(work / "sidecar.conf", work, tieredStoreTopicExclude=LOCAL_ONLY)
    car = Sidecar(conf, work / "run", broker_conf=broker.conf)
    car.start()
    try:
        yield from _live(broker, namesrv, rocketmq, car, conf)
    finally:
        car.stop()


def _live(
    broker: Broker, namesrv: NameServer, rocketmq: Runtime, car: Sidecar, conf: Path
) -> Iterator[History]:
    assert car.proc is not None
    watch = ReadOnlyWatch(car.proc.pid, broker.store)
    watch.start()
    common: dict[str, Any] = {"namesrv": namesrv.address, "broker": broker.address}
    produced = rocketmq.driver("produce", seed=25, main=MAIN, topics=TOPICS, **common)
    produced += rocketmq.driver(
        "bulk", seed=26, topic=MAIN, count=BULK, size=2048, keyEvery=50, tag="a", **common
    )
    rocketmq.driver(
        "bulk", seed=27, topic=LOCAL_ONLY, count=20, size=100, keyEvery=1, tag="local",
        topics={LOCAL_ONLY: 2}, **common,
    )  # fmt: skip
    produced += send_empty_bodies(broker, MAIN, 2)
    wait_for(  # the delayed messages are re-put into MAIN after 1 s
        "the delayed messages",
        lambda: sum(1 for _ in (broker.store / "consumequeue" / MAIN).rglob("0*")) > 0,
        timeout=10,
    )
    time.sleep(2)
    ref = messages(rocketmq.driver("consume", mode="lite", group="it-reference",
                                   topics=list(TOPICS), maxMs=120_000, **common))  # fmt: skip
    raw = read_raw(broker, ref)
    cfg = load_config([broker.conf, conf])
    provider = from_config(cfg)
    wait_for(
        "the tier to catch up",
        lambda: check_tier(cfg, provider, topics=set(TOPICS)).problems == [],
        60,
    )
    h = History(broker, namesrv, rocketmq, car, cfg, ref, raw, produced, watch=watch)
    delete_old_commitlog(rocketmq, namesrv.address, broker)
    for topic, count in TOPICS.items():
        for qid in range(count):
            reply = get(car.http, f"/v1/topics/{topic}/queues/{qid}/offsets").json()
            h.min_after_delete[(topic, qid)] = reply["localMin"]
    try:
        yield h
    finally:
        watch.stopping.set()
        watch.join()


def test_the_tier_holds_exactly_what_the_broker_stored(live: History) -> None:
    """Per queue the same offsets; each message's stored bytes equal the broker's but for bytes
    28..35 (its flat offset); no rolled-back transaction, no system topic, nothing extra."""
    tier = tier_messages(live.cfg, from_config(live.cfg))
    assert {k[0] for k in tier} == set(TOPICS)
    assert set(tier) == set(live.reference)
    assert_stored_alike(tier, live.raw)
    kinds: dict[str, int] = {}
    for line in live.produced:
        if "sent" in line:
            kinds[line["sent"]["kind"]] = kinds.get(line["sent"]["kind"], 0) + line["sent"]["count"]
        elif "bulk" in line:
            kinds["bulk"] = kinds.get("bulk", 0) + line["bulk"]
    uniq = {m["msgId"] for m in live.reference.values()}
    committed = [line["committed"]["msgId"] for line in live.produced if "committed" in line]
    rolled_back = [line["rolledBack"]["msgId"] for line in live.produced if "rolledBack" in line]
    assert committed and set(committed) <= uniq
    assert rolled_back and not set(rolled_back) & uniq
    empty = [m for m in live.reference.values() if m.get("keys", "").startswith("empty-")]
    assert len(empty) == kinds["empty"] and all(m["bodyLength"] == 0 for m in empty)
    delayed = [m for m in live.reference.values() if m["properties"].get("DELAY") == "1"]
    assert len(delayed) == kinds["delayed"] == 5
    assert sum(kinds.values()) + len(committed) == len(live.reference)
    assert live.tier_only, "the broker deleted nothing the tier holds"
    print(f"kinds sent {kinds}, committed {len(committed)}, rolled back {len(rolled_back)}; "
          f"{len(live.reference)} compared, {len(live.tier_only)} only in the tier")  # fmt: skip


def test_the_sidecar_never_writes_to_the_broker_store(live: History) -> None:
    assert live.watch is not None
    assert live.watch.samples > 100 and live.watch.seen, "the watch saw nothing"
    assert live.watch.violations == []


@pytest.mark.parametrize("codec", ["JSON", "ROCKETMQ"])
def test_java_lite_pull_consumer_replays_everything(live: History, codec: str) -> None:
    """DefaultLitePullConsumer, every queue assigned (a new group: from offset 0), through the
    sidecar after the broker deleted its old files; the JSON and the binary (ROCKETMQ) header
    codec."""
    lines = live.rocketmq.driver(
        "consume", mode="lite", group=f"it-lite-{codec}", topics=list(TOPICS), maxMs=120_000,
        namesrv=live.sidecar.name_server, batch=64,
        java_flags=(f"-Drocketmq.serialize.type={codec}",),
    )  # fmt: skip
    got = messages(lines)
    assert_same(got, live.reference)
    print(f"{codec}: {len(got)} replayed, {len(live.tier_only)} of them only in the tier")


def test_java_push_consumer_restarted_half_way(live: History) -> None:
    """DefaultMQPushConsumer from the first offset, stopped after half the messages (its offsets
    committed to the sidecar), then started again: every message exactly once."""
    total = len(live.reference)
    common: dict[str, Any] = {
        "mode": "push", "group": "it-push", "topics": list(TOPICS), "maxMs": 180_000,
        "namesrv": live.sidecar.name_server,
    }  # fmt: skip
    first = messages(live.rocketmq.driver("consume", stopAfter=total // 2, **common))
    assert len(first) == total // 2
    second = messages(live.rocketmq.driver("consume", stopAfter=total - len(first), **common))
    assert not set(first) & set(second), sorted(set(first) & set(second))[:5]
    assert_same(first | second, live.reference)


def test_java_orderly_consumer(live: History) -> None:
    """MessageListenerOrderly: the sidecar answers the queue locks; each queue in offset order."""
    lines = live.rocketmq.driver(
        "consume", mode="orderly", group="it-orderly", topics=list(TOPICS), maxMs=180_000,
        stopAfter=len(live.reference), namesrv=live.sidecar.name_server,
    )  # fmt: skip
    got = messages(lines)
    assert_same(got, live.reference)
    last: dict[tuple[str, int], int] = {}
    for line in lines:
        if "msg" in line:
            m = line["msg"]
            q = (m["topic"], m["queueId"])
            assert m["queueOffset"] == last.get(q, -1) + 1, (q, m["queueOffset"], last.get(q))
            last[q] = m["queueOffset"]


def committed_offsets(live: History, group: str) -> dict[tuple[str, int], int]:
    """``group``'s committed offset of every queue of TOPICS, as the sidecar answers it."""
    out = {}
    host, port = live.sidecar.name_server.split(":")
    with RemotingClient(host, int(port)) as c:
        for topic, count in TOPICS.items():
            for qid in range(count):
                r = c.call(14, consumerGroup=group, topic=topic, queueId=qid)
                assert r.code == 0, r.remark
                out[(topic, qid)] = int(r.ext_fields["offset"])
    return out


def test_a_stopped_push_consumer_s_offsets_stay_where_it_left_them(live: History) -> None:
    """A push consumer reads everything and exits; 30 s later (past its held pulls' 15 s
    timeout) its committed offsets are still the queues' ends: a held pull's re-run commits
    nothing, and a closed connection's held pulls are dropped."""
    live.rocketmq.driver(
        "consume", mode="push", group="it-silence", topics=list(TOPICS), maxMs=180_000,
        stopAfter=len(live.reference), namesrv=live.sidecar.name_server,
    )  # fmt: skip
    ends = {(t, q): end for t in TOPICS for q, end in queue_max(live, t).items()}
    before = committed_offsets(live, "it-silence")
    time.sleep(30)
    after = committed_offsets(live, "it-silence")
    print(f"committed offsets at the consumer's exit {before}, 30 s later {after}")
    assert before == ends
    assert after == before


def driver_lines(text: str) -> list[dict[str, Any]]:
    """The whole JSON lines of a killed driver's output (its last line may be cut)."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def test_a_killed_push_consumer_s_queues_go_to_the_next_one_at_once(live: History) -> None:
    """A push consumer is killed (SIGKILL: no unregister, no last offsets) half way; a second
    one of the group started at once holds every queue after its first rebalance (the sidecar
    drops a client the moment its connection closes, as a broker does), nothing is skipped, and
    at most a pull batch (32) per queue is read again."""
    common: dict[str, Any] = {
        "mode": "push", "group": "it-killed", "topics": list(TOPICS), "maxMs": 180_000,
        "namesrv": live.sidecar.name_server, "watchAssignment": True,
    }  # fmt: skip
    queues = sum(TOPICS.values())
    first = live.rocketmq.spawn("consume", stopAfter=len(live.reference), delayMs=40, **common)
    deadline = time.monotonic() + 120
    while sum(1 for line in first.lines() if "msg" in line) < 150:
        assert first.proc.poll() is None and time.monotonic() < deadline, first.out.read_text()
        time.sleep(0.2)
    first.proc.kill()
    first.proc.wait()
    a_lines = driver_lines(first.out.read_text("utf-8", "replace"))
    a = messages(a_lines)
    lines = live.rocketmq.driver("consume", stopAfter=len(live.reference), idleMs=10_000,
                                 **common)  # fmt: skip
    b = messages(lines)
    assigned = [(line["assigned"], line["ms"]) for line in lines if "assigned" in line]
    full = next((ms for n, ms in assigned if n == queues), None)
    print(f"first consumer: {len(a)} messages, then killed; second: {len(b)} messages, queues "
          f"held over time (count, ms since its start) {assigned}")  # fmt: skip
    assert full is not None and full <= 25_000, assigned
    assert_same(a | b, live.reference)
    again: dict[tuple[str, int], int] = {}
    for key in set(a) & set(b):
        again[key[:2]] = again.get(key[:2], 0) + 1
    print(f"read again per queue: {again}")
    assert max(again.values(), default=0) <= 32, again


def test_status_names_the_real_broker_topics(live: History) -> None:
    """``status`` lists the broker's topics as its topics.json has them (read here with plain
    json), which of them are offloaded, and per queue the broker's and the tier's offsets."""
    report, _ = sidecar_status(live.broker.conf, live.sidecar.conf)
    table = json.loads((live.broker.store / "config" / "topics.json").read_text())
    configured = table["topicConfigTable"]
    shown = {t["topic"]: t for t in report["topics"]}
    assert set(shown) == set(configured)
    for name, t in configured.items():
        assert shown[name]["readQueueNums"] == t["readQueueNums"], name
    for name, count in TOPICS.items():
        assert shown[name]["offloaded"] and shown[name]["queuesWithMessages"] == count
    for name in (LOCAL_ONLY, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102"):
        assert not shown[name]["offloaded"], name
    rows = {(q["topic"], q["queueId"]): q for q in report["queues"]}
    for topic in TOPICS:
        for qid, end in queue_max(live, topic).items():
            row = rows[(topic, qid)]
            assert (row["tieredMin"], row["tieredCommit"]) == (0, end), row
            assert row["localMin"] == live.min_after_delete[(topic, qid)], row


def test_mapped_sizes_come_from_the_real_files(live: History, tmp_path: Path) -> None:
    """Without the broker's broker.conf (or with wrong sizes in it) the sidecar takes the
    commitlog and consumequeue file sizes from the files the broker wrote, and says so."""
    keys = {
        "storePathRootDir": live.broker.store,
        "brokerClusterName": live.broker.cluster,
        "brokerName": live.broker.broker_name,
        "maxHashSlotNum": live.broker.settings()["maxHashSlotNum"],
    }
    unset = tmp_path / "unset.conf"
    unset.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    wrong = tmp_path / "wrong.conf"
    wrong.write_text(unset.read_text() + "mappedFileSizeCommitLog=1073741824\n"
                     "mappedFileSizeConsumeQueue=6000000\n")  # fmt: skip
    want, _ = sidecar_status(live.broker.conf, live.sidecar.conf)
    for conf in (unset, wrong):
        got, err = sidecar_status(live.sidecar.conf, conf)
        assert got["queues"] == want["queues"], conf.name
        if conf is wrong:
            assert "mappedFileSizeCommitLog=1073741824 disagrees" in err, err
            assert "which are 4194304 bytes each" in err, err
            assert "mappedFileSizeConsumeQueue=6000000 disagrees" in err, err


def tier_only_message(live: History, topic: str) -> dict[str, Any]:
    """A reference message of ``topic`` that only the tier still holds."""
    return next(live.reference[k] for k in live.tier_only if k[0] == topic)


def queue_max(live: History, topic: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for t, q, o in live.reference:
        if t == topic:
            out[q] = max(out.get(q, 0), o + 1)
    return out


def shows(out: str, m: dict[str, Any]) -> None:
    """``out`` is mqadmin's print-out of message ``m`` (queryMsgBy*)."""
    for line in (
        f"Topic:               {m['topic']}",
        f"Queue ID:            {m['queueId']}",
        f"Queue Offset:        {m['queueOffset']}",
        f"UNIQ_KEY={m['msgId']}",
    ):
        assert line in out, f"{line!r} not in:\n{out}"


def test_mqadmin_reads_deleted_messages_through_the_sidecar(live: History) -> None:
    """mqadmin against the sidecar (``-n`` = its replay port), for messages the broker deleted;
    mqadmin exits 0 even when it fails, so what it prints is checked."""
    gone = tier_only_message(live, MAIN)
    keyed = next(
        live.reference[k] for k in live.tier_only if live.reference[k].get("keys") == "bulk-a-0"
    )
    b = live.broker.broker_name
    commands = {
        "clusterList": ["clusterList"],
        "topicList": ["topicList"],
        "topicRoute": ["topicRoute", "-t", MAIN],
        "topicStatus": ["topicStatus", "-t", MAIN],
        "queryMsgByKey": ["queryMsgByKey", "-t", MAIN, "-k", "bulk-a-0"],
        "localKey": ["queryMsgByKey", "-t", LOCAL_ONLY, "-k", "bulk-local-7"],
        "queryMsgByUniqueKey": ["queryMsgByUniqueKey", "-t", MAIN, "-i", gone["msgId"]],
        "queryMsgById": ["queryMsgById", "-t", MAIN, "-i", gone["msgId"]],
        "queryMsgByOffset": [
            "queryMsgByOffset", "-t", MAIN, "-b", b, "-i", str(gone["queueId"]),
            "-o", str(gone["queueOffset"]),
        ],
        "consumerProgress": ["consumerProgress", "-g", "it-push"],
        "printMsgByQueue": ["printMsgByQueue", "-t", ONE, "-a", b, "-i", "0", "-p", "true"],
    }  # fmt: skip
    printed = live.rocketmq.mqadmin(live.sidecar.name_server, *commands.values())
    out = dict(zip(commands, printed, strict=True))
    for name, text in out.items():
        print(f"--- mqadmin {' '.join(commands[name])}\n{text[:1500]}")
    sidecar = live.sidecar.name_server
    assert f"{live.cfg.broker_cluster_name}" in out["clusterList"]
    assert f"{b}" in out["clusterList"] and sidecar in out["clusterList"]
    assert "V5_3_3" in out["clusterList"]
    assert set(TOPICS) <= set(out["topicList"].split())
    assert f'"readQueueNums":{TOPICS[MAIN]}' in out["topicRoute"] and sidecar in out["topicRoute"]
    rows = [line.split() for line in out["topicStatus"].splitlines() if line.startswith(b)]
    assert {int(r[1]): (int(r[2]), int(r[3])) for r in rows} == {
        q: (0, end) for q, end in queue_max(live, MAIN).items()
    }
    assert keyed["msgId"] in out["queryMsgByKey"]
    assert f"{keyed['queueId']}" in out["queryMsgByKey"].split()
    assert f"{keyed['queueOffset']}" in out["queryMsgByKey"].split()
    # a topic the sidecar does not offload: found through the broker's own index files
    assert out["localKey"].count("\n") >= 2 and "#Message ID" in out["localKey"], out["localKey"]
    for name in ("queryMsgByUniqueKey", "queryMsgById", "queryMsgByOffset"):
        shows(out[name], gone)
    rows = [line.split() for line in out["consumerProgress"].splitlines() if line.startswith(MAIN)]
    assert {int(r[2]): int(r[3]) for r in rows} == queue_max(live, MAIN)
    want = sorted(m["msgId"] for (t, q, _), m in live.reference.items() if (t, q) == (ONE, 0))
    got = sorted(line.split()[1] for line in out["printMsgByQueue"].splitlines()
                 if line.startswith("MSGID: "))  # fmt: skip
    assert got == want
