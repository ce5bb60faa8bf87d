"""RocketMQ 5's gRPC clients replay the tier through a real RocketMQ Proxy (5.3.3, cluster mode)
whose name server is the sidecar's replay port: every receive reaches the sidecar as POP.

One history for the module: the Java producer sends :data:`COUNT` messages to :data:`TOPIC`, a
reference consumer reads them from the broker, the sidecar offloads them and the broker deletes
its old commitlog files (the oldest messages are then only in the tier). The proxy starts
against the sidecar alone (its heartbeat-sync topic -- not the default name: the sidecar lists it
in ``tieredRemotingProxySyncTopics`` --, the cluster's and the broker's routes, the group configs
it asks for are the sidecar's); the tests then consume through it with ``rocketmq-client-java``
and compare with the reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest
from tiered.providers.registry import from_config

from tiered.config import load_config
from tiered.remoting.client import RemotingClient
from tiered.testing.grpc_proxy import Proxy
from tiered.testing.grpc_proxy import compiling_grpc_driver
from tiered.testing.grpc_proxy import run_grpc_driver
from tiered.testing.http import get
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.realbroker import free_port
from tiered.testing.replay_check import delete_old_commitlog
from tiered.testing.replay_check import messages
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier

TOPIC = "GrpcMain"
QUEUES = 4
COUNT = 2400  # 4000-byte bodies (not compressed): ~9.6 MiB, the broker's commitlog rolls twice
PYTHON_CONSUMER = Path(__file__).parent / "grpc_python_consume.py"
SYNC_TOPIC = "ReplayHeartBeatSync"
"""The proxy's ``heartbeatSyncerTopicName`` (not its default), listed in the sidecar's
``tieredRemotingProxySyncTopics``."""
FIFO_FAILING = QUEUES
"""Messages the FIFO test's consumer fails every time, one per queue: its group allows 1 retry (2
attempts), then the client forwards them to the DLQ (the sidecar records them)."""


@dataclass
class GrpcHistory:
    broker: Broker
    namesrv: str
    rocketmq: Runtime
    sidecar: Sidecar
    proxy: Proxy
    classes: Path
    reference: dict[str, dict[str, Any]]  # msgId -> the reference consumer's message
    local_min: dict[int, int] = field(default_factory=dict)

    def grpc(self, command: str, timeout: float = 180, **args: Any) -> list[dict[str, Any]]:
        """Run ``GrpcDriver <command>`` against the proxy; its JSON lines."""
        return run_grpc_driver(self.rocketmq, self.classes, self.proxy, command, timeout, **args)

    def push_held(
        self, release: Path, what: str, until: Callable[[], bool], **args: Any
    ) -> list[dict[str, Any]]:
        """``GrpcDriver push``, its consumer kept open until ``until()`` (what the client still
        sends after its listener returned -- acks, a FIFO group's forwards to the DLQ -- is not
        cut off by its close), then released through the file ``release``."""
        with ThreadPoolExecutor(1) as pool:
            driver = pool.submit(self.grpc, "push", holdUntilFile=str(release), **args)
            try:
                wait_for(what, lambda: driver.done() or until(), 170)
            finally:
                release.touch()
            return driver.result()

    def ends(self) -> dict[int, int]:
        """Each queue's end: where a group that consumed everything has its offset."""
        return {
            q: max(m["queueOffset"] for m in self.reference.values() if m["queueId"] == q) + 1
            for q in range(QUEUES)
        }

    def tier_only(self, msg_id: str) -> bool:
        m = self.reference[msg_id]
        return bool(m["queueOffset"] < self.local_min[m["queueId"]])

    def committed(self, group: str) -> dict[int, int]:
        """The group's consumer offset per queue, as the sidecar answers it."""
        out = {}
        with RemotingClient("127.0.0.1", self.sidecar.port) as c:
            for q in range(QUEUES):
                r = c.call(14, consumerGroup=group, topic=TOPIC, queueId=q)
                assert r.code == 0, r.remark
                out[q] = int(r.ext_fields["offset"])
        return out


@pytest.fixture(scope="module")
def grpc_history(
    broker: Broker, namesrv: NameServer, rocketmq: Runtime, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GrpcHistory]:
    started = time.monotonic()
    work = tmp_path_factory.mktemp("grpc")
    conf = sidecar_conf(
        work / "sidecar.conf", work, tieredStoreTopicInclude=TOPIC, tieredRemotingPort=free_port(),
        tieredRemotingProxySyncTopics=SYNC_TOPIC,
    )  # fmt: skip
    car = Sidecar(conf, work / "run", broker_conf=broker.conf)
    car.start()
    proxy = Proxy(rocketmq, "proxy", work / "proxy", sync_topic=SYNC_TOPIC)
    proxy.workdir.mkdir()
    proxy.namesrv, proxy.cluster = f"127.0.0.1:{car.port}", broker.cluster
    try:
        proxy.launch()  # it starts (against the sidecar alone) while the history is written
        compiled = compiling_grpc_driver(work / "classes")
        common: dict[str, Any] = {"namesrv": namesrv.address, "broker": broker.address}
        rocketmq.driver(
            "bulk", seed=47, topic=TOPIC, count=COUNT, size=4000, keyEvery=7, tag="grpc",
            topics={TOPIC: QUEUES}, **common,
        )  # fmt: skip
        # a FIFO group with one retry (a message it fails twice goes to the DLQ)
        out = rocketmq.mqadmin(
            namesrv.address,
            ["updateSubGroup", "-b", broker.address, "-g", "grpc-fifo", "-o", "true", "-r", "1"],
        )
        assert "success" in out[0], out
        ref = messages(rocketmq.driver("consume", mode="lite", group="grpc-reference",
                                       topics=[TOPIC], maxMs=120_000, **common))  # fmt: skip
        assert len(ref) == COUNT, (
            f"the reference read {len(ref)} of {COUNT} messages: the broker deleted commitlog "
            f"files by itself (its disk is {broker.disk_used_percent():.0f} % used; above 85 % "
            "it deletes all but the last file): free disk space and run again"
        )
        cfg = load_config([broker.conf, conf])
        provider = from_config(cfg)
        wait_for(
            "the tier to catch up",
            lambda: check_tier(cfg, provider, topics={TOPIC}).problems == [],
            60,
        )
        waited = max(0.0, broker.started_at + 61 - time.time())  # the broker's cleaning task
        delete_old_commitlog(rocketmq, namesrv.address, broker)
        classes = compiled()
        proxy.wait_ready(timeout=120)
        h = GrpcHistory(
            broker,
            namesrv.address,
            rocketmq,
            car,
            proxy,
            classes,
            {m["msgId"]: m for m in ref.values()},
        )
        for q in range(QUEUES):
            reply = get(car.http, f"/v1/topics/{TOPIC}/queues/{q}/offsets").json()
            h.local_min[q] = reply["localMin"]
        print(f"grpc history ready in {time.monotonic() - started:.1f} s, {waited:.1f} s of it "
              "waiting for the shared broker's cleaning task (60 s after its start)")  # fmt: skip
        yield h
    finally:
        ending = time.monotonic()
        stopping = threading.Thread(target=proxy.stop, kwargs={"grace": 5})
        stopping.start()  # while the rest stops
        car.stop()
        # the shared broker as the other modules expect it: without this module's topic (the
        # broker deletes it; the name server's half of deleteTopic may fail, which is harmless)
        rocketmq.mqadmin(namesrv.address, ["deleteTopic", "-c", broker.cluster, "-t", TOPIC])
        wait_for(
            f"the broker to delete {TOPIC}",
            lambda: not (broker.store / "consumequeue" / TOPIC).exists(),
            timeout=10,
        )
        stopping.join()
        print(f"grpc history removed in {time.monotonic() - ending:.1f} s")


def _same_as_reference(h: GrpcHistory, got: dict[str, Any]) -> None:
    ref = h.reference[got["msgId"]]
    assert (got["bodySha256"], got["bodyLength"], got["tag"]) == (
        ref["bodySha256"], ref["bodyLength"], ref["tags"],
    )  # fmt: skip
    assert got["keys"] == " ".join(sorted((ref.get("keys") or "").split())), got


def test_java_simple_consumer_acks_every_message_once(grpc_history: GrpcHistory) -> None:
    h = grpc_history
    lines = h.grpc(
        "simple", group="grpc-simple", topic=TOPIC, expect=COUNT, batch=32,
        invisibleMs=30_000, maxMs=150_000,
    )  # fmt: skip
    got = [line["msg"] for line in lines if "msg" in line]
    ids = [m["msgId"] for m in got]
    assert len(ids) == len(set(ids)) == COUNT, "a message was received twice, or not at all"
    assert set(ids) == set(h.reference)
    assert all(m["attempt"] == 1 for m in got)
    for m in got:
        _same_as_reference(h, m)
    tier_only = sum(h.tier_only(i) for i in ids)
    assert tier_only > 0, "no message only the tier holds was read"
    print(f"java simple: {len(ids)} received, {lines[-1]['acked']} acked, {tier_only} tier-only")
    done = lines[-1]
    assert (done["received"], done["acked"]) == (COUNT, COUNT)
    ends = h.ends()
    wait_for("the acks to reach the sidecar", lambda: h.committed("grpc-simple") == ends, 10)


def test_java_unacked_batch_comes_back_with_delivery_attempt_2(grpc_history: GrpcHistory) -> None:
    h = grpc_history
    lines = h.grpc(
        "redeliver", group="grpc-again", topic=TOPIC, batch=4, invisibleMs=1500,
        postponeMs=4000, maxMs=60_000,
    )  # fmt: skip
    got = [line["msg"] for line in lines if "msg" in line]
    first = [m for m in got if m["event"] == "notAcked"]
    again = [m for m in got if m["event"] == "again"]
    (postponed,) = [line["postponed"] for line in lines if "postponed" in line]
    assert len(first) == 4 and lines[-1]["stillWaiting"] == 0
    assert {m["msgId"] for m in again} == {m["msgId"] for m in first}
    assert all(m["attempt"] == 2 for m in again)
    assert not any(m.get("early") for m in again), "a postponed message came back early"
    late = next(m for m in again if m["msgId"] == postponed)
    others = [m["at"] for m in again if m["msgId"] != postponed]
    assert late["at"] > max(others), "changeInvisibleDuration did not postpone the message"
    for m in got:
        _same_as_reference(h, m)
    print(f"java redeliver: {len(first)} not acked, {len(again)} back with attempt 2, "
          f"the postponed one {late['at'] - max(others)} ms after the others")  # fmt: skip


def test_java_push_consumer_consumes_every_message_once(
    grpc_history: GrpcHistory, tmp_path: Path
) -> None:
    h = grpc_history
    ends = h.ends()
    lines = h.push_held(
        tmp_path / "release", "the acks to reach the sidecar",
        lambda: h.committed("grpc-push") == ends,
        group="grpc-push", topic=TOPIC, expect=COUNT, settleMs=1000, maxMs=150_000,
    )  # fmt: skip
    got = [line["msg"] for line in lines if "msg" in line]
    ids = [m["msgId"] for m in got]
    assert len(ids) == len(set(ids)) == COUNT and set(ids) == set(h.reference)
    assert all(m["attempt"] == 1 for m in got)
    for m in got:
        _same_as_reference(h, m)
    assert h.committed("grpc-push") == ends
    tier_only = sum(h.tier_only(i) for i in ids)
    print(f"java push: {len(ids)} consumed once, {tier_only} tier-only")


def test_java_fifo_group_receives_each_queue_in_order(
    grpc_history: GrpcHistory, tmp_path: Path
) -> None:
    """A group created orderly with one retry on the broker (``mqadmin updateSubGroup -o true
    -r 1``): the sidecar serves the broker's config, the proxy pops orderly, a PushConsumer
    consumes each queue in offset order. The few messages its listener fails every time are
    consumed again in place (attempt 2), then the client forwards them to the DLQ -- the proxy's
    CONSUMER_SEND_MSG_BACK, which the sidecar records as the group's dead letters (nothing is
    written to the broker) -- and the queue goes on; the group's progress moves past them."""
    h = grpc_history
    failing = set()  # one per queue: tier-only in queues 0 and 2, the broker's in 1 and 3
    for q in range(QUEUES):
        queue = sorted((m["queueOffset"], i) for i, m in h.reference.items() if m["queueId"] == q)
        failing.add(queue[1 if q % 2 == 0 else h.local_min[q] + 1][1])
    assert any(h.tier_only(i) for i in failing) and not all(h.tier_only(i) for i in failing)
    where = {(h.reference[i]["queueId"], h.reference[i]["queueOffset"]) for i in failing}

    def dead_letters() -> set[tuple[int, ...]]:
        rows = get(h.sidecar.http, "/v1/status").json()["popDeadLetters"]
        return {tuple(x) for r in rows if r["group"] == "grpc-fifo" for x in r["latest"]}

    # the client forwards a message to the DLQ after its listener's last failure, on a thread of
    # its own: the consumer stays open until the sidecar has every dead letter and ack
    ends = h.ends()
    lines = h.push_held(
        tmp_path / "release", "the dead letters and acks to reach the sidecar",
        lambda: dead_letters() == where and h.committed("grpc-fifo") == ends,
        group="grpc-fifo", topic=TOPIC, expect=COUNT - FIFO_FAILING, fail=sorted(failing),
        expectFailures=2 * FIFO_FAILING, settleMs=1000, maxMs=150_000,
    )  # fmt: skip
    seen = dead_letters()
    assert seen == where, f"dead letters {sorted(seen)}, expected {sorted(where)}"
    assert h.committed("grpc-fifo") == ends
    got = [line["msg"] for line in lines if "msg" in line]
    consumed = [m["msgId"] for m in got if m["event"] == "consumed"]
    assert len(consumed) == len(set(consumed)) == COUNT - FIFO_FAILING
    assert set(consumed) | failing == set(h.reference) and not set(consumed) & failing
    assert all(m["attempt"] == 1 for m in got if m["event"] == "consumed")
    attempts = sorted((m["msgId"], m["attempt"]) for m in got if m["event"] == "failed")
    assert attempts == sorted((i, n) for i in failing for n in (1, 2))
    per_queue: dict[int, list[int]] = {}
    for m in got:
        _same_as_reference(h, m)
        ref = h.reference[m["msgId"]]
        per_queue.setdefault(ref["queueId"], []).append(ref["queueOffset"])
    for offsets in per_queue.values():  # in order; a failed one twice in a row
        assert offsets == sorted(offsets)
    tier_only = sum(h.tier_only(i) for i in consumed)
    print(f"java fifo: {len(consumed)} consumed once in queue order, {tier_only} tier-only; "
          f"{FIFO_FAILING} failed {len(attempts)} times in all, dead-lettered at "
          f"{sorted(where)}")  # fmt: skip


def test_python_simple_consumer_acks_every_message_once(grpc_history: GrpcHistory) -> None:
    """``rocketmq-python-client`` (pinned in the dev extra) through the same proxy."""
    h = grpc_history
    args = {"endpoint": h.proxy.endpoint, "group": "grpc-python", "topic": TOPIC,
            "expect": COUNT, "batch": 32}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(PYTHON_CONSUMER), json.dumps(args)],
        capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines and lines[-1].get("done"), done.stderr[-6000:]
    got = [line["msg"] for line in lines if "msg" in line]
    ids = [m["msgId"] for m in got]
    assert len(ids) == len(set(ids)) == COUNT and set(ids) == set(h.reference)
    assert all(m["attempt"] == 1 for m in got)
    for m in got:
        _same_as_reference(h, m)
    assert (lines[-1]["received"], lines[-1]["acked"]) == (COUNT, COUNT)
    tier_only = sum(h.tier_only(i) for i in ids)
    print(f"python simple: {len(ids)} received, {lines[-1]['acked']} acked, {tier_only} tier-only")


def test_remoting_push_consumer_switched_to_pop(grpc_history: GrpcHistory) -> None:
    """A 5.x remoting DefaultMQPushConsumer whose group was switched to POP with ``mqadmin
    setConsumeMode`` against the sidecar (no proxy): the sidecar assigns it the topic's queues
    in POP mode, and it pops and acks every message once."""
    h = grpc_history
    sidecar = f"127.0.0.1:{h.sidecar.port}"
    out = h.rocketmq.mqadmin(sidecar, ["setConsumeMode", "-b", sidecar, "-t", TOPIC,
                                       "-g", "remoting-pop", "-m", "POP", "-q", "0"])  # fmt: skip
    assert "success" in out[0], out
    lines = h.rocketmq.driver(
        "consume", mode="push", group="remoting-pop", topics=[TOPIC], namesrv=sidecar,
        serverRebalance=True, stopAfter=COUNT, idleMs=20_000, maxMs=150_000,
    )  # fmt: skip
    got = messages(lines)  # fails on a message consumed twice
    assert {m["msgId"] for m in got.values()} == set(h.reference)
    assert all(m["reconsumeTimes"] == 0 for m in got.values())
    tier_only = sum(h.tier_only(m["msgId"]) for m in got.values())
    print(f"remoting pop: {len(got)} consumed once, {tier_only} tier-only")
    ends = h.ends()
    wait_for("the acks to reach the sidecar", lambda: h.committed("remoting-pop") == ends, 10)


def test_the_proxy_started_against_the_sidecar_alone(grpc_history: GrpcHistory) -> None:
    """What the proxy asked and how it was answered: POP and its acks, the group configs, the
    routes; nothing it sent was refused but its writes (heartbeat-sync topic messages)."""
    h = grpc_history
    asked: dict[tuple[str, str], float] = {}
    text = get(h.sidecar.http, "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith("rocketmq_tiered_store_remoting_requests_total{"):
            labels = dict(
                part.split("=", 1)
                for part in line[line.index("{") + 1 : line.index("}")].split(",")
            )
            key = (labels["code"].strip('"'), labels["result"].strip('"'))
            asked[key] = float(line.rsplit(" ", 1)[1])
    print("requests the proxy sent the sidecar:", json.dumps({f"{c} {r}": n
          for (c, r), n in sorted(asked.items())}))  # fmt: skip
    for code in ("POP_MESSAGE", "ACK_MESSAGE", "GET_SUBSCRIPTIONGROUP_CONFIG", "QUERY_ASSIGNMENT",
                 "CHANGE_MESSAGE_INVISIBLETIME", "CONSUMER_SEND_MSG_BACK"):  # fmt: skip
        assert asked.get((code, "SUCCESS"), 0) > 0, (code, asked)
    refused = {k: n for k, n in asked.items()
               if k[1] in ("REQUEST_CODE_NOT_SUPPORTED", "NO_PERMISSION")}  # fmt: skip
    assert not refused, refused
    assert h.proxy.proc is not None and h.proxy.proc.poll() is None  # still up


def test_a_sidecar_restart_keeps_acks_and_redelivers_what_was_in_flight(
    grpc_history: GrpcHistory,
) -> None:
    h = grpc_history
    first = h.grpc(
        "simple", group="grpc-restart", topic=TOPIC, expect=COUNT, batch=32, stopAfter=COUNT // 2,
        leaveInFlight=True, invisibleMs=3000, maxMs=120_000, ackAsync=True,
    )  # fmt: skip
    msgs = [line["msg"] for line in first if "msg" in line]
    acked = {m["msgId"] for m in msgs if m["event"] == "received"}
    in_flight = {m["msgId"] for m in msgs if m["event"] == "notAcked"}
    assert len(acked) >= COUNT // 2 and in_flight and not acked & in_flight
    h.sidecar.stop()  # SIGTERM: the POP state is written
    h.sidecar.start()  # the same replay port: the proxy reconnects
    second = h.grpc(
        "simple", group="grpc-restart", topic=TOPIC, expect=COUNT - len(acked), batch=32,
        invisibleMs=30_000, maxMs=150_000, ackAsync=True,
    )  # fmt: skip
    again = [line["msg"] for line in second if "msg" in line]
    ids = [m["msgId"] for m in again]
    assert len(ids) == len(set(ids)) and not set(ids) & acked, "an acked message came back"
    assert set(ids) | acked == set(h.reference)
    assert {m["msgId"] for m in again if m["attempt"] == 2} == in_flight
    print(f"restart: {len(acked)} acked before, {len(in_flight)} in flight, {len(ids)} after")
