"""Benchmark: RocketMQ 5's gRPC SimpleConsumer through a real RocketMQ Proxy, replaying the tier
from the sidecar's replay port vs reading hot data from the real broker.

Run with ``make bench`` (or ``pytest -s tests/bench/bench_grpc_proxy.py``; it needs ``make rmq``:
RocketMQ 5.3.3's jars and rocketmq-client-java 5.0.7). One real name server and broker (the
real-broker harness's, on loopback); the harness's Java producer sends :data:`COUNT` messages of
:data:`BODY` bytes to :data:`TOPIC` (:data:`QUEUES` queues); a real ``rmq-tiered run`` offloads
them and serves them with ``tieredStorageLevel=FORCE`` (every read of the replay port comes from
the tier; the tier's files were written moments before, so they are in the page cache, as the
broker's commitlog is).

Two RocketMQ Proxy 5.3.3 processes in cluster mode, the same settings but their name server:

* **sidecar**: ``namesrvAddr`` = the sidecar's replay port (every receive reaches it as
  ``POP_MESSAGE``, every ack as ``ACK_MESSAGE``);
* **broker**: ``namesrvAddr`` = the real name server (the broker's own POP on hot data, its
  timer wheel on as POP needs; a new group starts at offset 0 because the queues' first
  messages are still in memory).

Each run is one ``GrpcDriver simple`` (``rocketmq-client-java`` ``SimpleConsumer``, a new group,
:data:`BATCH` messages per receive, no output per message) that consumes the whole topic; its own
timer runs from the first receive to the last ack (not the JVM's start nor the consumer's). Two
ways to ack: *sync*, each message acked (``ack``) before the next is handled, the way the
client's examples do it; *async*, a batch's acks sent together (``ackAsync``) and awaited before
the next receive. Each proxy first serves a warm-up run of :data:`WARM_UP` messages (JIT,
connections); then the sides and modes alternate, :data:`REPEAT` runs each; figures are medians.
The sidecar's CPU-seconds (user + system, from ``/proc/<pid>/stat``) over its runs of a mode are
divided by the body bytes delivered; the broker's JVM likewise, beside it (its timer wheel and
POP checkpoints included). The proxy and the client run on the same machine and share its cores.
Goal (issue 47): sidecar msgs/s >= 0.7 of the broker's.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiered.providers.registry import from_config

from tiered.config import load_config
from tiered.testing.grpc_proxy import Proxy
from tiered.testing.grpc_proxy import compile_grpc_driver
from tiered.testing.grpc_proxy import run_grpc_driver
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.realbroker import free_port
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier

TOPIC = "BenchGrpc"
QUEUES = 4
COUNT = 20_000
BODY = 1024
BATCH = 32
REPEAT = 3
GOAL = 0.7
GIB = 1 << 30
WARM_UP = 2000
SERVED = "rocketmq_tiered_store_remoting_messages_served_total"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Setup:
    rocketmq: Runtime
    classes: Path
    broker: Broker
    sidecar: Sidecar
    proxies: dict[str, Proxy]

    def consume(self, side: str, group: str, *, ack_async: bool, count: int = COUNT) -> float:
        """One SimpleConsumer run through ``side``'s proxy that acks ``count`` messages (the
        whole topic by default): its elapsed seconds."""
        proxy = self.proxies[side]
        lines = run_grpc_driver(
            self.rocketmq, self.classes, proxy, "simple", timeout=400, group=group, topic=TOPIC,
            expect=count, stopAfter=count, batch=BATCH, invisibleMs=60_000, maxMs=300_000,
            quiet=True, ackAsync=ack_async,
        )  # fmt: skip
        last = lines[-1]
        assert last["acked"] >= count, (side, last)
        if count == COUNT:
            assert (last["received"], last["acked"]) == (COUNT, COUNT), (side, last)
        return float(last["elapsedMs"]) / 1000


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("bench-grpc")
    try:
        rocketmq = Runtime.prepare(work / "rmq-home")
    except RuntimeError as e:
        pytest.fail(str(e))
    classes = compile_grpc_driver(work / "classes")
    namesrv = NameServer(rocketmq, "namesrv", work / "namesrv")
    broker = Broker(
        rocketmq, "broker", work / "broker", namesrv=namesrv.address,
        conf_keys={"timerWheelEnable": "true"},  # the broker's POP needs its timer wheel
    )  # fmt: skip
    namesrv.workdir.mkdir()
    broker.workdir.mkdir()
    proxies: dict[str, Proxy] = {}
    car: Sidecar | None = None
    try:
        namesrv.start()
        broker.start()
        broker.wait_registered()
        conf = sidecar_conf(
            work / "sidecar.conf", work, tieredStoreTopicInclude=TOPIC,
            tieredRemotingPort=free_port(), tieredStorageLevel="FORCE",
        )  # fmt: skip
        car = Sidecar(conf, work / "sidecar", broker_conf=broker.conf)
        car.start()
        rocketmq.driver(
            "bulk", seed=47, topic=TOPIC, count=COUNT, size=BODY, tag="bench",
            topics={TOPIC: QUEUES}, namesrv=namesrv.address, broker=broker.address,
        )  # fmt: skip
        cfg = load_config([broker.conf, conf])
        provider = from_config(cfg)
        wait_for(
            "the tier to catch up",
            lambda: check_tier(cfg, provider, topics={TOPIC}).problems == [],
            120,
        )
        for side, ns, cluster in (
            ("sidecar", car.name_server, cfg.broker_cluster_name),
            ("broker", namesrv.address, broker.cluster),
        ):
            proxy = Proxy(rocketmq, f"proxy-{side}", work / f"proxy-{side}")
            proxy.workdir.mkdir()
            proxy.namesrv, proxy.cluster = ns, cluster
            proxies[side] = proxy
            proxy.start(timeout=120)
        yield Setup(rocketmq, classes, broker, car, proxies)
    finally:
        for proxy in proxies.values():
            proxy.stop(grace=5)
        if car is not None:
            car.stop()
        broker.stop()
        namesrv.stop()


def test_grpc_simple_consumer_sidecar_vs_broker(setup: Setup) -> None:
    sides = ("sidecar", "broker")
    modes = {"sync": False, "async": True}
    procs = {"sidecar": setup.sidecar.proc, "broker": setup.broker.proc}
    for side in sides:  # the proxy's and the server's first requests (JIT, connections)
        setup.consume(side, f"warm-{side}", ack_async=True, count=WARM_UP)
    seconds: dict[tuple[str, str], list[float]] = {(s, m): [] for s in sides for m in modes}
    cpu = dict.fromkeys(seconds, 0.0)
    served_before = setup.sidecar.metric(SERVED, tier="tiered")
    for run in range(REPEAT):
        for mode, ack_async in modes.items():
            for side in sides:
                proc = procs[side]
                assert proc is not None
                before = cpu_seconds(proc.pid)
                took = setup.consume(side, f"bench-{side}-{mode}-{run}", ack_async=ack_async)
                seconds[side, mode].append(took)
                cpu[side, mode] += cpu_seconds(proc.pid) - before
    served = setup.sidecar.metric(SERVED, tier="tiered") - served_before
    assert served >= 2 * REPEAT * COUNT, f"only {served} messages came from the tier"
    gib = REPEAT * COUNT * BODY / GIB
    rate = {k: COUNT / statistics.median(v) for k, v in seconds.items()}
    print(
        f"\ngRPC SimpleConsumer (rocketmq-client-java 5.0.7) through RocketMQ Proxy 5.3.3, "
        f"{COUNT} x {BODY} B, {QUEUES} queues, {BATCH} per receive; medians of {REPEAT} "
        "alternating runs; ack: sync = each message acked before the next, async = a batch's "
        "acks sent together and awaited before the next receive"
    )
    print(f"{'source':<34} {'ack':<6} {'msgs/s':>7} {'runs (s)':>18} {'server CPU-s/GiB':>17}")
    labels = {"sidecar": "sidecar replay port (tier, FORCE)", "broker": "real broker (hot data)"}
    for mode in modes:
        for side in sides:
            runs = " ".join(f"{x:.2f}" for x in seconds[side, mode])
            print(
                f"{labels[side]:<34} {mode:<6} {rate[side, mode]:>7.0f} {runs:>18} "
                f"{cpu[side, mode] / gib:>17.1f}"
            )
    for mode in modes:
        ratio = rate["sidecar", mode] / rate["broker", mode]
        print(f"ratio sidecar/broker, {mode} acks: {ratio:.2f} (goal >= {GOAL})")
