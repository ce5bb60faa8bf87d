"""What a POP consumer and a RocketMQ Proxy ask the replay endpoint besides pop and ack, in-process:
``CONSUMER_SEND_MSG_BACK`` of a popped message (a dead letter, recorded; a pull consumer's is
refused), ``NOTIFICATION`` (long polling for "is there a message"), ``PEEK_MESSAGE``,
``POLLING_INFO``, ``GET_ALL_MESSAGE_REQUEST_MODE``, and the proxies' heartbeat-sync topics
(``tieredRemotingProxySyncTopics``)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tiered import metrics
from tiered.broker import message as msgcodec
from tiered.remoting.client import RemotingClient
from tiered.remoting.client import split_messages
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.frame import Command
from tiered.remoting.pop_state import PopState
from tiered.remoting.registration import Registration
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory
from .conftest import expected_messages
from .test_remoting_pop import ack
from .test_remoting_pop import committed
from .test_remoting_pop import pop


def send_back(c: RemotingClient, group: str, phys: int, topic: str = TOPIC) -> Command:
    """What a proxy sends for ``forwardMessageToDeadLetterQueue``."""
    return c.call(
        Req.CONSUMER_SEND_MSG_BACK, offset=phys, group=group, delayLevel=-1,
        originMsgId="7F000001000000000000000000000000", originTopic=topic,
        maxReconsumeTimes=0,
    )  # fmt: skip


def dead_lettered() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "rocketmq_tiered_store_remoting_pop_messages_total", {"event": "dead_lettered"}
    )
    return value or 0.0


def test_a_message_given_up_on_is_dead_lettered_not_delivered_again(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    state = ep.replay.pop_state
    before = dead_lettered()
    with ep.client() as c:
        r, got = pop(c, "giveup", queue_id=0, nums=4, invisible=300)
        assert [o for _, o, _ in got] == [0, 1, 2, 3]
        m1 = got[1][2]
        done = send_back(c, "giveup", m1.physical_offset)
        assert done.code == Res.SUCCESS, done.remark
        assert state.dead_letters("giveup", TOPIC) == (1, [(0, 1)])
        assert dead_lettered() == before + 1
        ack(c, "giveup", r, 0, 1)  # the proxy acks what it sent to the DLQ: nothing changes
        again = send_back(c, "giveup", m1.physical_offset)  # sent again: done already
        assert again.code == Res.SUCCESS and "already" in str(again.remark)
        for _, o, _ in got:
            if o != 1:
                ack(c, "giveup", r, 0, o)
        assert committed(c, "giveup", 0) == 4  # progress moved past the dead letter
        time.sleep(0.4)
        _, nxt = pop(c, "giveup", queue_id=0, nums=4)
        assert [(o, m.reconsume_times) for _, o, m in nxt] == [(4, 0), (5, 0), (6, 0), (7, 0)]
        assert state.dead_letters("giveup", TOPIC) == (1, [(0, 1)])
        assert dead_lettered() == before + 1


def test_a_send_back_of_a_message_only_the_tier_holds(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """The oldest messages are gone from the broker's commitlog: the lease remembers the
    commitlog offset of each message it hands out, so the send-back finds it all the same."""
    ep = endpoint(history)
    local_min = ep.replay.store.local.min_offset(TOPIC, 2)
    assert local_min > 0, "the broker should have deleted queue 2's oldest messages"
    with ep.client() as c:
        _, got = pop(c, "tier-dlq", queue_id=2, nums=2, invisible=60_000)
        _, o, m = got[0]
        assert o < local_min
        assert send_back(c, "tier-dlq", m.physical_offset).code == Res.SUCCESS
    assert ep.replay.pop_state.dead_letters("tier-dlq", TOPIC) == (1, [(2, o)])


def test_a_pull_consumers_send_back_is_refused_saying_what_happens(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    m = expected_messages(history, TOPIC)[(1, 5)]
    with ep.client() as c:
        r = c.call(
            Req.CONSUMER_SEND_MSG_BACK, offset=m.physical_offset, group="pull-group",
            delayLevel=0, originMsgId=m.offset_msg_id, originTopic=TOPIC, maxReconsumeTimes=16,
        )  # fmt: skip
    assert r.code == Res.NO_PERMISSION
    remark = str(r.remark)
    assert "read-only replay endpoint" in remark and "consumes it again itself" in remark
    assert "setConsumeMode -m POP" in remark
    assert ep.replay.pop_state.dead_letters("pull-group", TOPIC) == (0, [])


def test_lease_commitlog_offsets_survive_a_restart(tmp_path: Path) -> None:
    state = PopState(tmp_path)
    key = ("g", TOPIC, 0)
    claim = state.claim(key, start=0, now=1000, invisible_ms=60_000, max_count=3, max_offset=10)
    assert claim is not None and claim.new_from == 0
    state.delivered(claim, [0, 1, 2], 3, [500, 900, 1300])
    state.flush()
    again = PopState(tmp_path)
    again.load()
    assert again.find("g", TOPIC, 900) == [(key, 1)]
    assert again.find("g", None, 1300) == [(key, 2)]
    assert again.find("g", "Other", 900) == [] and again.find("h", TOPIC, 900) == []
    assert again.dead_letter(key, 1) and not again.dead_letter(key, 1)
    assert again.find("g", TOPIC, 900) == []
    assert again.dead_letters("g", TOPIC) == (1, [(0, 1)])


def test_notification_says_whether_a_pop_would_find_something(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)

    def notify(c: RemotingClient, group: str, poll: int = 0, queue_id: int = 3) -> Command:
        r = c.call(
            Req.NOTIFICATION, consumerGroup=group, topic=TOPIC, queueId=queue_id,
            pollTime=poll, bornTime=int(time.time() * 1000), order="false",
        )  # fmt: skip
        assert r.code == Res.SUCCESS, r.remark
        return r

    with ep.client() as c, ep.client() as watcher:
        assert notify(c, "notify").ext_fields["hasMsg"] == "true"  # a new group: everything
        for _ in range(200):  # take the whole queue, leased for a minute
            _, got = pop(c, "notify", queue_id=3, invisible=60_000)
            if not got:
                break
        assert notify(c, "notify").ext_fields["hasMsg"] == "false"
        _, none = pop(c, "notify", queue_id=3)
        assert not none
        # a lease running out wakes a held notification
        r, got = pop(c, "notify2", queue_id=3, nums=1, invisible=60_000)
        for _ in range(200):
            _, more = pop(c, "notify2", queue_id=3, invisible=60_000)
            if not more:
                break
        answer: list[Command] = []
        started = time.monotonic()
        held = threading.Thread(target=lambda: answer.append(notify(c, "notify2", 10_000)))
        held.start()
        deadline = time.monotonic() + 5
        polling = "0"
        while time.monotonic() < deadline and polling == "0":
            info = watcher.call(Req.POLLING_INFO, consumerGroup="notify2", topic=TOPIC, queueId=3)
            assert info.code == Res.SUCCESS, info.remark
            polling = info.ext_fields["pollingNum"]
        assert polling == "1"  # held on the server
        other = watcher.call(Req.POLLING_INFO, consumerGroup="notify", topic=TOPIC, queueId=3)
        assert other.ext_fields["pollingNum"] == "0"
        change = watcher.call(
            Req.CHANGE_MESSAGE_INVISIBLETIME, consumerGroup="notify2", topic=TOPIC, queueId=3,
            offset=got[0][1], invisibleTime=0,
            extraInfo=f"{got[0][1]} {r.ext_fields['popTime']} 60000 0 0 broker-a 3 {got[0][1]}",
        )  # fmt: skip
        assert change.code == Res.SUCCESS
        held.join(10)
        assert answer and answer[0].ext_fields["hasMsg"] == "true"
        assert time.monotonic() - started < 5
        # held to its poll time when nothing comes
        started = time.monotonic()
        assert notify(c, "notify", 500).ext_fields["hasMsg"] == "false"
        assert 0.4 <= time.monotonic() - started < 5
        unknown = c.call(Req.NOTIFICATION, consumerGroup="g", topic="NoSuchTopic", queueId=-1)
        assert unknown.code == Res.TOPIC_NOT_EXIST


def test_peek_reads_what_the_next_pop_would_without_taking_it(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    expected = expected_messages(history, TOPIC)

    def peek(c: RemotingClient, nums: int, queue_id: int = 1) -> tuple[Command, list[int]]:
        r = c.call(
            Req.PEEK_MESSAGE, consumerGroup="peek", topic=TOPIC, queueId=queue_id,
            maxMsgNums=nums,
        )  # fmt: skip
        got = [msgcodec.decode(m) for m in split_messages(r.body)] if r.code == 0 else []
        for m in got:
            assert m.body == expected[(m.queue_id, m.queue_offset)].body
        return r, [m.queue_offset for m in got]

    with ep.client() as c:
        r, first = peek(c, 3)
        assert r.code == Res.SUCCESS and first == [0, 1, 2]
        in_queue = sum(1 for q, _ in expected if q == 1)
        assert int(r.ext_fields["restNum"]) == in_queue
        assert peek(c, 3)[1] == [0, 1, 2]  # nothing taken
        _, popped = pop(c, "peek", queue_id=1, nums=2)
        assert [o for _, o, _ in popped] == [0, 1]
        assert peek(c, 3)[1] == [2, 3, 4]  # from the cursor on
        assert ep.replay.pop_state.in_flight(("peek", TOPIC, 1), int(time.time() * 1000)) == 2
        r, every = peek(c, 32, queue_id=-1)
        assert r.code == Res.SUCCESS and len(every) == 32
        nothing = c.call(Req.PEEK_MESSAGE, consumerGroup="peek", topic="NoSuchTopic", queueId=0)
        assert nothing.code == Res.TOPIC_NOT_EXIST


def test_all_message_request_modes(history: SampleTier, endpoint: EndpointFactory) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        assert json.loads(c.call(Req.GET_ALL_MESSAGE_REQUEST_MODE).body) == {
            "messageRequestModeMap": {}
        }
        mode = {"topic": TOPIC, "consumerGroup": "pop-g", "mode": "POP", "popShareQueueNum": 2}
        assert c.call(Req.SET_MESSAGE_REQUEST_MODE, json.dumps(mode).encode()).code == 0
        body = json.loads(c.call(Req.GET_ALL_MESSAGE_REQUEST_MODE).body)
    assert body == {"messageRequestModeMap": {TOPIC: {"pop-g": mode}}}


def test_the_proxys_heartbeat_sync_topics_are_configured(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """A proxy whose ``heartbeatSyncerTopicName`` is ``ReplaySync``: listed in
    ``tieredRemotingProxySyncTopics``, its route is there (and registered with the replay name
    servers) and its creation answered SUCCESS; a name not listed is neither."""
    ep = endpoint(history, tiered_remoting_proxy_sync_topics=("ReplaySync",))
    with ep.client() as c:
        route = c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="ReplaySync")
        assert route.code == Res.SUCCESS
        (queue,) = json.loads(route.body)["queueDatas"]
        assert (queue["readQueueNums"], queue["writeQueueNums"], queue["perm"]) == (1, 0, 4)
        default = c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="DefaultHeartBeatSyncerTopic")
        assert default.code == Res.TOPIC_NOT_EXIST
        create = {"defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
        ok = c.call(Req.UPDATE_AND_CREATE_TOPIC, topic="ReplaySync", **create)
        assert ok.code == Res.SUCCESS, ok.remark
        refused = c.call(Req.UPDATE_AND_CREATE_TOPIC, topic="OtherSync", **create)
        assert refused.code == Res.NO_PERMISSION
        assert "add OtherSync to the sidecar's tieredRemotingProxySyncTopics" in str(refused.remark)
    reg = Registration(ep.replay.cfg, ep.replay.naming, lambda: "127.0.0.1:1")
    table = json.loads(reg.body())["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert (table["ReplaySync"]["readQueueNums"], table["ReplaySync"]["perm"]) == (1, 4)
    assert "DefaultHeartBeatSyncerTopic" not in table


def test_a_send_back_at_a_commitlog_offset_two_tier_messages_share(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """Messages served from the tier carry their offset in their queue's flat commitlog, so
    two queues' messages can share one: the send-back names the one its message id names (a
    proxy's order of send-backs then does not matter), and one that names neither dead-letters
    nothing."""
    ep = endpoint(history)
    local = ep.replay.store.local
    tiered_only = [q for q in range(4) if local.min_offset(TOPIC, q) > 0]
    assert len(tiered_only) >= 2, "the broker should have deleted two queues' oldest messages"
    with ep.client() as c:
        popped = [pop(c, "shared", queue_id=q, nums=1, invisible=60_000)[1][0] for q in tiered_only]
        by_phys: dict[int, list[tuple[int, int, msgcodec.Message]]] = {}
        for q, (_, o, m) in zip(tiered_only, popped, strict=True):
            by_phys.setdefault(m.physical_offset, []).append((q, o, m))
        shared = next(v for v in by_phys.values() if len(v) >= 2)
        (qa, oa, ma), (qb, ob, mb) = shared[:2]
        ids = [m.properties[msgcodec.PROPERTY_UNIQ_KEY] for m in (ma, mb)]
        wrong = c.call(
            Req.CONSUMER_SEND_MSG_BACK, offset=ma.physical_offset, group="shared", delayLevel=-1,
            originMsgId="00" + ids[0], originTopic=TOPIC, maxReconsumeTimes=0,
        )  # fmt: skip
        assert wrong.code == Res.SUCCESS
        assert ep.replay.pop_state.dead_letters("shared", TOPIC) == (0, [])
        for msg_id in reversed(ids):  # the second queue's first
            done = c.call(
                Req.CONSUMER_SEND_MSG_BACK, offset=ma.physical_offset, group="shared",
                delayLevel=-1, originMsgId=msg_id, originTopic=TOPIC, maxReconsumeTimes=0,
            )  # fmt: skip
            assert done.code == Res.SUCCESS, done.remark
    assert ep.replay.pop_state.dead_letters("shared", TOPIC) == (2, [(qb, ob), (qa, oa)])
