"""The name-server half for a cluster, in process: routes and cluster info merged from peer
sidecars (``tieredRemotingPeers``), a peer's own answer when asked ``tieredLocalOnly``, an
unreachable peer left out; registration (``tieredRemotingNamesrvAddr``) refusing a name server
that holds the broker name at another address, and a slave's sidecar standing by. (With real
brokers, a real name server and Java consumers: tests/realbroker/test_cluster_replay.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered.errors import ConfigError
from tiered.remoting.codes import RequestCode
from tiered.remoting.codes import ResponseCode
from tiered.remoting.peers import LOCAL_ONLY
from tiered.remoting.peers import Peers
from tiered.remoting.registration import Registration
from tiered.testing.realbroker import free_port
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory


def ask(endpoint: Any, code: int, **fields: str) -> Any:
    with endpoint.client() as c:
        response = c.call(code, **fields)
    if response.code != ResponseCode.SUCCESS:
        return response.code
    return json.loads(response.body)


def test_routes_merge_the_peers_own(history: SampleTier, endpoint: EndpointFactory) -> None:
    b = endpoint(history, broker_name="broker-b")
    down = f"127.0.0.1:{free_port()}"  # nobody listens: left out
    a = endpoint(history, peers=Peers((f"127.0.0.1:{b.server.port}", down), 500))
    route = ask(a, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    brokers = {d["brokerName"]: d["brokerAddrs"]["0"] for d in route["brokerDatas"]}
    assert brokers == {"broker-a": a.server.address, "broker-b": b.server.address}
    queues = {q["brokerName"]: q for q in route["queueDatas"]}
    assert set(queues) == {"broker-a", "broker-b"}
    assert queues["broker-a"]["readQueueNums"] == queues["broker-b"]["readQueueNums"] > 0
    assert all(q["perm"] == 4 and q["writeQueueNums"] == 0 for q in queues.values())
    own = ask(a, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC, **{LOCAL_ONLY: "true"})
    assert [d["brokerName"] for d in own["brokerDatas"]] == ["broker-a"]
    info = ask(a, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert set(info["brokerAddrTable"]) == {"broker-a", "broker-b"}
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    unknown = ask(a, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="NoSuchTopic")
    assert unknown == ResponseCode.TOPIC_NOT_EXIST


def test_a_topic_only_a_peer_holds_routes_to_the_peer(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    b = endpoint(history, broker_name="broker-b")
    a = endpoint(history, peers=Peers((f"127.0.0.1:{b.server.port}",), 0), broker_name="broker-a")
    route = ask(a, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="broker-b")  # broker-b's own topic
    assert [d["brokerName"] for d in route["brokerDatas"]] == ["broker-b"]


def test_registration_refuses_a_name_server_holding_the_broker_elsewhere(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    holder = endpoint(history)  # answers cluster info: broker-a at its own address
    cfg = history.cfg.model_copy(
        update={"tiered_remoting_namesrv_addr": (f"127.0.0.1:{holder.server.port}",)}
    )
    reg = Registration(cfg, holder.replay.naming, lambda: "127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"already has broker 'broker-a'.*dedicated to replay"):
        reg.start()
    assert all(s.client is None for s in reg.states.values())
    body = json.loads(reg.body())
    table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
    assert table[TOPIC]["perm"] == 4 and table[TOPIC]["writeQueueNums"] == 0
    assert {"DefaultCluster", "broker-a"} <= set(table)  # never a lone topic


def test_registration_routes_what_a_proxy_of_the_replay_name_server_needs(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """A RocketMQ Proxy whose name server is the replay one finds a broker through the cluster's
    route (queue data needed) and fails to start without its heartbeat-sync topic's route."""
    reg = Registration(history.cfg, endpoint(history).replay.naming, lambda: "127.0.0.1:1")
    table = json.loads(reg.body())["topicConfigSerializeWrapper"]["topicConfigTable"]
    for topic in ("DefaultCluster", "broker-a", "DefaultHeartBeatSyncerTopic"):
        assert (table[topic]["readQueueNums"], table[topic]["writeQueueNums"]) == (1, 0), topic
        assert table[topic]["perm"] == 4, topic


def test_a_slaves_sidecar_stands_by(history: SampleTier, endpoint: EndpointFactory) -> None:
    holder = endpoint(history)
    cfg = history.cfg.model_copy(
        update={"tiered_remoting_namesrv_addr": (f"127.0.0.1:{holder.server.port}",),
                "broker_id": 1}
    )  # fmt: skip
    reg = Registration(cfg, holder.replay.naming, lambda: "127.0.0.1:1")
    reg.start()  # no conflict check, no connection: a slave's sidecar does not register
    assert not reg.active and all(s.client is None for s in reg.states.values())
    reg.stop()


def test_a_stale_registration_of_the_broker_is_replaced(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    """The name server names the broker at an address where nothing listens (the sidecar's
    previous pod IP): no conflict, the sidecar registers over it."""
    gone = f"127.0.0.1:{free_port()}"
    holder = endpoint(history, server={"advertised_address": gone})
    cfg = history.cfg.model_copy(
        update={"tiered_remoting_namesrv_addr": (f"127.0.0.1:{holder.server.port}",)}
    )
    reg = Registration(cfg, holder.replay.naming, lambda: "127.0.0.1:1")
    reg.start()  # no ConfigError
    try:
        assert all(s.conflict == "" for s in reg.states.values())
    finally:
        reg.stop()
