"""POP on the replay endpoint, in-process over a tier whose oldest history only the tier holds:
every message popped and acked once, unacked ones back after their invisible time with
``reconsumeTimes`` counted up, invisible-time changes, orderly pops one batch at a time, long
polling, tag filters, progress as the group's consumer offset, a restart, and what a proxy asks
besides (the subscription-group config)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiered.access.security import Security
from tiered.broker import message as msgcodec
from tiered.remoting.client import RemotingClient
from tiered.remoting.client import split_messages
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.frame import Command
from tiered.remoting.groups import ReplayOffsets
from tiered.remoting.handlers import Replay
from tiered.remoting.naming import Naming
from tiered.remoting.pop_state import PopState
from tiered.remoting.server import RemotingServer
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory
from .conftest import expected_messages

Popped = list[tuple[int, int, msgcodec.Message]]  # (queue id, offset, message)


def pop(
    c: RemotingClient, group: str, *, queue_id: int = -1, nums: int = 32,
    invisible: int = 60_000, poll: int = 0, order: bool = False, exp: str = "*",
) -> tuple[Command, Popped]:  # fmt: skip
    r = c.call(
        Req.POP_MESSAGE, consumerGroup=group, topic=TOPIC, queueId=queue_id, maxMsgNums=nums,
        invisibleTime=invisible, pollTime=poll, bornTime=int(time.time() * 1000), initMode=1,
        expType="TAG", exp=exp, order=str(order).lower(),
    )  # fmt: skip
    if r.code != Res.SUCCESS:
        assert r.code == Res.POLLING_TIMEOUT, (r.code, r.remark)
        assert {"popTime", "invisibleTime", "reviveQid", "restNum"} <= set(r.ext_fields)
        return r, []
    messages = [msgcodec.decode(m) for m in split_messages(r.body)]
    ext = r.ext_fields
    listed = {}  # what the client builds its handles from: per queue, the sorted offsets
    for entry in ext["msgOffsetInfo"].split(";"):
        mark, queue, offsets = entry.split(" ")
        assert mark == "0"
        listed[int(queue)] = [int(o) for o in offsets.split(",")]
    got = sorted((m.queue_id, m.queue_offset, m) for m in messages)
    by_queue: dict[int, list[int]] = {}
    for q, o, _ in got:
        by_queue.setdefault(q, []).append(o)
    assert listed == by_queue
    starts = {int(e.split(" ")[1]): int(e.split(" ")[2]) for e in ext["startOffsetInfo"].split(";")}
    assert starts == {q: offsets[0] for q, offsets in by_queue.items()}
    return r, got


def handle(r: Command, q: int, offset: int) -> str:
    ext = r.ext_fields
    pop_time, invisible, revive = ext["popTime"], ext["invisibleTime"], ext["reviveQid"]
    return f"{offset} {pop_time} {invisible} {revive} 0 broker-a {q} {offset}"


def ack(c: RemotingClient, group: str, r: Command, q: int, offset: int) -> None:
    a = c.call(
        Req.ACK_MESSAGE, consumerGroup=group, topic=TOPIC, queueId=q, offset=offset,
        extraInfo=handle(r, q, offset),
    )  # fmt: skip
    assert a.code == Res.SUCCESS, a.remark


def batch_ack(c: RemotingClient, group: str, r: Command, popped: Popped) -> None:
    acks = []
    for q in sorted({q for q, _, _ in popped}):
        offsets = [o for qq, o, _ in popped if qq == q]
        start = min(offsets)
        bits = bytearray((max(offsets) - start) // 8 + 1)
        for o in offsets:
            bits[(o - start) // 8] |= 1 << ((o - start) % 8)
        acks.append({
            "c": group, "t": TOPIC, "r": "0", "so": start, "q": q, "rq": 0,
            "pt": int(r.ext_fields["popTime"]), "it": 60000,
            "b": base64.b64encode(bytes(bits)).decode(),
        })  # fmt: skip
    body = json.dumps({"brokerName": "broker-a", "acks": acks}).encode()
    assert c.call(Req.BATCH_ACK_MESSAGE, body).code == Res.SUCCESS


def committed(c: RemotingClient, group: str, q: int) -> int:
    r = c.call(Req.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=TOPIC, queueId=q)
    assert r.code == Res.SUCCESS, r.remark
    return int(r.ext_fields["offset"])


def test_every_message_popped_and_acked_once(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    expected = expected_messages(history, TOPIC)
    seen: dict[tuple[int, int], msgcodec.Message] = {}
    with ep.client() as c:
        for i in range(len(expected)):
            r, got = pop(c, "all")
            if not got:
                break
            for q, o, m in got:
                assert (q, o) not in seen, f"{q}/{o} delivered twice"
                seen[(q, o)] = m
                assert m.reconsume_times == 0
            if i % 2:
                batch_ack(c, "all", r, got)
            else:
                for q, o, _ in got:
                    ack(c, "all", r, q, o)
        assert seen.keys() == expected.keys()
        assert all(seen[k].body == expected[k].body for k in expected)
        r, got = pop(c, "all")
        assert not got and r.ext_fields["restNum"] == "0"
        ends = {q: max(o for qq, o in expected if qq == q) + 1 for q, _ in expected}
        assert {q: committed(c, "all", q) for q in ends} == ends
        # what only the tier holds was served too (the broker deleted its oldest files)
        assert min(o for _, o in expected) == 0


def test_unacked_come_back_counted_and_invisible_time_changes(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        r1, first = pop(c, "again", queue_id=2, nums=4, invisible=400)
        assert [o for _, o, _ in first] == [0, 1, 2, 3]
        r2, second = pop(c, "again", queue_id=2, nums=4, invisible=60_000)
        assert [o for _, o, _ in second] == [4, 5, 6, 7]  # the first batch is invisible
        postpone = c.call(
            Req.CHANGE_MESSAGE_INVISIBLETIME, consumerGroup="again", topic=TOPIC, queueId=2,
            offset=3, extraInfo=handle(r1, 2, 3), invisibleTime=60_000,
        )  # fmt: skip
        assert postpone.code == Res.SUCCESS
        assert int(postpone.ext_fields["invisibleTime"]) == 60_000
        ack(c, "again", r1, 2, 0)
        now = c.call(
            Req.CHANGE_MESSAGE_INVISIBLETIME, consumerGroup="again", topic=TOPIC, queueId=2,
            offset=5, extraInfo=handle(r2, 2, 5), invisibleTime=0,
        )  # fmt: skip
        assert now.code == Res.SUCCESS
        time.sleep(0.5)
        _, third = pop(c, "again", queue_id=2, nums=3)
        # 0 acked, 3 postponed; 1 and 2 ran out, 5 was made visible at once
        assert [(o, m.reconsume_times) for _, o, m in third] == [(1, 1), (2, 1), (5, 1)]
        assert third[0][2].body == first[1][2].body
        assert committed(c, "again", 2) == 1


def test_orderly_pops_one_batch_per_queue(history: SampleTier, endpoint: EndpointFactory) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        r, got = pop(c, "fifo", queue_id=1, nums=3, order=True, invisible=300)
        assert [o for _, o, _ in got] == [0, 1, 2] and r.ext_fields["reviveQid"] == "999"
        assert r.ext_fields["orderCountInfo"] == "0 qo1%0 0;0 qo1%1 0;0 qo1%2 0"
        none, nothing = pop(c, "fifo", queue_id=1, nums=3, order=True)
        assert not nothing and none.code == Res.POLLING_TIMEOUT
        ack(c, "fifo", r, 1, 0)
        started = time.monotonic()
        r, again = pop(c, "fifo", queue_id=1, nums=3, order=True, poll=5000)  # held until 300 ms
        assert time.monotonic() - started < 3
        assert [(o, m.reconsume_times) for _, o, m in again] == [(1, 1), (2, 1)]
        assert r.ext_fields["orderCountInfo"] == "0 qo1%1 1;0 qo1%2 1"
        for _, o, _ in again:
            ack(c, "fifo", r, 1, o)
        _, nxt = pop(c, "fifo", queue_id=1, nums=3, order=True)
        assert [o for _, o, _ in nxt] == [3, 4, 5]


def test_a_held_pop_is_answered_at_its_poll_time(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        pop(c, "held", queue_id=0, nums=2, order=True)
        started = time.monotonic()
        r, got = pop(c, "held", queue_id=0, order=True, poll=600)
        assert not got and r.code == Res.POLLING_TIMEOUT
        assert 0.5 <= time.monotonic() - started < 5


def test_tag_filter(history: SampleTier, endpoint: EndpointFactory) -> None:
    ep = endpoint(history)
    expected = {k: m for k, m in expected_messages(history, TOPIC).items() if k[0] == 3}
    tag = expected[(3, 0)].tags
    assert tag is not None
    want = {k for k, m in expected.items() if m.tags == tag}
    seen: set[tuple[int, int]] = set()
    with ep.client() as c:
        for _ in range(len(expected)):
            r, got = pop(c, "tags", queue_id=3, exp=tag)
            if not got:
                break
            seen.update((q, o) for q, o, _ in got)
            batch_ack(c, "tags", r, got)
        assert seen == want and len(want) < len(expected)
        assert committed(c, "tags", 3) == max(o for _, o in expected) + 1  # the rest: filtered


def test_sql_and_unknown_topics_refused(history: SampleTier, endpoint: EndpointFactory) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        r = c.call(Req.POP_MESSAGE, consumerGroup="g", topic=TOPIC, queueId=-1, maxMsgNums=1,
                   invisibleTime=1000, pollTime=0, bornTime=0, initMode=0, expType="SQL92",
                   exp="a > 1")  # fmt: skip
        assert r.code == Res.SUBSCRIPTION_PARSE_FAILED and "subscribe with tags" in str(r.remark)
        retry = "%RETRY%g_" + TOPIC
        r = c.call(Req.POP_MESSAGE, consumerGroup="g", topic=retry, queueId=-1, maxMsgNums=1,
                   invisibleTime=1000, pollTime=0, bornTime=0, initMode=0)  # fmt: skip
        assert r.code == Res.POLLING_TIMEOUT  # a retry topic: never written, always empty
        r = c.call(Req.POP_MESSAGE, consumerGroup="g", topic="NoSuchTopic", queueId=-1,
                   maxMsgNums=1, invisibleTime=1000, pollTime=0, initMode=0)  # fmt: skip
        assert r.code == Res.TOPIC_NOT_EXIST


def test_subscription_group_config(history: SampleTier, endpoint: EndpointFactory) -> None:
    ep = endpoint(history)
    config_dir = Path(history.cfg.store_path_root_dir) / "config"
    config_dir.mkdir(exist_ok=True)
    table = {"fifoGroup": {"groupName": "fifoGroup", "consumeMessageOrderly": True,
                           "retryMaxTimes": 3}}  # fmt: skip
    (config_dir / "subscriptionGroup.json").write_text(
        json.dumps({"subscriptionGroupTable": table})
    )
    try:
        with ep.client() as c:
            r = c.call(Req.GET_SUBSCRIPTIONGROUP_CONFIG, group="someone")
            assert r.code == Res.SUCCESS
            body = json.loads(r.body)
            assert (body["groupName"], body["retryMaxTimes"], body["consumeEnable"]) == (
                "someone", 16, True,
            )  # fmt: skip
            assert body["consumeMessageOrderly"] is False
            body = json.loads(c.call(Req.GET_SUBSCRIPTIONGROUP_CONFIG, group="fifoGroup").body)
            assert (body["consumeMessageOrderly"], body["retryMaxTimes"]) == (True, 3)
    finally:
        (config_dir / "subscriptionGroup.json").unlink()


def test_redelivered_past_retry_max_times_is_dead_lettered(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    config_dir = Path(history.cfg.store_path_root_dir) / "config"
    config_dir.mkdir(exist_ok=True)
    table = {"dlq": {"groupName": "dlq", "retryMaxTimes": 1}}
    (config_dir / "subscriptionGroup.json").write_text(
        json.dumps({"subscriptionGroupTable": table})
    )
    try:
        with ep.client() as c:
            times = []
            for _ in range(3):
                _, got = pop(c, "dlq", queue_id=0, nums=1, invisible=100, order=True)
                times += [(o, m.reconsume_times) for _, o, m in got]
                time.sleep(0.15)
            assert times == [(0, 0), (0, 1), (1, 0)]  # then 0 is dead-lettered, 1 comes
        assert ep.replay.pop_state.dead_letters("dlq", TOPIC) == (1, [(0, 0)])
    finally:
        (config_dir / "subscriptionGroup.json").unlink()


def test_refused_codes_logged_once(
    history: SampleTier, endpoint: EndpointFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ep = endpoint(history)
    with caplog.at_level(logging.WARNING, "tiered.remoting.handlers"), ep.client() as c:
        for _ in range(3):
            r = c.call(Req.POP_ROLLBACK)
            assert r.code == Res.REQUEST_CODE_NOT_SUPPORTED
            assert "request code 200056 (POP_ROLLBACK)" in str(r.remark)
            assert "replayPopState.json" in str(r.remark)
            assert "send it to the broker" in str(r.remark)
            r = c.call(200999)
            assert r.code == Res.REQUEST_CODE_NOT_SUPPORTED
            assert "send this request to the broker" in str(r.remark)
    assert sum("200056" in m for m in caplog.messages) == 1
    assert sum("200999" in m for m in caplog.messages) == 1


@pytest.fixture
def restartable(tmp_path: Path, history: SampleTier) -> Iterator[object]:
    servers: list[RemotingServer] = []

    def start() -> RemotingServer:
        store = history.store(history.cfg.tiered_storage_level)
        offsets = ReplayOffsets(tmp_path / "config")
        offsets.load()
        state = PopState(tmp_path / "config")
        state.load()
        holder: list[RemotingServer] = []
        replay = Replay(
            store.cfg, store, Naming(store.cfg, store, lambda: holder[0].address),
            offsets=offsets, pop_state=state,
        )  # fmt: skip
        srv = RemotingServer(replay, "127.0.0.1", 0, flush=replay.flush)
        holder.append(srv)
        srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


def test_a_restart_keeps_acks_and_redelivers_what_was_in_flight(restartable: object) -> None:
    start = restartable
    assert callable(start)
    srv = start()
    with RemotingClient("127.0.0.1", srv.port) as c:
        r, got = pop(c, "restart", queue_id=1, nums=6, invisible=500)
        for _, o, _ in got[:3]:
            ack(c, "restart", r, 1, o)
    srv.stop()  # writes the state
    srv = start()
    with RemotingClient("127.0.0.1", srv.port) as c:
        time.sleep(0.6)
        _, again = pop(c, "restart", queue_id=1, nums=6)
        assert [(o, m.reconsume_times) for _, o, m in again] == [
            (3, 1), (4, 1), (5, 1), (6, 0), (7, 0), (8, 0),
        ]  # fmt: skip
        assert committed(c, "restart", 1) == 3


def _beat(c: RemotingClient, client: str, group: str) -> None:
    data = {"clientID": client, "consumerDataSet": [{"groupName": group,
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}  # fmt: skip
    assert c.call(Req.HEART_BEAT, json.dumps(data).encode()).code == Res.SUCCESS


def _assigned(c: RemotingClient, group: str, client: str) -> list[tuple[int, str]]:
    body = {"topic": TOPIC, "consumerGroup": group, "clientId": client,
            "strategyName": "AVG", "messageModel": "CLUSTERING"}  # fmt: skip
    r = c.call(Req.QUERY_ASSIGNMENT, json.dumps(body).encode())
    assert r.code == Res.SUCCESS, r.remark
    found = json.loads(r.body)["messageQueueAssignments"]
    return sorted((a["messageQueue"]["queueId"], a["mode"]) for a in found)


def test_set_consume_mode_and_query_assignment(
    history: SampleTier, endpoint: EndpointFactory, tmp_path: Path
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        _beat(c, "a@1", "modes")
        _beat(c, "b@1", "modes")
        assert _assigned(c, "modes", "a@1") == [(0, "PULL"), (1, "PULL")]  # averagely
        assert _assigned(c, "modes", "b@1") == [(2, "PULL"), (3, "PULL")]
        assert _assigned(c, "modes", "stranger") == []
        mode = {"topic": TOPIC, "consumerGroup": "modes", "mode": "POP", "popShareQueueNum": 0}
        r = c.call(Req.SET_MESSAGE_REQUEST_MODE, json.dumps(mode).encode())
        assert r.code == Res.SUCCESS, r.remark
        assert _assigned(c, "modes", "a@1") == [(-1, "POP")]  # every queue, popped in turn
        bad = c.call(Req.SET_MESSAGE_REQUEST_MODE, json.dumps({**mode, "topic": "Nope"}).encode())
        assert bad.code == Res.TOPIC_NOT_EXIST
    state = ep.replay.pop_state
    state.flush()
    assert state.path is None  # the fixture's endpoint keeps its state in memory
    kept = PopState(tmp_path)
    kept.set_request_mode(TOPIC, "modes", "POP", 1)
    kept.flush()
    again = PopState(tmp_path)
    again.load()
    assert again.request_mode(TOPIC, "modes") == ("POP", 1)


def test_pops_and_acks_need_sub_on_the_topic_and_group(
    history: SampleTier, endpoint: EndpointFactory, tmp_path: Path
) -> None:
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(
        "accounts:\n"
        "  - {accessKey: reader, secretKey: reader-secret, defaultTopicPerm: DENY,\n"
        f"     defaultGroupPerm: SUB, topicPerms: ['{TOPIC}=SUB']}}\n"
        "  - {accessKey: other, secretKey: other-secret, defaultTopicPerm: DENY}\n"
    )
    ep = endpoint(history, security=Security(accounts_file=accounts, failed_auth_delay_s=0.0))
    reader = RemotingClient("127.0.0.1", ep.server.port, credentials=("reader", "reader-secret"))
    other = RemotingClient("127.0.0.1", ep.server.port, credentials=("other", "other-secret"))
    with reader as c, other as o:
        _, got = pop(c, "acl", queue_id=0, nums=2)
        assert len(got) == 2
        refused = o.call(
            Req.POP_MESSAGE, consumerGroup="acl", topic=TOPIC, queueId=0, maxMsgNums=2,
            invisibleTime=1000, pollTime=0, initMode=0,
        )  # fmt: skip
        assert refused.code == Res.NO_PERMISSION and "SUB permission" in str(refused.remark)
        body = json.dumps({"acks": [{"c": "acl", "t": TOPIC, "so": 0, "q": 0, "b": [0, 1]}]})
        assert o.call(Req.BATCH_ACK_MESSAGE, body.encode()).code == Res.NO_PERMISSION
        assert ep.replay.pop_state.progress(("acl", TOPIC, 0)) == 0  # nothing acked
        assert c.call(Req.BATCH_ACK_MESSAGE, body.encode()).code == Res.SUCCESS
        assert ep.replay.pop_state.progress(("acl", TOPIC, 0)) == 2
