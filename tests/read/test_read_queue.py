"""``tieredReadMaxPending``: concurrent cold reads over a slow backend, through the real HTTP API
on a real port -- those past the limit are answered 503 with ``Retry-After`` at once and counted;
a read the read-ahead cache answers is never refused, even while the limit is reached."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client import REGISTRY
from tiered.providers import LatencyProvider
from tiered.providers import Provider

from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.testing.sample_tier import SampleTier

LATENCY_S = 0.4
"""Each backend read of the slow backend (a cold read makes two: consumequeue, commitlog)."""
LIMIT = 2
READERS = 12
TierFactory = Callable[..., SampleTier]


@dataclass
class Answer:
    status: int
    seconds: float
    headers: dict[str, str]
    body: dict[str, object]


def get(url: str, path: str) -> Answer:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    started = time.monotonic()
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = json.loads(response.read())
        headers = {k.lower(): v for k, v in response.getheaders()}
        return Answer(response.status, time.monotonic() - started, headers, body)
    finally:
        conn.close()


def rejected(port: str) -> float:
    labels = {"port": port}
    return REGISTRY.get_sample_value("rocketmq_tiered_store_read_rejected_total", labels) or 0


def test_cold_reads_past_the_limit_are_refused_at_once_and_cache_hits_never(
    make_tier: TierFactory,
) -> None:
    slow: list[LatencyProvider] = []

    def wrap(provider: Provider) -> LatencyProvider:
        slow.append(LatencyProvider(provider, 0.0, operations={"read"}))
        return slow[0]

    tier = make_tier("posix", wrap=wrap, deleted_files=0)
    store = tier.store("FORCE", tiered_read_max_pending=LIMIT)
    server = HttpServer(
        create_app(store, status=lambda q: {}, ready=dict, alive=dict), "127.0.0.1", 0
    )
    server.start()
    try:
        (warm_topic, warm_qid), *cold = tier.queues
        warm = f"/v1/topics/{warm_topic}/queues/{warm_qid}/messages?offset=0&maxCount=32"
        assert get(server.url, warm).status == 200  # its window is cached now
        for topic, qid in cold:  # each queue's first message header is read (and kept) once
            assert store.get_min_offset(topic, qid) == 0
        slow[0].latency_s = LATENCY_S
        paths = [
            f"/v1/topics/{topic}/queues/{qid}/messages?offset={offset}&maxCount=1"
            for topic, qid in cold
            for offset in (0, 100, 200, 300)
        ][:READERS]
        assert len(paths) == READERS
        before = rejected("http")
        answers: list[Answer] = []
        start = threading.Barrier(READERS + 1)

        def read(path: str) -> None:
            start.wait()
            answers.append(get(server.url, path))

        threads = [threading.Thread(target=read, args=(p,)) for p in paths]
        for t in threads:
            t.start()
        start.wait()
        time.sleep(LATENCY_S / 2)  # the admitted reads wait for the backend now
        full = store.gate.pending
        hit = get(server.url, f"/v1/topics/{warm_topic}/queues/{warm_qid}/messages?offset=5")
        for t in threads:
            t.join()

        assert full == LIMIT
        assert hit.status == 200 and hit.body["status"] == "FOUND"  # the cache: never refused
        assert hit.seconds < LATENCY_S
        ok = [a for a in answers if a.status == 200]
        busy = [a for a in answers if a.status == 503]
        print(
            f"\n{READERS} cold reads at once, tieredReadMaxPending={LIMIT}: {len(ok)} served in "
            f"{max(a.seconds for a in ok):.2f} s, {len(busy)} refused within "
            f"{max(a.seconds for a in busy):.3f} s"
        )
        assert len(ok) + len(busy) == READERS
        assert len(ok) >= LIMIT and len(busy) >= READERS - 2 * LIMIT
        assert all(a.seconds >= 2 * LATENCY_S for a in ok)
        for a in busy:
            assert a.seconds < LATENCY_S  # at once, not after waiting
            assert a.headers["retry-after"] == "1"
            assert a.body["key"] == "tieredReadMaxPending" and a.body["retry"] is True
            assert "tieredReadMaxPending=2" in str(a.body["error"])
        assert rejected("http") - before == len(busy)
        assert store.gate.pending == 0
        # the refused reads succeed when asked again
        slow[0].latency_s = 0.0
        assert all(get(server.url, p).status == 200 for p in paths)
    finally:
        server.stop()
