"""Faults of a real broker while the sidecar follows it (a broker of this module alone).

While a Java producer sends (retrying while the broker is down): the broker is killed with SIGKILL
and started again (abnormal recovery), the sidecar is killed with SIGKILL and started again, the
broker is stopped and started. Then the broker deletes its old commitlog files while a restarted
sidecar is still reading its backlog. After each: the tier equals the broker's store and a Java
reference read (nothing lost, nothing twice), what the broker deleted before the sidecar read it is
reported as a gap, and the sidecar never opened the store for writing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest
from tiered.providers.registry import from_config

from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.replay_check import Key
from tiered.testing.replay_check import Message
from tiered.testing.replay_check import ReadOnlyWatch
from tiered.testing.replay_check import assert_stored_alike
from tiered.testing.replay_check import messages
from tiered.testing.replay_check import read_raw
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import sidecar_status
from tiered.testing.replay_check import tier_messages
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier

TOPIC = "FaultTopic"
QUEUES = 4


@dataclass
class Faults:
    broker: Broker
    cfg: TieredConfig
    conf: Path
    reference: dict[Key, Message]
    raw: dict[Key, bytes]
    watches: list[ReadOnlyWatch] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    retried: int = 0
    lag_at_delete: int = 0
    status: dict[str, Any] = field(default_factory=dict)


def status(broker: Broker, conf: Path) -> dict[str, Any]:
    return sidecar_status(broker.conf, conf)[0]


def stored(broker: Broker, conf: Path) -> int:
    """Messages of the topic in the broker's consumequeues."""
    rows = [q for q in status(broker, conf)["queues"] if q["topic"] == TOPIC]
    return sum(max(0, q["localMax"]) for q in rows)


def caught_up(broker: Broker, conf: Path) -> bool:
    rows = [q for q in status(broker, conf)["queues"] if q["topic"] == TOPIC]
    return len(rows) == QUEUES and all(q["tieredCommit"] == q["localMax"] for q in rows)


def started(car: Sidecar, broker: Broker, faults: list[ReadOnlyWatch]) -> Sidecar:
    car.start()
    assert car.proc is not None
    watch = ReadOnlyWatch(car.proc.pid, broker.store)
    watch.start()
    faults.append(watch)
    return car


@pytest.fixture(scope="module")
def faults(
    rocketmq: Runtime,
    broker: Broker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Faults]:
    """The faults, in order (see the module docstring), on a broker and name server of their own
    (a producer that sees its broker down falls back on another broker with the same topic). The
    session's shared broker is started first, so that its own 60 s before it deletes files run
    out meanwhile."""
    assert broker.proc is not None
    work = tmp_path_factory.mktemp("faults")
    namesrv = NameServer(rocketmq, "namesrv", work)
    (work / "broker").mkdir()
    b = Broker(rocketmq, "broker", work / "broker", namesrv=namesrv.address,
               conf_keys={"brokerName": "broker-f"})  # fmt: skip
    conf = sidecar_conf(work / "sidecar.conf", work)
    car = Sidecar(conf, work / "run", broker_conf=b.conf)
    try:
        namesrv.start()
        b.start()
        yield from _faults(rocketmq, namesrv, b, car, work, conf)
    finally:
        car.stop()
        b.stop()
        namesrv.stop()


def _faults(
    rocketmq: Runtime, namesrv: NameServer, b: Broker, car: Sidecar, work: Path, conf: Path
) -> Iterator[Faults]:
    watches: list[ReadOnlyWatch] = []
    events: list[str] = []
    started(car, b, watches)
    common: dict[str, Any] = {"namesrv": namesrv.address, "broker": b.address,
                              "topics": {TOPIC: QUEUES}, "retryMs": 90_000}  # fmt: skip
    producer = rocketmq.spawn("bulk", topic=TOPIC, count=6000, size=1500, pauseMs=2, seed=1,
                              keyEvery=100, tag="f", **common)  # fmt: skip
    # the producer first creates the topic and waits for its route: fault it only once it sends
    wait_for("the producer to send", lambda: stored(b, conf) >= 300, 120, every=0.2)
    b.kill()
    assert (b.store / "abort").exists(), "a killed broker leaves its abort file"
    b.start()  # abnormal recovery
    events.append("broker SIGKILL mid-production, restarted (abnormal recovery)")
    wait_for("the producer to send again", lambda: stored(b, conf) >= 1500, 120, every=0.2)
    assert car.proc is not None
    car.proc.kill()
    car.proc.wait()
    car.proc = None
    started(car, b, watches)
    events.append("sidecar SIGKILL while the broker writes, restarted")
    wait_for("the producer to go on", lambda: stored(b, conf) >= 2500, 120, every=0.2)
    b.stop()
    b.start()
    events.append("broker stopped (SIGTERM) and started")
    lines = producer.wait()
    retried = sum(int(line["retried"]) for line in lines if "retried" in line)
    assert retried > 0, "the producer never saw the broker down"
    cfg = load_config([b.conf, conf])
    provider = from_config(cfg)
    wait_for("the tier to catch up",
             lambda: check_tier(cfg, provider, topics={TOPIC}).problems == [], 90)  # fmt: skip
    check_tier(cfg, provider, topics={TOPIC}).assert_ok()
    # the broker deletes files while a sidecar reads its backlog
    car.stop()
    rocketmq.driver("bulk", topic=TOPIC, count=12000, size=2048, seed=2, **common)
    ref = messages(rocketmq.driver("consume", mode="lite", group="it-faults-ref", topics=[TOPIC],
                                   maxMs=120_000, namesrv=namesrv.address))  # fmt: skip
    raw = read_raw(b, ref)
    slow = sidecar_conf(work / "slow.conf", work, tieredStoreGroupCommitCount=16)
    car.conf = slow
    time.sleep(max(0.0, b.started_at + 58 - time.time()))  # cleaning starts 60 s after start
    started(car, b, watches)
    lag = sum(q["lagMessages"] for q in status(b, slow)["queues"])
    first = sorted((b.store / "commitlog").iterdir())[0]  # before the broker may delete it
    out = rocketmq.mqadmin(
        namesrv.address,
        ["updateBrokerConfig", "-b", b.address, "-k", "fileReservedTime", "-v", "0"],
        ["deleteExpiredCommitLog", "-b", b.address],
    )
    assert "success" in out[0] and "success" in out[1], out
    wait_for("the broker to delete files", lambda: not first.exists(), 60)
    events.append(f"broker deleted commitlog files while the sidecar read (lag {lag} messages)")
    wait_for("the sidecar to reach the broker's max offsets", lambda: caught_up(b, slow), 120)
    result = Faults(b, cfg, slow, ref, raw, watches, events, retried, lag, status(b, slow))
    try:
        yield result
    finally:
        for w in watches:
            w.stopping.set()
            w.join()


def test_nothing_lost_or_twice_through_broker_and_sidecar_faults(faults: Faults) -> None:
    """The tier holds every reference message once, stored alike, bar only what the broker
    deleted before the sidecar could read it -- which status reports as gaps."""
    tier = tier_messages(faults.cfg, from_config(faults.cfg))
    assert {k[0] for k in tier} == {TOPIC}
    assert set(tier) <= set(faults.reference)
    assert_stored_alike(tier, {k: faults.raw[k] for k in tier})
    missing = set(faults.reference) - set(tier)
    gaps: dict[int, set[int]] = {}
    for q in faults.status["queues"]:
        for start, end, _ in q["gaps"]:
            gaps.setdefault(q["queueId"], set()).update(range(start, end))
    assert {(TOPIC, q, o) for q, offs in gaps.items() for o in offs} == missing
    assert faults.lag_at_delete > 0, "the sidecar had no backlog when the broker deleted"
    print(
        f"faults: {'; '.join(faults.events)}; producer retried {faults.retried} sends; "
        f"{len(faults.reference)} reference messages, {len(tier)} in the tier, "
        f"{len(missing)} deleted by the broker before the sidecar read them (gaps)"
    )


def test_the_store_was_never_opened_for_writing(faults: Faults) -> None:
    assert all(w.samples > 10 for w in faults.watches)
    assert [v for w in faults.watches for v in w.violations] == []
