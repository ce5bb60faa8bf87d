"""The sidecar beside a real 5.3.3 broker of 2,000 topics × 8 queues.

A broker and a name server of this module alone (the shared ones keep their few topics), with
5-unit consumequeue files: the queues given 6 messages roll to a second file. The Java driver
creates every topic in one admin request and sends 1 to 6 messages to each of the 16,000 queues,
round by round over all of them, while ``rmq-tiered run`` tails the broker. Then every queue must
be in the tier from offset 0 to the broker's end, byte for byte (:func:`check_tier`, and each
message against the commitlog bytes the producer's offset message id points at), with the message
id the producer was given at each offset: nothing lost, nothing twice, nothing else; and no
dispatch step may have failed on the way (a retried step is no loss, but a healthy broker gives
no reason for one).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from tiered.providers.registry import from_config

from tiered.broker.message import decode
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.metadata import FileSegmentType
from tiered.testing.realbroker import Broker
from tiered.testing.realbroker import NameServer
from tiered.testing.realbroker import Runtime
from tiered.testing.replay_check import Key
from tiered.testing.replay_check import assert_stored_alike
from tiered.testing.replay_check import sidecar_conf
from tiered.testing.replay_check import tier_messages
from tiered.testing.replay_check import wait_for
from tiered.testing.sidecar_process import Sidecar
from tiered.testing.tier_check import check_tier
from tiered.testing.tier_check import read_document

pytestmark = pytest.mark.slow

PREFIX, TOPICS, QUEUES = "Wide", 2000, 8
CQ_FILE = 100  # 5 units a consumequeue file
PER_QUEUE = (1, 6)
BODY = (100, 400)
OPEN_FILES = 20_000
"""The broker keeps every consumequeue file it has open (about 18,700 here, one per queue and a
second for a sixth of them): more and it fails to create files ("Too many open files")."""


@dataclass
class Wide:
    """The module's broker, its own name server and the Java runtime."""

    broker: Broker
    namesrv: NameServer
    rocketmq: Runtime


@pytest.fixture(scope="module")
def wide(rocketmq: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wide]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < OPEN_FILES:
        pytest.fail(f"the broker needs {OPEN_FILES} open files; the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < OPEN_FILES:  # the JVMs inherit it
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, hard))
    namesrv = NameServer(rocketmq, "namesrv-wide", tmp_path_factory.mktemp("namesrv-wide"))
    namesrv.start()
    broker = Broker(
        rocketmq, "broker-wide", tmp_path_factory.mktemp("broker-wide"), namesrv=namesrv.address,
        conf_keys={"brokerName": "broker-wide", "mappedFileSizeConsumeQueue": CQ_FILE},
    )  # fmt: skip
    try:
        broker.start()
        broker.wait_registered()
        yield Wide(broker, namesrv, rocketmq)
    finally:
        broker.stop()
        namesrv.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Usage:
    """CPU seconds and peak RSS of a process, from ``/proc``."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int) -> None:
        self.proc = Path(f"/proc/{pid}")

    def cpu_s(self) -> float:
        fields = (self.proc / "stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.TICK  # utime, stime

    def peak_rss_mib(self) -> float:
        for line in (self.proc / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no VmHWM in {self.proc}/status")


def tier_units(cfg: TieredConfig) -> dict[tuple[str, int], int]:
    """Consumequeue units per queue of the metadata file as written (what is durable)."""
    doc = read_document(cfg)
    out: dict[tuple[str, int], int] = {}
    for path, segments in doc.segment_table(FileSegmentType.CONSUME_QUEUE).items():
        name, topic, qid = path.split("/")
        if name == cfg.broker_name:
            out[(topic, int(qid))] = sum(s.size for s in segments.values()) // 20
    return out


def broker_units(store: Path) -> dict[tuple[str, int], int]:
    """Units per queue of the broker's consumequeue files (a unit of size 0 is not written)."""
    out: dict[tuple[str, int], int] = {}
    root = store / "consumequeue"
    for topic in os.listdir(root):
        for qid in os.listdir(root / topic):
            units = b"".join(p.read_bytes() for p in sorted((root / topic / qid).iterdir()))
            sizes = np.frombuffer(units, dtype=">i4").reshape(-1, 5)[:, 2]
            out[(topic, int(qid))] = int(np.count_nonzero(sizes))
    return out


def commitlog_bytes(broker: Broker, offsets: dict[Key, int]) -> dict[Key, bytes]:
    """Each message's stored bytes at its commitlog offset (its TOTALSIZE first), read straight
    from the broker's files."""
    size = int(str(broker.settings()["mappedFileSizeCommitLog"]))
    out: dict[Key, bytes] = {}
    by_file: dict[int, list[tuple[Key, int]]] = {}
    for k, off in offsets.items():
        by_file.setdefault(off // size, []).append((k, off % size))
    for n, items in by_file.items():
        with (broker.store / "commitlog" / f"{n * size:020d}").open("rb") as f:
            for k, pos in items:
                f.seek(pos)
                total = int.from_bytes(f.read(4), "big")
                out[k] = (total.to_bytes(4, "big") + f.read(total - 4)) if total > 4 else b""
    return out


def test_two_thousand_topics_offloaded_byte_for_byte(wide: Wide, tmp_path: Path) -> None:
    """16,000 queues written at once through a real broker: the sidecar tails them all and the
    tier holds every message of every queue exactly once, as the broker stored it."""
    b = wide.broker
    conf = sidecar_conf(tmp_path / "sidecar.conf", tmp_path)
    cfg = load_config([b.conf, conf])
    car = Sidecar(conf, tmp_path / "run", broker_conf=b.conf)
    started = time.monotonic()
    car.start()
    assert car.proc is not None
    usage = Usage(car.proc.pid)
    try:
        cpu_ready = usage.cpu_s()
        lines = wide.rocketmq.driver(
            "spread", namesrv=wide.namesrv.address, broker=b.address, brokerName=b.broker_name,
            prefix=PREFIX, topics=TOPICS, queues=QUEUES, seed=45, min=PER_QUEUE[0],
            max=PER_QUEUE[1], minSize=BODY[0], maxSize=BODY[1], threads=8, maxMs=240_000,
        )  # fmt: skip
        sent_at = time.monotonic()
        created = next(line["created"] for line in lines if "created" in line)
        sent = next(line["sent"] for line in lines if "sent" in line)
        ids: dict[Key, str] = {}
        offsets: dict[Key, int] = {}
        want: dict[tuple[str, int], int] = {}
        for line in lines:
            if "queue" not in line:
                continue
            q = line["queue"]
            assert sorted(q["offsets"]) == list(range(len(q["offsets"]))), q
            want[(q["topic"], q["queueId"])] = len(q["offsets"])
            for off, both in zip(q["offsets"], q["ids"], strict=True):
                uniq, offset_id = both.split("/")
                ids[(q["topic"], q["queueId"], off)] = uniq
                offsets[(q["topic"], q["queueId"], off)] = int(offset_id[16:], 16)
        assert len(want) == TOPICS * QUEUES and min(want.values()) >= PER_QUEUE[0]
        assert len(ids) == sent["messages"]

        def in_broker() -> bool:
            units = broker_units(b.store)
            return all(units.get(q, 0) >= n for q, n in want.items())

        wait_for("the broker's consumequeues to hold every message sent", in_broker, 60, every=2)
        assert {q: n for q, n in broker_units(b.store).items() if q[0].startswith(PREFIX)} == want

        def caught_up() -> bool:
            units = tier_units(cfg)
            return all(units.get(q, 0) >= n for q, n in want.items())

        wait_for("the tier to hold every message sent", caught_up, timeout=600, every=3)
        done_at = time.monotonic()
        cpu_done, rss_done = usage.cpu_s(), usage.peak_rss_mib()
        log = tmp_path.joinpath(f"run.{car.starts}.log").read_text("utf-8", "replace")
        failed = [line for line in log.splitlines() if "dispatch failed" in line]
        assert not failed, f"{len(failed)} failed steps, the first: {failed[:3]}"

        provider = from_config(cfg)
        report = check_tier(cfg, provider, topics={t for t, _ in want})
        report.assert_ok(messages=len(ids))
        assert report.ranges == {q: (0, n) for q, n in want.items()}
        tier = tier_messages(cfg, provider)
        assert set(tier) == set(ids), sorted(set(tier) ^ set(ids))[:5]
        wrong = [
            k for k, (_, data) in tier.items() if decode(data).properties["UNIQ_KEY"] != ids[k]
        ]
        assert not wrong, wrong[:5]
        raw = commitlog_bytes(b, offsets)
        assert_stored_alike(tier, raw)
        checked_at = time.monotonic()
        cq_files = sum(len(files) for _, _, files in os.walk(b.store / "consumequeue"))
        stored = sum(len(data) for _, data in tier.values())
        print(
            f"{TOPICS} topics x {QUEUES} queues: {len(want)} queues, {len(ids)} messages "
            f"({sent['bodyBytes']} body bytes, {stored} stored bytes), {cq_files} consumequeue "
            f"files; topics created in {created['ms'] / 1000:.1f} s, sent in "
            f"{sent['ms'] / 1000:.1f} s; the tier held all {done_at - sent_at:.1f} s after the "
            f"last send ({done_at - started:.1f} s after the sidecar's start), checked in "
            f"{checked_at - done_at:.1f} s; sidecar CPU {cpu_done:.1f} s "
            f"({cpu_done - cpu_ready:.1f} s from ready to caught up), peak RSS {rss_done:.0f} MiB"
        )
    finally:
        car.stop()
