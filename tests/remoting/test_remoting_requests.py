"""Each request code the endpoint answers, through the project's own client (what ali-ons does not
send: 12, 29-33, 35, 361, binary ROCKETMQ headers, oneway flags), over a real offloaded tier whose
oldest history the broker has deleted."""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from tiered import metrics
from tiered.access.security import Security
from tiered.broker import message as msgcodec
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.remoting.client import RemotingClient
from tiered.remoting.client import split_messages
from tiered.remoting.codes import FLAG_COMMIT_OFFSET
from tiered.remoting.codes import FLAG_LITE_PULL
from tiered.remoting.codes import FLAG_SUBSCRIPTION
from tiered.remoting.codes import FLAG_SUSPEND
from tiered.remoting.codes import RESPONSE_FLAG
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.frame import JSON
from tiered.remoting.frame import ROCKETMQ
from tiered.remoting.frame import Command
from tiered.remoting.frame import encode
from tiered.remoting.groups import ReplayOffsets
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory
from .conftest import build_history
from .conftest import expected_messages

Q = 1


def queue_messages(tier: SampleTier, queue_id: int = Q) -> dict[int, msgcodec.Message]:
    return {o: m for (q, o), m in expected_messages(tier, TOPIC).items() if q == queue_id}


def pull(
    c: RemotingClient, offset: int, *, code: int = Req.PULL_MESSAGE, max_nums: int = 32,
    sys_flag: int = 0, queue_id: int = Q, **extra: object,
) -> Command:  # fmt: skip
    fields: dict[str, object] = {
        "consumerGroup": "G", "topic": TOPIC, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": 0,
        "suspendTimeoutMillis": 0,
    }  # fmt: skip
    return c.call(code, **(fields | extra))


def bodies(response: Command) -> list[msgcodec.Message]:
    return [msgcodec.decode(m) for m in split_messages(response.body)]


# --- name server ----------------------------------------------------------------------------------


def test_routes_point_back_at_the_endpoint(history: SampleTier, endpoint: EndpointFactory) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        r = c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
        assert r.code == Res.SUCCESS and r.is_response
        route = json.loads(r.body)
        (queue,) = route["queueDatas"]
        assert (queue["brokerName"], queue["readQueueNums"], queue["perm"]) == ("broker-a", 4, 4)
        (broker,) = route["brokerDatas"]
        assert broker["brokerAddrs"] == {"0": f"127.0.0.1:{ep.server.port}"}
        retry = json.loads(c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="%RETRY%G").body)
        assert retry["queueDatas"][0]["readQueueNums"] == 1
        missing = c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="NoSuchTopic")
        assert missing.code == Res.TOPIC_NOT_EXIST and "NoSuchTopic" in (missing.remark or "")
        info = json.loads(c.call(Req.GET_BROKER_CLUSTER_INFO).body)
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"].endswith(
            f":{ep.server.port}"
        )


def test_a_route_lookup_reads_one_topic_directory_not_the_whole_store(
    history: SampleTier, endpoint: EndpointFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients ask a route per topic every 30 s: it must not list every topic and queue of the
    broker's store; a name that is not a topic (a path) touches nothing and is unknown."""
    ep = endpoint(history)

    def whole_store() -> list[tuple[str, int]]:
        raise AssertionError("a route lookup listed the whole consumequeue tree")

    monkeypatch.setattr(ep.replay.store.local, "queues", whole_store)
    with ep.client() as c:
        route = json.loads(c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC).body)
        assert route["queueDatas"][0]["readQueueNums"] == 4
        for name in ("../consumequeue", "GenTopic0/0", "NoSuchTopic"):
            r = c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic=name)
            assert r.code == Res.TOPIC_NOT_EXIST, (name, r.remark)


def test_binary_rocketmq_headers_are_answered_in_json_with_string_fields(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history, "FORCE")
    request = Command(Req.GET_MAX_OFFSET, opaque=77, ext_fields={"topic": TOPIC, "queueId": "1"})
    with socket.create_connection(("127.0.0.1", ep.server.port), timeout=10) as s:
        s.sendall(encode(request, ROCKETMQ))
        (_, word) = struct.unpack(">ii", s.recv(8, socket.MSG_WAITALL))
        header = s.recv(word & 0xFFFFFF, socket.MSG_WAITALL)
    assert word >> 24 == JSON
    doc = json.loads(header)
    assert (doc["opaque"], doc["flag"] & RESPONSE_FLAG, doc["code"]) == (77, 1, Res.SUCCESS)
    assert doc["extFields"] == {"offset": str(max(queue_messages(history)) + 1)}


def test_numbers_in_request_fields_are_accepted(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    header = json.dumps(
        {"code": Req.GET_MIN_OFFSET, "opaque": 5, "flag": 0, "language": "NODE_JS",
         "version": 121, "extFields": {"topic": TOPIC, "queueId": Q}}  # a number, as ali-ons sends
    ).encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", ep.server.port), timeout=10) as s:
        s.sendall(struct.pack(">ii", 4 + len(header), len(header)) + header)
        (_, word) = struct.unpack(">ii", s.recv(8, socket.MSG_WAITALL))
        doc = json.loads(s.recv(word & 0xFFFFFF, socket.MSG_WAITALL))
    assert (doc["code"], doc["extFields"]) == (Res.SUCCESS, {"offset": "0"})


# --- pulls ----------------------------------------------------------------------------------------


def test_pull_and_lite_pull_return_stored_messages_with_offsets(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    want = queue_messages(history)
    local_min = history.local_min[(TOPIC, Q)]
    assert local_min > 40
    with ep.client() as c:
        for code in (Req.PULL_MESSAGE, Req.LITE_PULL_MESSAGE):
            r = pull(
                c, 0, code=code, sys_flag=FLAG_LITE_PULL if code == Req.LITE_PULL_MESSAGE else 0
            )
            assert r.code == Res.SUCCESS, r.remark
            got = bodies(r)
            assert [m.queue_offset for m in got] == list(range(32))
            assert all(m.body == want[m.queue_offset].body for m in got)
            assert r.ext_fields["nextBeginOffset"] == "32"
            assert (r.ext_fields["minOffset"], r.ext_fields["suggestWhichBrokerId"]) == ("0", "0")
            assert int(r.ext_fields["maxOffset"]) == max(want) + 1
        across = pull(c, local_min - 10, max_nums=20)  # the tier's end and the broker's start
        assert bodies(across)[0].queue_offset == local_min - 10
        big = pull(c, 0, max_nums=1024)
        assert len(bodies(big)) == min(1024, len(want))


def _prepared(result: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "rocketmq_tiered_store_remoting_prepared_pulls_total", {"result": result}
    )
    return value or 0.0


def test_a_catch_up_is_answered_from_pulls_prepared_while_the_consumer_works(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """After each pull that found messages the connection reads the pull that continues it;
    the consumer's next pull takes it -- the same messages and offsets as a pull read then --
    and a pull that differs in anything is read afresh."""
    ep = endpoint(history)
    want = queue_messages(history)
    used, unused = _prepared("used"), _prepared("unused")
    got: list[msgcodec.Message] = []
    found = 0
    with ep.client() as c:
        offset = 0
        while True:
            r = pull(c, offset)
            if r.code != Res.SUCCESS:
                assert r.code == Res.PULL_NOT_FOUND
                break
            found += 1
            got += bodies(r)
            assert int(r.ext_fields["maxOffset"]) == max(want) + 1
            offset = int(r.ext_fields["nextBeginOffset"])
        assert [m.queue_offset for m in got] == sorted(want)  # tier then broker, none twice
        assert all(m.body == want[m.queue_offset].body for m in got)
        assert _prepared("used") - used == found - 1  # every pull but the first
        # what the last FOUND pull prepared (the queue's end) found nothing: nothing was kept
        assert _prepared("unused") == unused

        first = pull(c, 0)  # prepares 32..63 for 32 messages
        assert _prepared("used") - used == found - 1
        fewer = pull(c, 32, max_nums=8)  # another batch size: read afresh
        assert [m.queue_offset for m in bodies(fewer)] == list(range(32, 40))
        assert _prepared("unused") - unused == 1
        tag = want[40].properties["TAGS"]
        filtered = pull(c, 40, max_nums=8, sys_flag=FLAG_SUBSCRIPTION, subscription=tag)
        assert [m.queue_offset for m in bodies(filtered)] == sorted(
            o for o, m in want.items() if o >= 40 and m.properties.get("TAGS") == tag
        )[:8]
        assert _prepared("unused") - unused == 2  # 40..47 with every tag was prepared
        other = pull(c, 0, queue_id=Q + 1)  # another queue: the first one's stays prepared
        assert other.code == Res.SUCCESS
        assert [m.queue_offset for m in bodies(first)] == list(range(32))
    deadline = time.monotonic() + 10  # the connection's thread sees the close, then drops them
    while _prepared("unused") - unused < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _prepared("unused") - unused == 4  # the connection closed with both queues' next
    assert ep.server.prepared_budget.held == 0


def test_a_pull_read_ahead_counts_its_messages_out_only_when_a_client_gets_them(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """``messages_out_total`` counts messages returned from the tier: a prepared pull that no
    request takes (the consumer changed its batch size) is not counted, one that is taken is."""
    ep = endpoint(history, "FORCE")

    def out() -> float:
        value = metrics.REGISTRY.get_sample_value(
            "rocketmq_tiered_store_messages_out_total", {"topic": TOPIC}
        )
        return value or 0.0

    before, used, unused = out(), _prepared("used"), _prepared("unused")
    with ep.client() as c:
        assert len(bodies(pull(c, 0))) == 32  # prepares 32..63
        assert len(bodies(pull(c, 32))) == 32  # takes it; prepares 64..95
        assert len(bodies(pull(c, 64, max_nums=8))) == 8  # another batch size: read afresh
        assert (_prepared("used") - used, _prepared("unused") - unused) == (1, 1)
    # 72..79, prepared, is dropped when the connection's thread sees the close
    deadline = time.monotonic() + 10
    while _prepared("unused") - unused < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _prepared("unused") - unused == 2
    assert out() - before == 32 + 32 + 8  # three prepared reads of 32, 32 and 8: not counted


def test_pull_statuses_map_to_the_brokers_response_codes(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    end = max(queue_messages(history)) + 1
    with ep.client() as c:
        at_end = pull(c, end)
        assert (at_end.code, at_end.ext_fields["nextBeginOffset"]) == (Res.PULL_NOT_FOUND, str(end))
        beyond = pull(c, end + 100)
        assert beyond.code == Res.PULL_OFFSET_MOVED
        assert beyond.ext_fields["nextBeginOffset"] == str(end)
        unknown = pull(c, 0, queue_id=9)
        assert unknown.code == Res.PULL_NOT_FOUND
        assert pull(c, 5, queue_id=9).code == Res.PULL_OFFSET_MOVED
        sql = pull(c, 0, sys_flag=FLAG_SUBSCRIPTION, subscription="a > 1", expressionType="SQL92")
        assert sql.code == Res.SYSTEM_ERROR and "SQL92" in (sql.remark or "")
        bad = pull(c, 0, sys_flag=FLAG_SUBSCRIPTION, subscription="A || || B")
        assert bad.code == Res.SUBSCRIPTION_PARSE_FAILED


def test_tag_subscriptions_filter_from_the_pull_or_the_heartbeat(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    want = queue_messages(history)
    tag = want[0].properties["TAGS"]
    tagged = sorted(o for o, m in want.items() if m.properties.get("TAGS") == tag)
    with ep.client() as c:
        r = pull(c, 0, max_nums=200, sys_flag=FLAG_SUBSCRIPTION, subscription=tag)
        assert [m.queue_offset for m in bodies(r)] == tagged[:200]
        heartbeat = {"clientID": "c1", "consumerDataSet": [{"groupName": "G",
                     "subscriptionDataSet": [{"topic": TOPIC, "subString": tag}]}]}  # fmt: skip
        assert c.call(Req.HEART_BEAT, json.dumps(heartbeat).encode()).code == Res.SUCCESS
        r = pull(c, 0, max_nums=200)  # no subscription in the pull: the heartbeat's
        assert [m.queue_offset for m in bodies(r)] == tagged[:200]
        none = pull(c, 0, max_nums=4, sys_flag=FLAG_SUBSCRIPTION, subscription="NoSuchTag")
        assert none.code == Res.PULL_RETRY_IMMEDIATELY
        assert int(none.ext_fields["nextBeginOffset"]) > 0


def test_long_polling_answers_when_the_broker_writes_and_times_out_otherwise(
    tmp_path: Path, replay_spec: GenSpec, endpoint: EndpointFactory
) -> None:
    spec = dataclasses.replace(replay_spec, messages=400)
    tier = build_history(tmp_path, spec, deleted_files=0)
    ep = endpoint(tier)
    end = max(queue_messages(tier)) + 1
    with ep.client() as c:
        started = time.monotonic()
        r = pull(c, end, sys_flag=FLAG_SUSPEND, suspendTimeoutMillis=800)
        waited = time.monotonic() - started
        assert r.code == Res.PULL_NOT_FOUND and 0.7 < waited < 5

        def write() -> None:
            time.sleep(0.8)
            generate_store(
                tier.cfg.store_path_root_dir, dataclasses.replace(spec, append=True, seed=3)
            )

        writer = threading.Thread(target=write)
        writer.start()
        started = time.monotonic()
        r = pull(c, end, sys_flag=FLAG_SUSPEND, suspendTimeoutMillis=20_000)
        waited = time.monotonic() - started
        writer.join()
        assert r.code == Res.SUCCESS and waited < 10, (r.code, r.remark, waited)
        assert bodies(r)[0].queue_offset == end


# --- offsets, times, keys, ids --------------------------------------------------------------------


def test_offsets_and_times_cover_tier_and_broker(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    want = queue_messages(history)
    store = ep.replay.store
    with ep.client() as c:
        q = {"topic": TOPIC, "queueId": Q}
        assert c.call(Req.GET_MIN_OFFSET, **q).ext_fields["offset"] == "0"
        assert c.call(Req.GET_MAX_OFFSET, **q).ext_fields["offset"] == str(max(want) + 1)
        earliest = c.call(Req.GET_EARLIEST_MSG_STORETIME, **q).ext_fields["timestamp"]
        assert earliest == str(want[0].store_timestamp)
        probe = want[25].store_timestamp  # only the tier holds it
        found = c.call(Req.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=probe, **q).ext_fields["offset"]
        assert found == str(store.get_offset_by_time(TOPIC, Q, probe)) and int(found) <= 25
        upper = c.call(Req.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=probe, boundaryType="UPPER", **q)
        assert upper.ext_fields["offset"] == str(store.get_offset_by_time(TOPIC, Q, probe, "UPPER"))


def test_consumer_offsets_of_new_groups_commits_and_restarts(
    history: SampleTier, endpoint: EndpointFactory, tmp_path: Path
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        q = {"consumerGroup": "fresh", "topic": TOPIC, "queueId": Q}
        earliest = c.call(Req.QUERY_CONSUMER_OFFSET, **q)
        assert (earliest.code, earliest.ext_fields["offset"]) == (Res.SUCCESS, "0")
        c.call(Req.UPDATE_CONSUMER_OFFSET, commitOffset=17, **q)
        assert c.call(Req.QUERY_CONSUMER_OFFSET, **q).ext_fields["offset"] == "17"
        # a oneway commit is not answered: the next response is the next request's
        c.oneway(Req.UPDATE_CONSUMER_OFFSET, commitOffset=19, **q)
        after = c.call(Req.QUERY_CONSUMER_OFFSET, **q)
        assert after.ext_fields["offset"] == "19"
        # a pull with the commit flag commits too
        pull(c, 0, sys_flag=FLAG_COMMIT_OFFSET, commitOffset=21, consumerGroup="fresh")
    ep.server.stop()  # flushes
    reloaded = ReplayOffsets(ep.offsets.path.parent)
    reloaded.load()
    assert reloaded.get("fresh", TOPIC, Q) == 21
    client_mode = endpoint(history, tiered_remoting_new_group_offset="CLIENT")
    with client_mode.client() as c:
        none = c.call(Req.QUERY_CONSUMER_OFFSET, consumerGroup="g2", topic=TOPIC, queueId=Q)
        assert none.code == Res.QUERY_NOT_FOUND and "CLIENT" in (none.remark or "")


def test_offsets_of_topics_the_sidecar_does_not_hold_are_refused_and_not_kept(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """As the broker answers (TOPIC_NOT_EXIST): a client cannot grow the offsets table with
    names of its own, by UPDATE_CONSUMER_OFFSET or by a pull's commit flag."""
    ep = endpoint(history)
    with ep.client() as c:
        for topic in ("NoSuchTopic", "../etc", "x" * 127):
            r = c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup="g", topic=topic, queueId=0,
                       commitOffset=5)  # fmt: skip
            assert r.code == Res.TOPIC_NOT_EXIST and f"Topic {topic} not exist!" in (r.remark or "")
        pull(c, 0, topic="NoSuchTopic", sys_flag=FLAG_COMMIT_OFFSET, commitOffset=9,
             consumerGroup="g")  # fmt: skip
        big = c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup="g", topic=TOPIC, queueId=70000,
                     commitOffset=5)  # fmt: skip
        assert big.code == Res.INVALID_PARAMETER and "queueId=70000" in (big.remark or "")
        ok = c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup="g", topic=TOPIC, queueId=Q,
                    commitOffset=5)  # fmt: skip
        assert ok.code == Res.SUCCESS
    ep.server.stop()  # flushes
    table = json.loads(ep.offsets.path.read_text())["offsetTable"]
    assert table == {f"{TOPIC}@g": {str(Q): 5}}


def test_a_damaged_offsets_file_is_moved_aside_and_groups_start_over(tmp_path: Path) -> None:
    offsets = ReplayOffsets(tmp_path)
    offsets.commit("g", "T", 0, 5)
    offsets.flush()
    offsets.path.write_bytes(b'{"version": 1, "offsetTable": []}')
    Path(f"{offsets.path}.bak").write_bytes(b"\x00garbage")
    again = ReplayOffsets(tmp_path)
    again.load()
    assert again.get("g", "T", 0) is None
    assert len(list(tmp_path.glob("*.corrupt-*"))) == 2
    again.commit("g", "T", 0, 6)
    assert again.flush()


def test_query_by_key_and_unique_key_reaches_tier_only_messages(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    want = queue_messages(history)
    old = want[3]  # only the tier holds it
    key = old.keys[0]
    with ep.client() as c:
        r = c.call(Req.QUERY_MESSAGE, topic=TOPIC, key=key, maxNum=32, beginTimestamp=0,
                   endTimestamp=2**62)  # fmt: skip
        assert r.code == Res.SUCCESS, r.remark
        (hit,) = [m for m in bodies(r) if m.queue_offset == 3 and m.queue_id == Q]
        assert hit.body == old.body
        uniq = old.properties[msgcodec.PROPERTY_UNIQ_KEY]
        now = int(time.time() * 1000)
        wrong_range = {"beginTimestamp": now - 3 * 86_400_000, "endTimestamp": now}
        miss = c.call(Req.QUERY_MESSAGE, topic=TOPIC, key=uniq, maxNum=32, **wrong_range)
        assert miss.code == Res.QUERY_NOT_FOUND
        by_id = c.call(Req.QUERY_MESSAGE, topic=TOPIC, key=uniq, maxNum=32,
                       _UNIQUE_KEY_QUERY="true", **wrong_range)  # fmt: skip
        assert by_id.code == Res.SUCCESS
        assert [m.body for m in bodies(by_id)] == [old.body]


def test_query_by_key_uses_the_brokers_index_for_what_only_it_has(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    ep.replay.index = lambda: None  # no tiered key index: the broker's index files alone
    want = queue_messages(history)
    recent = want[max(want) - 2]
    with ep.client() as c:
        r = c.call(Req.QUERY_MESSAGE, topic=TOPIC, key=recent.keys[0], maxNum=8,
                   beginTimestamp=0, endTimestamp=2**62)  # fmt: skip
        assert r.code == Res.SUCCESS, r.remark
        assert recent.body in [m.body for m in bodies(r)]


def test_view_by_id_while_the_broker_holds_it_else_points_at_the_unique_key(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    want = queue_messages(history)
    recent, old = want[max(want) - 1], want[0]
    with ep.client() as c:
        r = c.call(Req.VIEW_MESSAGE_BY_ID, offset=recent.physical_offset)
        assert r.code == Res.SUCCESS and msgcodec.decode(r.body).body == recent.body
        gone = c.call(Req.VIEW_MESSAGE_BY_ID, offset=old.physical_offset)
        assert gone.code == Res.SYSTEM_ERROR and "_UNIQUE_KEY_QUERY" in (gone.remark or "")


# --- clients, refusals, access control ------------------------------------------------------------


def test_heartbeats_list_consumers_until_they_unregister(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        empty = c.call(Req.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="G")
        assert empty.code == Res.SYSTEM_ERROR
        for client in ("b@1", "a@1"):
            beat = {"clientID": client, "consumerDataSet": [{"groupName": "G"}]}
            assert c.call(Req.HEART_BEAT, json.dumps(beat).encode()).code == Res.SUCCESS
        listed = c.call(Req.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="G")
        assert json.loads(listed.body) == {"consumerIdList": ["a@1", "b@1"]}
        assert c.call(Req.UNREGISTER_CLIENT, clientID="a@1", consumerGroup="G").code == 0
        listed = c.call(Req.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="G")
        assert json.loads(listed.body) == {"consumerIdList": ["b@1"]}
        assert c.call(Req.HEART_BEAT, b"not json").code == Res.INVALID_PARAMETER
        assert c.call(Req.QUERY_TOPIC_CONSUME_BY_WHO, topic=TOPIC).body == b'{"groupList":[]}'
    ep.replay.clients.expiry_s = 0.0
    assert ep.replay.clients.clients("G") == []


@pytest.mark.parametrize("code", [Req.SEND_MESSAGE_V2, Req.UPDATE_AND_CREATE_TOPIC])
def test_writes_are_refused_and_unknown_codes_named(
    history: SampleTier, endpoint: EndpointFactory, code: int
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        refused = c.call(code, b"body", topic=TOPIC)
        assert refused.code == Res.NO_PERMISSION and "read-only" in (refused.remark or "")
        unknown = c.call(9999)
        assert unknown.code == Res.REQUEST_CODE_NOT_SUPPORTED and "9999" in (unknown.remark or "")
        check = {"subscriptionData": {"expressionType": "SQL92", "subString": "a > 1"}}
        sql = c.call(Req.CHECK_CLIENT_CONFIG, json.dumps(check).encode())
        assert sql.code == Res.SYSTEM_ERROR and "SQL92" in (sql.remark or "")


def test_nothing_is_read_while_the_sidecar_restores(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    ep.replay.ready = lambda: False
    with ep.client() as c:
        assert pull(c, 0).code == Res.SYSTEM_BUSY
        beat = {"clientID": "x", "consumerDataSet": [{"groupName": "G"}]}
        assert c.call(Req.HEART_BEAT, json.dumps(beat).encode()).code == Res.SUCCESS


ACL = """
accounts:
  - accessKey: reader
    secretKey: reader-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {topic}=SUB
  - accessKey: other
    secretKey: other-secret
    defaultTopicPerm: DENY
  - accessKey: root
    secretKey: root-secret
    admin: true
"""


def test_acl_requires_a_valid_signature_of_an_account_allowed_to_sub(
    history: SampleTier, endpoint: EndpointFactory, tmp_path: Path
) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL.format(topic=TOPIC))
    ep = endpoint(history, security=Security(accounts_file=acl_file))
    port = ep.server.port
    with RemotingClient("127.0.0.1", port, credentials=("reader", "reader-secret")) as c:
        assert pull(c, 0).code == Res.SUCCESS
    with RemotingClient("127.0.0.1", port, credentials=("root", "root-secret")) as c:
        assert pull(c, 0).code == Res.SUCCESS
    with RemotingClient("127.0.0.1", port, serialize_type=ROCKETMQ,
                        credentials=("reader", "reader-secret")) as c:  # fmt: skip
        assert pull(c, 0).code == Res.SUCCESS
    for credentials, why in [
        (("reader", "wrong"), "does not match"),
        (("other", "other-secret"), "no SUB permission on topic"),
        (("nobody", "x"), "is not an account"),
        (None, "requires signed requests"),
    ]:
        with RemotingClient("127.0.0.1", port, credentials=credentials) as c:
            denied = pull(c, 0)
            assert denied.code == Res.NO_PERMISSION and why in (denied.remark or ""), why
