"""A topic on two real brokers (broker-a and broker-b of this module, behind their own name server)
replayed whole through their two sidecars: both register with a real RocketMQ name server
dedicated to replay (``tieredRemotingNamesrvAddr``), and each also knows the other as a peer
(``tieredRemotingPeers``). Both brokers delete their old commitlog files first, so the history
comes from the tiers. Java consumers pointed at the replay name server -- and, apart, at one
sidecar's own name-server half -- replay every message of both brokers exactly once; mqadmin
sees both sidecars; a RocketMQ Proxy whose name server is the replay one serves a gRPC
SimpleConsumer every message of both brokers once, by POP from each broker's sidecar; a restarted
sidecar registers again and consumers go on; a sidecar pointed at the production name server,
where its broker is registered, refuses to start."""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tiered.providers.registry import from_config

from tiered.config import load_config
from tiered.remoting.client import RemotingClient
from tiered.testing.grpc_proxy import Proxy
from tiered.testing.grpc_proxy import compile_grpc_driver
from tiered.testing.grpc_proxy import run_grpc_driver
from tiered.testing.http import get
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.realbroker import free_port
from tiered.testing.replay_check import ClusterKey
from tiered.testing.replay_check import Message
from tiered.testing.replay_check import assert_same
from tiered.testing.replay_check import cluster_messages
from tiered.testing.replay_check import delete_old_commitlog
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import RMQ_TIERED
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier

TOPIC = "ClusterTopic"
QUEUES = 4  # on each broker


@dataclass
class Cluster:
    rocketmq: Runtime
    replay: NameServer
    brokers: dict[str, Broker]
    cars: dict[str, Sidecar]
    confs: dict[str, Path]
    reference: dict[ClusterKey, Message]


def consume(c: Cluster, namesrv: str, mode: str, group: str) -> dict[ClusterKey, Message]:
    push: dict[str, Any] = (
        {"stopAfter": len(c.reference), "idleMs": 20_000} if mode == "push" else {}
    )
    lines = c.rocketmq.driver(
        "consume", mode=mode, group=group, topics=[TOPIC], namesrv=namesrv, maxMs=120_000, **push
    )
    got = cluster_messages(lines)
    assert got, f"{mode} consumer of {group} through {namesrv} read nothing: {lines[:5]}"
    return got


@pytest.fixture(scope="module")
def cluster(rocketmq: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("cluster")
    servers = {n: NameServer(rocketmq, n, work / n) for n in ("namesrv", "replay-namesrv")}
    prod, replay = servers["namesrv"], servers["replay-namesrv"]
    brokers = {
        n: Broker(rocketmq, n, work / n, namesrv=prod.address,
                  conf_keys={"brokerName": n, "brokerClusterName": "ReplayCluster"})
        for n in ("broker-a", "broker-b")
    }  # fmt: skip
    ports = {n: free_port() for n in brokers}
    cars: dict[str, Sidecar] = {}
    confs: dict[str, Path] = {}
    try:
        for server in [*servers.values(), *brokers.values()]:
            server.workdir.mkdir()
            server.start()
        for name, owner in brokers.items():
            owner.wait_registered()
            peer = next(p for n, p in ports.items() if n != name)
            confs[name] = sidecar_conf(
                work / f"{name}.conf", work / f"{name}-tier",
                tieredRemotingPort=ports[name],
                tieredRemotingNamesrvAddr=replay.address,
                tieredRemotingRegisterIntervalMs=2000,
                tieredRemotingPeers=f"127.0.0.1:{peer}",
                tieredRemotingPeerCacheMs=500,
            )  # fmt: skip
            cars[name] = Sidecar(confs[name], work / f"{name}-run", broker_conf=owner.conf)
            cars[name].start()
        common: dict[str, Any] = {"namesrv": prod.address, "topics": {TOPIC: QUEUES}}
        rocketmq.driver("bulk", topic=TOPIC, count=10, size=64, seed=1,
                        broker=brokers["broker-b"].address, **common)  # fmt: skip
        rocketmq.driver("bulk", topic=TOPIC, count=10_000, size=2048, seed=41, keyEvery=25,
                        tag="c", broker=brokers["broker-a"].address, **common)  # fmt: skip
        reference = cluster_messages(rocketmq.driver("consume", mode="lite", group="it-cluster-ref",
                                             topics=[TOPIC], namesrv=prod.address,
                                             maxMs=120_000))  # fmt: skip
        for name, owner in brokers.items():
            done = functools.partial(_offloaded, confs[name], owner)
            wait_for(f"{name}'s sidecar to offload {TOPIC}", done, 90)
        for owner in brokers.values():
            delete_old_commitlog(rocketmq, prod.address, owner)
        yield Cluster(rocketmq, replay, brokers, cars, confs, reference)
    finally:
        for car in cars.values():
            car.stop()
        for server in [*brokers.values(), *servers.values()]:
            server.stop()


def _offloaded(conf: Path, b: Broker) -> bool:
    cfg = load_config([b.conf, conf])
    report = check_tier(cfg, from_config(cfg), topics={TOPIC})
    return not report.problems and len(report.ranges) == QUEUES


def test_consumers_of_the_replay_name_server_read_both_brokers_once(cluster: Cluster) -> None:
    per_broker = {
        name: sum(1 for k in cluster.reference if _on(cluster, k, name)) for name in cluster.brokers
    }
    assert all(per_broker.values()), per_broker
    for mode in ("lite", "push"):
        got = consume(cluster, cluster.replay.address, mode, f"it-cluster-{mode}")
        assert_same(got, cluster.reference)
    print(f"replayed through the replay name server, per broker: {per_broker}")


def test_a_grpc_simple_consumer_through_a_proxy_of_the_replay_name_server(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A real RocketMQ Proxy (cluster mode) whose name server is the replay name server: the
    proxy routes POP to each broker's sidecar, and a Java gRPC SimpleConsumer receives and acks
    every message of both brokers, tier-only ones included, exactly once."""
    c = cluster
    pop = "rocketmq_tiered_store_remoting_pop_messages_total"
    events = ("delivered", "acked", "redelivered")
    before = {n: {e: car.metric(pop, event=e) for e in events} for n, car in c.cars.items()}
    proxy = Proxy(c.rocketmq, "proxy", tmp_path / "proxy")
    proxy.workdir.mkdir()
    proxy.namesrv, proxy.cluster = c.replay.address, "ReplayCluster"
    try:
        classes = compile_grpc_driver(tmp_path / "classes")
        proxy.start(timeout=120)
        done = run_grpc_driver(
            c.rocketmq, classes, proxy, "simple", group="grpc-cluster", topic=TOPIC,
            expect=len(c.reference), batch=32, invisibleMs=30_000, maxMs=150_000, quiet=True,
        )[-1]  # fmt: skip
    finally:
        proxy.stop(grace=5)
    assert (done["received"], done["acked"]) == (len(c.reference), len(c.reference)), done
    counts = {
        n: {e: car.metric(pop, event=e) - before[n][e] for e in events} for n, car in c.cars.items()
    }
    for name, car in c.cars.items():
        host = c.brokers[name].address
        keys = [k for k in c.reference if k[0] == host]
        assert counts[name] == {"delivered": len(keys), "acked": len(keys), "redelivered": 0}
        ends = {q: max(o for (_, _, qq, o) in keys if qq == q) + 1 for q in range(QUEUES)}
        with RemotingClient("127.0.0.1", car.port) as rc:
            for q, end in ends.items():
                r = rc.call(14, consumerGroup="grpc-cluster", topic=TOPIC, queueId=q)
                assert (r.code, int(r.ext_fields["offset"])) == (0, end), (name, q, r.remark)
        local_min = {
            q: get(car.http, f"/v1/topics/{TOPIC}/queues/{q}/offsets").json()["localMin"]
            for q in range(QUEUES)
        }
        tier_only = sum(1 for (_, _, q, o) in keys if o < local_min[q])
        assert tier_only > 0, f"no message only {name}'s tier holds was read"
        print(f"grpc via replay name server, {name}: {counts[name]}, {tier_only} tier-only")


def _on(c: Cluster, key: ClusterKey, broker: str) -> bool:
    return key[0] == c.brokers[broker].address


def test_mqadmin_sees_both_sidecars(cluster: Cluster) -> None:
    out = cluster.rocketmq.mqadmin(
        cluster.replay.address, ["topicRoute", "-t", TOPIC], ["clusterList"]
    )
    route, clusters = out
    for name, car in cluster.cars.items():
        address = f"127.0.0.1:{car.port}"
        assert name in route and address in route, route
        assert name in clusters and address in clusters, clusters
    print(route)


def test_the_peers_answer_without_a_name_server(cluster: Cluster) -> None:
    for mode in ("lite", "push"):
        got = consume(cluster, cluster.cars["broker-a"].name_server, mode, f"it-peers-{mode}")
        assert_same(got, cluster.reference)


def test_a_restarted_sidecar_registers_again(cluster: Cluster) -> None:
    car = cluster.cars["broker-b"]
    car.stop()
    wait_for("broker-b to leave the replay name server",
             lambda: "broker-b" not in _cluster_list(cluster), 30)  # fmt: skip
    car.start()
    wait_for("broker-b's sidecar to register again",
             lambda: f"127.0.0.1:{car.port}" in _cluster_list(cluster), 30)  # fmt: skip
    got = consume(cluster, cluster.replay.address, "lite", "it-cluster-after-restart")
    assert_same(got, cluster.reference)


def _cluster_list(c: Cluster) -> str:
    return c.rocketmq.mqadmin(c.replay.address, ["clusterList"])[0]


def test_a_sidecar_refuses_the_name_server_its_broker_uses(
    cluster: Cluster, tmp_path: Path
) -> None:
    broker = cluster.brokers["broker-a"]
    namesrv = broker.namesrv
    conf = sidecar_conf(tmp_path / "wrong.conf", tmp_path, tieredRemotingNamesrvAddr=namesrv)
    started = time.monotonic()
    done = subprocess.run(
        [RMQ_TIERED, "run", "-c", str(broker.conf), "-c", str(conf)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert f"name server {namesrv} already has broker 'broker-a'" in done.stderr
    assert "dedicated to replay" in done.stderr
    assert time.monotonic() - started < 60


def test_java_consumers_replay_both_brokers_through_read_replicas(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two ``rmq-tiered serve`` replicas, one per broker's tier (no broker store, data dirs of
    their own, each other's peers): Java consumers pointed at one replica replay every message of
    both brokers once, including messages offloaded after the replicas started; the replicas send
    their tiers reads only. Last in this module: it adds messages to broker-a."""
    ports = {n: free_port() for n in cluster.brokers}
    replicas: dict[str, Sidecar] = {}
    try:
        for name, owner in cluster.brokers.items():
            peer = next(p for n, p in ports.items() if n != name)
            conf = sidecar_conf(
                tmp_path / f"{name}-replica.conf", cluster.confs[name].parent / f"{name}-tier",
                tieredDataDir=tmp_path / f"{name}-replica-data",
                tieredRemotingPort=ports[name],
                tieredRemotingPeers=f"127.0.0.1:{peer}",
                tieredRemotingPeerCacheMs=500,
                tieredReplicaRefreshMs=500,
            )  # fmt: skip
            replicas[name] = Sidecar(
                conf, tmp_path / f"{name}-serve", broker_conf=owner.conf, command="serve"
            )
            replicas[name].start()
        namesrv = replicas["broker-a"].name_server
        assert_same(consume(cluster, namesrv, "lite", "it-replica-lite"), cluster.reference)

        prod = cluster.brokers["broker-a"].namesrv
        cluster.rocketmq.driver("bulk", topic=TOPIC, count=500, size=512, seed=77,
                                broker=cluster.brokers["broker-a"].address, namesrv=prod,
                                topics={TOPIC: QUEUES})  # fmt: skip
        on_disk = cluster_messages(cluster.rocketmq.driver(
            "consume", mode="lite", group="it-replica-ref", topics=[TOPIC], namesrv=prod,
            maxMs=120_000))  # fmt: skip
        reference = cluster.reference | on_disk  # the brokers deleted their oldest files
        assert len(reference) == len(cluster.reference) + 500
        host = cluster.brokers["broker-a"].address
        last = {q: o for (h, _, q, o) in sorted(reference) if h == host}

        def followed() -> bool:
            http = replicas["broker-a"].http
            return all(
                get(http, f"/v1/topics/{TOPIC}/queues/{q}/messages", offset=o).json()["messages"]
                for q, o in last.items()
            )

        wait_for("broker-a's replica to serve the new messages", followed, 60)
        assert_same(consume(cluster, namesrv, "lite", "it-replica-after-lite"), reference)
        pushed = cluster.rocketmq.driver(
            "consume", mode="push", group="it-replica-after-push", topics=[TOPIC],
            namesrv=namesrv, maxMs=120_000, stopAfter=len(reference), idleMs=20_000,
        )  # fmt: skip
        assert_same(cluster_messages(pushed), reference)
        for replica in replicas.values():
            reads = {"READ", "STAT", "LIST"}
            for op in ("WRITE", "FSYNC", "RENAME", "DELETE"):
                assert replica.metric("rocketmq_tiered_store_provider_requests_total",
                                      operation=op) == 0, op  # fmt: skip
            assert any(
                replica.metric("rocketmq_tiered_store_provider_requests_total", operation=op)
                for op in reads
            )
    finally:
        for replica in replicas.values():
            replica.stop()
