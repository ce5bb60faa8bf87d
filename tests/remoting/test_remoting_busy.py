"""``tieredReadMaxPending`` on the replay port: concurrent cold pulls over a slow backend, each on
its own connection -- those past the limit are answered ``SYSTEM_BUSY`` (code 2, what a busy
broker answers and clients back off on) at once and counted; a pull the read-ahead cache answers
is never refused, even while the limit is reached."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from prometheus_client import REGISTRY
from tiered.providers import LatencyProvider
from tiered.providers import Provider

from tiered.broker.generator import GenSpec
from tiered.remoting.client import split_messages
from tiered.remoting.codes import ResponseCode as Res
from tiered.remoting.frame import Command

from .conftest import EndpointFactory
from .conftest import build_history
from .test_remoting_requests import pull

LATENCY_S = 0.4
LIMIT = 2
READERS = 12


def rejected() -> float:
    labels = {"port": "remoting"}
    return REGISTRY.get_sample_value("rocketmq_tiered_store_read_rejected_total", labels) or 0


def test_cold_pulls_past_the_limit_are_system_busy_and_cache_hits_never(
    tmp_path: Path, replay_spec: GenSpec, endpoint: EndpointFactory
) -> None:
    slow: list[LatencyProvider] = []

    def wrap(provider: Provider) -> LatencyProvider:
        slow.append(LatencyProvider(provider, 0.0, operations={"read"}))
        return slow[0]

    tier = build_history(tmp_path / "tier", replay_spec, wrap=wrap)
    try:
        ep = endpoint(tier, "FORCE", tiered_read_max_pending=LIMIT)
        store = ep.replay.store
        with ep.client() as c:
            warm = pull(c, 0, queue_id=0, max_nums=32)  # queue 0's window is cached now
        assert warm.code == Res.SUCCESS
        for qid in (1, 2, 3):  # each queue's first message header is read (and kept) once
            assert store.get_min_offset("GenTopic0", qid) == 0
        slow[0].latency_s = LATENCY_S
        asks = [(qid, offset) for qid in (1, 2, 3) for offset in (0, 100, 200, 300)]
        before = rejected()
        answers: list[tuple[Command, float]] = []
        start = threading.Barrier(READERS + 1)

        def read(qid: int, offset: int) -> None:
            with ep.client() as client:
                start.wait()
                began = time.monotonic()
                response = pull(client, offset, queue_id=qid, max_nums=1)
                answers.append((response, time.monotonic() - began))

        threads = [threading.Thread(target=read, args=a) for a in asks]
        for t in threads:
            t.start()
        start.wait()
        time.sleep(LATENCY_S / 2)
        full = store.gate.pending
        with ep.client() as c:
            began = time.monotonic()
            hit = pull(c, 5, queue_id=0, max_nums=8)
            hit_s = time.monotonic() - began
        for t in threads:
            t.join()

        assert full == LIMIT
        assert hit.code == Res.SUCCESS and len(split_messages(hit.body)) == 8
        assert hit_s < LATENCY_S
        ok = [s for r, s in answers if r.code == Res.SUCCESS]
        busy = [(r, s) for r, s in answers if r.code == Res.SYSTEM_BUSY]
        print(
            f"\n{READERS} cold pulls at once, tieredReadMaxPending={LIMIT}: {len(ok)} served, "
            f"{len(busy)} SYSTEM_BUSY within {max(s for _, s in busy):.3f} s"
        )
        assert len(ok) + len(busy) == READERS
        assert len(ok) >= LIMIT and len(busy) >= READERS - 2 * LIMIT
        for response, seconds in busy:
            assert seconds < LATENCY_S
            assert "tieredReadMaxPending=2" in (response.remark or "")
        assert rejected() - before == len(busy)
    finally:
        tier.sidecar.close()
