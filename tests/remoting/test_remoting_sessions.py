"""Consumer sessions as a broker keeps them: a pull's ``commitOffset`` applied once and never
backwards, a held pull re-run without committing, a closed connection's clients and held pulls
dropped at once with the group's other clients told to rebalance (``NOTIFY_CONSUMER_IDS_CHANGED``).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

from tiered.process.listen import kernel_timeouts
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import FLAG_COMMIT_OFFSET
from tiered.remoting.codes import FLAG_SUSPEND
from tiered.remoting.codes import ONEWAY_FLAG
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.frame import Command
from tiered.remoting.frame import encode
from tiered.remoting.groups import Clients
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import Endpoint
from .conftest import EndpointFactory
from .test_remoting_requests import Q
from .test_remoting_requests import pull
from .test_remoting_requests import queue_messages

GROUP = "sessions"


def committed(c: RemotingClient, queue_id: int = Q) -> int:
    r = c.call(Req.QUERY_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=queue_id)
    assert r.code == Res.SUCCESS, r.remark
    return int(r.ext_fields["offset"])


def beat(c: RemotingClient, client: str, model: str = "CLUSTERING") -> None:
    data = {
        "clientID": client,
        "consumerDataSet": [
            {
                "groupName": GROUP,
                "messageModel": model,
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}],
            }
        ],
    }
    assert c.call(Req.HEART_BEAT, json.dumps(data).encode()).code == Res.SUCCESS


def consumers(c: RemotingClient) -> list[str]:
    r = c.call(Req.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=GROUP)
    return list(json.loads(r.body)["consumerIdList"]) if r.code == Res.SUCCESS else []


def held_pull(ep: Endpoint, offset: int, commit: int, hold_ms: int) -> threading.Thread:
    """A long-polled pull from ``offset`` (nothing there) carrying ``commitOffset`` ``commit``,
    on its own connection, answered after ``hold_ms``."""

    def run() -> None:
        with ep.client() as c:
            r = pull(
                c, offset, sys_flag=FLAG_SUSPEND | FLAG_COMMIT_OFFSET, consumerGroup=GROUP,
                commitOffset=commit, suspendTimeoutMillis=hold_ms,
            )  # fmt: skip
            assert r.code == Res.PULL_NOT_FOUND, (r.code, r.remark)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_held(ep: Endpoint, count: int = 1) -> None:
    deadline = time.monotonic() + 5
    while len(ep.server._held) < count:
        assert time.monotonic() < deadline, "the pull was not held"
        time.sleep(0.01)


def test_a_held_pull_rerun_at_its_timeout_commits_nothing(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """The pull commits 5 when first handled; the consumer then commits the end; the re-run at
    the hold timeout must not put 5 back."""
    ep = endpoint(history)
    end = max(queue_messages(history)) + 1
    thread = held_pull(ep, end, commit=5, hold_ms=700)
    wait_held(ep)
    with ep.client() as c:
        assert committed(c) == 5
        c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=Q,
               commitOffset=end)  # fmt: skip
        thread.join(10)
        assert not thread.is_alive()
        time.sleep(0.3)
        assert committed(c) == end


def test_a_pull_commit_only_moves_forward_and_an_update_sets_any_value(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    with ep.client() as c:
        for commit, expect in ((10, 10), (4, 10), (12, 12)):
            r = pull(c, 0, sys_flag=FLAG_COMMIT_OFFSET, consumerGroup=GROUP, commitOffset=commit)
            assert r.code == Res.SUCCESS
            assert committed(c) == expect
        c.call(Req.UPDATE_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=Q,
               commitOffset=3)  # fmt: skip
        assert committed(c) == 3


def notices(c: RemotingClient, wait_s: float) -> list[Command]:
    """The frames the server sent ``c`` of its own accord within ``wait_s``."""
    kernel_timeouts(c.sock, wait_s)
    out = []
    try:
        while True:
            out.append(c.receive())
    except TimeoutError:
        return out
    finally:
        kernel_timeouts(c.sock, c.timeout_s)


def test_a_closed_connection_drops_its_clients_and_held_pulls_and_tells_the_others(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(history)
    end = max(queue_messages(history)) + 1
    with ep.client() as stays:
        beat(stays, "stays@1")
        notices(stays, 0.3)
        crashed = ep.client()
        beat(crashed, "crashed@1")  # a new member: the others rebalance now, as a broker says
        told = notices(stays, 0.5)
        assert [(n.code, n.flag & ONEWAY_FLAG, n.ext_fields) for n in told] == [
            (Req.NOTIFY_CONSUMER_IDS_CHANGED, ONEWAY_FLAG, {"consumerGroup": GROUP})
        ]
        assert consumers(stays) == ["crashed@1", "stays@1"]
        crashed.sock.sendall(encode(_held_pull(end)))
        wait_held(ep)
        # closed with a reset, no UNREGISTER_CLIENT: what a killed consumer's socket can do
        crashed.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        started = time.monotonic()
        crashed.close()
        told = notices(stays, 1.0)
        assert [n.code for n in told] == [Req.NOTIFY_CONSUMER_IDS_CHANGED]
        assert consumers(stays) == ["stays@1"]
        assert time.monotonic() - started < 3
        deadline = time.monotonic() + 3
        while ep.server._held:  # dropped at the holder's next look, never re-run
            assert time.monotonic() < deadline, "the closed connection's pull is still held"
            time.sleep(0.05)


def _held_pull(end: int) -> Command:
    fields = {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": Q, "queueOffset": end,
        "maxMsgNums": 32, "sysFlag": FLAG_SUSPEND | FLAG_COMMIT_OFFSET, "commitOffset": 7,
        "suspendTimeoutMillis": 30_000,
    }  # fmt: skip
    return Command(Req.PULL_MESSAGE, opaque=99, ext_fields={k: str(v) for k, v in fields.items()})


def test_clients_report_the_groups_a_change_concerns() -> None:
    clients = Clients()
    one, two = object(), object()
    sub = {"topic": "T", "subString": "*"}
    data = {"clientID": "a", "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [sub]}]}
    assert clients.heartbeat(data, now=0.0, channel=one) == ["G"]  # new
    assert clients.heartbeat(data, now=1.0, channel=one) == []  # the same again
    assert clients.heartbeat(data, now=2.0, channel=two) == ["G"]  # reconnected
    sub["subString"] = "TagA"
    assert clients.heartbeat(data, now=3.0, channel=two) == ["G"]  # subscription changed
    other = {"clientID": "b", "consumerDataSet": [{"groupName": "G"}]}
    clients.heartbeat(other, now=3.0, channel=one)
    assert clients.channels("G", now=3.0) == [two, one]
    assert clients.drop_channel(two) == {"G": ["a"]}
    assert clients.clients("G", now=3.0) == ["b"]
    assert clients.unregister("b", "G") == ["G"] and clients.clients("G", now=3.0) == []
    group = {"groupName": "B", "messageModel": "BROADCASTING"}
    broadcast = {"clientID": "c", "consumerDataSet": [group]}
    clients.heartbeat(broadcast, now=3.0, channel=one)
    assert clients.channels("B", now=3.0) == []  # each reads every queue: nothing to tell
