"""Orderly-consumer locks and the admin requests mqadmin sends, through the project's own client,
over a real offloaded tier: each body decoded and checked against upstream's field names and the
store's own answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered.broker import message as msgcodec
from tiered.remoting.body import ObjectKeyMap
from tiered.remoting.body import dumps
from tiered.remoting.body import loads
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.locks import LOCK_MAX_LIVE_S
from tiered.remoting.locks import RebalanceLocks
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory
from .conftest import expected_messages

OTHER_TOPIC = "GenTopic1"
MQ = tuple[str, str, int]  # topic, brokerName, queueId


def mq_key(key: Any) -> MQ:
    """A decoded ``MessageQueue`` map key as ``(topic, brokerName, queueId)``."""
    fields = dict(key)
    assert set(fields) == {"brokerName", "queueId", "topic"}, fields
    return fields["topic"], fields["brokerName"], fields["queueId"]


def mq(queue_id: int, topic: str = TOPIC) -> dict[str, Any]:
    return {"topic": topic, "brokerName": "broker-a", "queueId": queue_id}


def lock(c: RemotingClient, client: str, queues: list[int], group: str = "G", **kw: Any) -> Any:
    body = {"consumerGroup": group, "clientId": client, "onlyThisBroker": False,
            "mqSet": [mq(q) for q in queues]}  # fmt: skip
    r = c.call(Req.LOCK_BATCH_MQ, json.dumps(body).encode(), **kw)
    assert r.code == Res.SUCCESS, r.remark
    doc = loads(r.body)
    assert set(doc) == {"lockOKMQSet"}
    assert all(set(m) == {"brokerName", "queueId", "topic"} for m in doc["lockOKMQSet"])
    return sorted(m["queueId"] for m in doc["lockOKMQSet"])


def unlock(c: RemotingClient, client: str, queues: list[int], group: str = "G") -> None:
    body = {"consumerGroup": group, "clientId": client, "onlyThisBroker": False,
            "mqSet": [mq(q) for q in queues]}  # fmt: skip
    assert c.call(Req.UNLOCK_BATCH_MQ, json.dumps(body).encode()).code == Res.SUCCESS


def heartbeat(c: RemotingClient, client: str, group: str, topics: list[str], **more: Any) -> None:
    subs = [{"topic": t, "subString": "*", "expressionType": "TAG", "tagsSet": [],
             "codeSet": [], "subVersion": 7, "classFilterMode": False} for t in topics]  # fmt: skip
    beat = {"clientID": client, "producerDataSet": [], "consumerDataSet": [
        {"groupName": group, "subscriptionDataSet": subs, "unitMode": False, **more}]}  # fmt: skip
    reply = c.call_as(479, Req.HEART_BEAT, json.dumps(beat).encode(), {})
    assert reply.code == Res.SUCCESS


# --- locks ----------------------------------------------------------------------------------------


def test_a_queue_is_locked_by_one_client_of_a_group_until_unlocked(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        assert lock(c, "a@1", [0, 1]) == [0, 1]
        assert lock(c, "b@1", [0, 1, 2]) == [2]  # a holds 0 and 1
        assert lock(c, "a@1", [0, 1, 2]) == [0, 1]  # renewed; b holds 2
        assert lock(c, "b@1", [0], group="H") == [0]  # another group: another table
        unlock(c, "b@1", [0, 1])  # not b's: nothing changes
        assert lock(c, "b@1", [0, 1]) == []
        unlock(c, "a@1", [0])
        assert lock(c, "b@1", [0, 1]) == [0]
        c.oneway(Req.UNLOCK_BATCH_MQ, json.dumps({"consumerGroup": "G", "clientId": "a@1",
                 "mqSet": [mq(1)]}).encode())  # fmt: skip  # as RebalanceImpl.unlock(oneway)
        assert lock(c, "b@1", [1]) == [1]
        bad = c.call(Req.LOCK_BATCH_MQ, b'{"consumerGroup":"G","mqSet":[]}')
        assert bad.code == Res.INVALID_PARAMETER and "clientId" in (bad.remark or "")
        odd = c.call(Req.LOCK_BATCH_MQ, b'{"consumerGroup":"G","clientId":"x","mqSet":[{}]}')
        assert odd.code == Res.INVALID_PARAMETER
    assert ep.replay.locks.holder("G", TOPIC, 1) == "b@1"


def test_a_lock_lapses_after_its_max_live_time_unless_renewed(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    now = [1000.0]
    ep.replay.locks = RebalanceLocks(clock=lambda: now[0])
    assert ep.replay.locks.max_live_s == LOCK_MAX_LIVE_S == 60.0
    with ep.client() as c:
        assert lock(c, "a@1", [0, 1]) == [0, 1]
        now[0] += 40
        assert lock(c, "a@1", [1]) == [1]  # lockAll renews
        now[0] += 30  # 0 last taken 70 s ago, 1 renewed 30 s ago
        assert ep.replay.locks.holder("G", TOPIC, 0) is None
        assert lock(c, "b@1", [0, 1]) == [0]
        assert ep.replay.locks.holder("G", TOPIC, 0) == "b@1"


# --- broker and name server -----------------------------------------------------------------------

CLUSTER_LIST_KEYS = {
    "brokerActive", "putTps", "getTransferredTps", "sendThreadPoolQueueSize",
    "pullThreadPoolQueueSize", "ackThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueHeadWaitTimeMills", "ackThreadPoolQueueHeadWaitTimeMills",
    "pageCacheLockTimeMills", "earliestMessageTimeStamp", "commitLogDiskRatio", "timerReadBehind",
    "timerOffsetBehind", "timerCongestNum", "timerEnqueueTps", "timerDequeueTps",
    "brokerVersionDesc", "brokerVersion", "msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
    "msgPutTotalTodayNow", "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning",
    "msgGetTotalTodayNow", "dispatchBehindBytes", "commitLogMinOffset", "commitLogMaxOffset",
}  # fmt: skip
"""What ``mqadmin clusterList`` (with and without ``-m``) reads, and the offsets."""


def test_runtime_info_has_every_key_cluster_list_reads(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        r = c.call(Req.GET_BROKER_RUNTIME_INFO)
    assert r.code == Res.SUCCESS, r.remark
    doc = loads(r.body)
    assert set(doc) == {"table"}
    table: dict[str, str] = doc["table"]
    assert set(table) >= CLUSTER_LIST_KEYS, CLUSTER_LIST_KEYS - set(table)
    assert all(isinstance(v, str) for v in table.values())
    assert (table["brokerVersionDesc"], table["brokerVersion"]) == ("V5_3_3", "479")
    for key in CLUSTER_LIST_KEYS:
        if key.startswith(("msgPut", "msgGet", "timerReadBehind", "dispatch", "pageCache")):
            assert table[key] == "0", key
    assert [float(x) for x in table["putTps"].split(" ")] == [0.0, 0.0, 0.0]
    assert float(table["getTransferredTps"].split(" ")[0]) == 0.0
    assert float(table["timerEnqueueTps"]) == 0.0 and table["brokerActive"] == "false"
    assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
    assert table["commitLogDirCapacity"].startswith("Total : ")
    stored = [(msgcodec.decode(d), len(d)) for d in history.expected.values()]
    assert table["earliestMessageTimeStamp"] == str(min(m.store_timestamp for m, _ in stored))
    local = ep.replay.store.local.commitlog
    assert int(table["commitLogMinOffset"]) == local.min_offset > 0  # oldest files deleted
    assert int(table["commitLogMaxOffset"]) == max(m.physical_offset + n for m, n in stored)


def test_topic_list_names_topics_and_each_replay_groups_retry_topic(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup="committed", topic=TOPIC, queueId=0,
               commitOffset=3)  # fmt: skip
        heartbeat(c, "x@1", "beating", [OTHER_TOPIC])
        r = c.call(Req.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert r.code == Res.SUCCESS
        doc = loads(r.body)
        assert set(doc) == {"topicList"}  # brokerAddr is null: fastjson leaves it out
        assert {TOPIC, OTHER_TOPIC, "%RETRY%committed", "%RETRY%beating"} <= set(doc["topicList"])
        ours = loads(c.call(Req.GET_TOPICS_BY_CLUSTER, cluster="DefaultCluster").body)
        assert ours == doc
        other = c.call(Req.GET_TOPICS_BY_CLUSTER, cluster="Elsewhere")
        assert loads(other.body) == {"topicList": []}
        route = json.loads(c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="DefaultCluster").body)
        assert route["brokerDatas"][0]["brokerName"] == "broker-a"
        (queue,) = route["queueDatas"]  # one empty read-only queue: what a proxy needs
        assert (queue["readQueueNums"], queue["writeQueueNums"], queue["perm"]) == (1, 0, 4)
        sync = json.loads(
            c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="DefaultHeartBeatSyncerTopic").body
        )
        assert sync["queueDatas"] == route["queueDatas"]
        ep.replay.clients.expiry_s = 0.0  # the heartbeating group went away; commits stay
        later = loads(c.call(Req.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
        assert "%RETRY%committed" in later and "%RETRY%beating" not in later


def test_topic_stats_give_the_stores_offsets_and_last_store_times(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    store = ep.replay.store
    want = expected_messages(history, TOPIC)
    with ep.client() as c:
        r = c.call(Req.GET_TOPIC_STATS_INFO, topic=TOPIC)
        missing = c.call(Req.GET_TOPIC_STATS_INFO, topic="NoSuchTopic")
        config = c.call(Req.GET_TOPIC_CONFIG, topic=TOPIC, lo="true")
        no_config = c.call(Req.GET_TOPIC_CONFIG, topic="NoSuchTopic", lo="true")
    assert r.code == Res.SUCCESS, r.remark
    assert r.body.startswith(
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"GenTopic0"}:'
        b'{"lastUpdateTimestamp":'
    )  # the JSON-object map key fastjson writes for a MessageQueue
    doc = loads(r.body)
    assert doc["topicPutTps"] == 0.0
    table = {mq_key(k): v for k, v in doc["offsetTable"].items()}
    assert sorted(table) == [(TOPIC, "broker-a", q) for q in range(4)]
    for (_, _, q), offsets in table.items():
        assert set(offsets) == {"minOffset", "maxOffset", "lastUpdateTimestamp"}
        high = max(o for qq, o in want if qq == q) + 1
        assert offsets["minOffset"] == store.get_min_offset(TOPIC, q) == 0  # the tier's
        assert offsets["maxOffset"] == store.get_max_offset(TOPIC, q) == high
        assert offsets["lastUpdateTimestamp"] == want[(q, high - 1)].store_timestamp
    assert missing.code == Res.TOPIC_NOT_EXIST and "NoSuchTopic" in (missing.remark or "")
    assert config.code == Res.SUCCESS
    assert loads(config.body) == {
        "attributes": {}, "order": False, "perm": 4, "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG", "topicName": TOPIC, "topicSysFlag": 0,
        "writeQueueNums": 0,
    }  # fmt: skip
    assert no_config.code == Res.TOPIC_NOT_EXIST  # what MQAdminUtils accepts


# --- consumer groups ------------------------------------------------------------------------------


def consume_stats(c: RemotingClient, **fields: object) -> dict[MQ, dict[str, Any]]:
    r = c.call(Req.GET_CONSUME_STATS, **fields)
    assert r.code == Res.SUCCESS, r.remark
    doc = loads(r.body)
    assert set(doc) == {"consumeTps", "offsetTable"} and doc["consumeTps"] == 0.0
    return {mq_key(k): v for k, v in doc["offsetTable"].items()}


def test_consume_stats_show_committed_offsets_against_the_stores(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    store = ep.replay.store
    want = expected_messages(history, TOPIC)
    assert history.local_min[(TOPIC, 1)] > 25  # offset 24 only the tier holds
    with ep.client() as c:
        c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup="G", topic=TOPIC, queueId=1,
               commitOffset=25)  # fmt: skip
        stats = consume_stats(c, consumerGroup="G")
        assert stats == consume_stats(c, consumerGroup="G", topic=TOPIC)
        assert sorted(stats) == [(TOPIC, "broker-a", q) for q in range(4)]
        for (_, _, q), wrapper in stats.items():
            assert wrapper["brokerOffset"] == store.get_max_offset(TOPIC, q)
            if q == 1:
                assert wrapper == {"brokerOffset": wrapper["brokerOffset"],
                                   "consumerOffset": 25, "pullOffset": 25,
                                   "lastTimestamp": want[(1, 24)].store_timestamp}  # fmt: skip
            else:
                assert (wrapper["consumerOffset"], wrapper["lastTimestamp"]) == (0, 0)
        other = consume_stats(c, consumerGroup="G", topic=OTHER_TOPIC)
        assert {k[0] for k in other} == {OTHER_TOPIC}
        both = consume_stats(c, consumerGroup="G", topicList=f"{TOPIC};{OTHER_TOPIC}")
        assert len(both) == 8
        assert consume_stats(c, consumerGroup="nobody") == {}
        # a group whose heartbeats subscribe elsewhere: committed topics it dropped are left out
        heartbeat(c, "a@1", "G", [OTHER_TOPIC])
        assert consume_stats(c, consumerGroup="G") == {}


def test_connection_list_and_consumers_of_a_topic_come_from_heartbeats_and_commits(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        offline = c.call(Req.GET_CONSUMER_CONNECTION_LIST, consumerGroup="G")
        assert offline.code == Res.CONSUMER_NOT_ONLINE and offline.code == 206
        assert offline.remark == "the consumer group[G] not online"
        declared = {"consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET"}  # fmt: skip
        heartbeat(c, "10.0.0.1@pid", "G", [TOPIC], **declared)
        r = c.call(Req.GET_CONSUMER_CONNECTION_LIST, consumerGroup="G")
        c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup="committer", topic=TOPIC, queueId=0,
               commitOffset=1)  # fmt: skip
        by_who = c.call(Req.QUERY_TOPIC_CONSUME_BY_WHO, topic=TOPIC)
        nobody = c.call(Req.QUERY_TOPIC_CONSUME_BY_WHO, topic=OTHER_TOPIC)
        host, port = c.sock.getsockname()[:2]
    assert r.code == Res.SUCCESS, r.remark
    doc = loads(r.body)
    assert doc == {
        "connectionSet": [{"clientAddr": f"{host}:{port}", "clientId": "10.0.0.1@pid",
                           "language": "JAVA", "version": 479}],
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "subscriptionTable": {TOPIC: {"topic": TOPIC, "subString": "*", "expressionType": "TAG",
                                      "tagsSet": [], "codeSet": [], "subVersion": 7,
                                      "classFilterMode": False}},
    }  # fmt: skip
    assert loads(by_who.body) == {"groupList": ["G", "committer"]}
    assert nobody.body == b'{"groupList":[]}'


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "result", "words"),
    [
        (Req.DELETE_TOPIC_IN_BROKER, Res.NO_PERMISSION, "read-only"),
        (Req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, Res.NO_PERMISSION, "read-only"),
        (Req.UPDATE_BROKER_CONFIG, Res.NO_PERMISSION, "configuration"),
        (Req.INVOKE_BROKER_TO_RESET_OFFSET, Res.NO_PERMISSION, "offset"),
        (Req.GET_CONSUMER_RUNNING_INFO, Res.REQUEST_CODE_NOT_SUPPORTED, "waiting for its answer"),
        (Req.CONSUME_MESSAGE_DIRECTLY, Res.REQUEST_CODE_NOT_SUPPORTED, "waiting for its answer"),
        (9999, Res.REQUEST_CODE_NOT_SUPPORTED, "orderly-consumer locks"),
    ],
)
def test_config_writes_and_client_callbacks_are_refused_by_name(
    history: SampleTier, endpoint: EndpointFactory, code: int, result: int, words: str
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        r = c.call(code, consumerGroup="G", topic=TOPIC)
    name = str(code) if code == 9999 else Req(code).name
    assert r.code == result and name in (r.remark or "") and words in (r.remark or ""), r.remark


# --- bodies ---------------------------------------------------------------------------------------


def test_bodies_are_written_and_read_as_fastjson_does() -> None:
    key = {"brokerName": "b", "queueId": 3, "topic": "T"}
    body = dumps({"a": None, "offsetTable": ObjectKeyMap([(key, {"x": 1.0})]), "s": "é"})
    written = '{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T"}:{"x":1.0}},"s":"é"}'
    assert body == written.encode()
    doc = loads(body)
    assert mq_key(next(iter(doc["offsetTable"]))) == ("T", "b", 3)
    assert loads(b' {0:{"v":[1, {1:2}]} , "k" : true} ') == {0: {"v": [1, {1: 2}]}, "k": True}
    for bad in (b"{", b'{"a" 1}', b"[1,", b"{} x"):
        with pytest.raises(ValueError, match=r"char|expected|extra"):
            loads(bad)
