"""No label from a stranger (issue #30): names that requests bring never grow ``/metrics``.

10,000 requests for made-up topic and group names, over HTTP and over the replay port, must add no
series to the registry (the one ``_other`` series of each family is made by the warm-up), no
children to :func:`tiered.metrics.child`'s memo, and no memory; a known topic keeps its own
label. A name that does not exist is logged at most once a minute, never once per request.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import string
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from cachetools import TTLCache
from prometheus_client import REGISTRY

from tiered import metrics
from tiered.http.app import create_app
from tiered.http.key_routes import keys_router
from tiered.http.server import HttpServer
from tiered.metrics import OTHER_LABEL
from tiered.metrics.labels import MAX_LOGGED_NAMES
from tiered.metrics.labels import UNKNOWN_TOPICS
from tiered.metrics.labels import UNKNOWN_WINDOW_S
from tiered.metrics.labels import KnownTopics
from tiered.metrics.labels import UnknownNames
from tiered.read.message_store import TieredMessageStore
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.frame import Command
from tiered.remoting.groups import Clients
from tiered.remoting.groups import ReplayOffsets
from tiered.remoting.handlers import Replay
from tiered.remoting.naming import Naming
from tiered.remoting.server import RemotingServer
from tiered.testing.sample_tier import SampleTier

N = 10_000
TOPIC = "GenTopic0"
Series = set[tuple[str, tuple[tuple[str, str], ...]]]


def series() -> Series:
    """Every sample of the registry, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in REGISTRY.collect()
        for s in family.samples
    }


def topic_labels(found: Series, family: str) -> set[str]:
    return {dict(labels)["topic"] for name, labels in found if name.startswith(family)}


def stranger(rng: random.Random) -> str:
    """A valid topic (or group) name nobody has: ``Rand`` and 16 random letters and digits."""
    return "Rand" + "".join(rng.choices(string.ascii_letters + string.digits, k=16))


def assert_no_new_series(before: Series, children: int) -> None:
    grown = sorted(series() - before)
    assert not grown, f"{len(grown)} new series, e.g. {grown[:3]}"
    assert len(metrics._children) == children


# --- HTTP ---------------------------------------------------------------------------------------


@pytest.fixture
def http_port(module_tier: SampleTier) -> Iterator[int]:
    """The HTTP API (with the key route) over ``module_tier`` on a free port."""
    store = module_tier.store()
    app = create_app(
        store,
        status=lambda query: {},
        ready=dict,
        alive=dict,
        extra_routers=[keys_router(lambda: module_tier.sidecar.index)],
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    yield server.port
    server.stop()


def http_paths(topic: str) -> list[str]:
    """A read, an offset-by-time and a key query of ``topic``."""
    base = f"/v1/topics/{topic}"
    return [
        f"{base}/queues/0/messages?offset=0&maxCount=2",
        f"{base}/queues/1/offsets?timestamp=0",
        f"{base}/keys/some-key",
    ]


@pytest.mark.slow
def test_http_requests_for_unknown_topics_add_no_series(http_port: int) -> None:
    rng = random.Random(6)
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)

    def get(path: str) -> int:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status

    try:
        for topic in (TOPIC, stranger(rng)):  # every kind of request once: the fixed series
            assert [get(p) for p in http_paths(topic)][:2] == [200, 200]
        before, children = series(), len(metrics._children)
        assert {TOPIC, OTHER_LABEL} <= topic_labels(before, "rocketmq_tiered_store_api_latency")
        statuses = {get(http_paths(stranger(rng))[i % 3]) for i in range(N)}
    finally:
        conn.close()
    assert statuses <= {200, 404, 503}
    assert_no_new_series(before, children)


# --- the replay port ----------------------------------------------------------------------------


def replay(tier: SampleTier, tmp_path: Path, store: TieredMessageStore) -> Replay:
    """The replay endpoint's handlers over ``store``; a client unheard of for 0 s is dropped, so
    a heartbeat's group is forgotten at the next one (the default keeps it 120 s)."""
    offsets = ReplayOffsets(tmp_path / "offsets")
    offsets.load()
    return Replay(
        store.cfg,
        store,
        Naming(store.cfg, store, lambda: "127.0.0.1:10911"),
        index=lambda: tier.sidecar.index,
        offsets=offsets,
        clients=Clients(expiry_s=0.0),
    )


def replay_requests(rng: random.Random) -> Iterator[tuple[int, bytes, dict[str, object]]]:
    """Pulls, offset queries, route lookups, heartbeats, time searches and key queries, each of
    a new topic and group."""
    i = 0
    while True:
        topic, group = stranger(rng), stranger(rng)
        queue = {"topic": topic, "queueId": 0}
        beat = {
            "clientID": f"client-{i}",
            "consumerDataSet": [
                {"groupName": group, "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}
            ],
        }
        kinds: list[tuple[int, bytes, dict[str, object]]] = [
            (Req.PULL_MESSAGE, b"", {**queue, "consumerGroup": group, "queueOffset": 0,
                                     "sysFlag": 0, "maxMsgNums": 2}),
            (Req.QUERY_CONSUMER_OFFSET, b"", {**queue, "consumerGroup": group}),
            (Req.GET_ROUTEINFO_BY_TOPIC, b"", {"topic": topic}),
            (Req.HEART_BEAT, json.dumps(beat).encode(), {}),
            (Req.SEARCH_OFFSET_BY_TIMESTAMP, b"", {**queue, "timestamp": 0}),
            (Req.QUERY_MESSAGE, b"", {"topic": topic, "key": "some-key", "maxNum": 1}),
        ]  # fmt: skip
        yield kinds[i % len(kinds)]
        i += 1


def test_replay_requests_for_unknown_names_add_no_series(
    module_tier: SampleTier, tmp_path: Path
) -> None:
    rng = random.Random(7)
    store = module_tier.store()
    server = RemotingServer(replay(module_tier, tmp_path, store), "127.0.0.1", 0)
    server.start()
    try:
        with RemotingClient("127.0.0.1", server.port) as client:
            known = client.call(Req.PULL_MESSAGE, topic=TOPIC, queueId=0, queueOffset=0,
                                consumerGroup="G", sysFlag=0, maxMsgNums=2)  # fmt: skip
            assert known.code == 0, known.remark
            warm_up = replay_requests(rng)
            for _ in range(6):  # every kind once
                code, body, fields = next(warm_up)
                client.call(code, body, **fields)
            before, children = series(), len(metrics._children)
            results = set()
            for _, (code, body, fields) in zip(range(N), replay_requests(rng), strict=False):
                results.add((code, client.call(code, body, **fields).code))
    finally:
        server.stop()
    assert len(results) >= 6
    assert_no_new_series(before, children)
    assert {TOPIC, OTHER_LABEL} <= topic_labels(before, "rocketmq_tiered_store_api_latency")
    assert len(store.local._queues) <= 4  # nothing remembered of the strangers' queues


def test_memory_stays_flat_under_unknown_names(
    module_tier: SampleTier, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Allocations still held by the sidecar's code, prometheus_client and cachetools after
    10,000 more requests (replay handlers and HTTP-path store calls) for new names: none to
    speak of (before issue #30 every name left a metric child, a group and a queue behind).

    The process-wide log limiter of unknown names starts empty and its clock stands still:
    names that earlier tests left in it (allocated before tracing began) would otherwise expire
    a minute later, during the second burst, and their traced replacements look like growth."""
    frozen = lambda: 0.0  # noqa: E731
    monkeypatch.setattr(UNKNOWN_TOPICS, "clock", frozen)
    monkeypatch.setattr(
        UNKNOWN_TOPICS, "_logged", TTLCache(MAX_LOGGED_NAMES, UNKNOWN_WINDOW_S, timer=frozen)
    )
    rng = random.Random(8)
    store = module_tier.store()
    handlers = replay(module_tier, tmp_path, store)

    def burst(count: int) -> None:
        for _, (code, body, fields) in zip(range(count), replay_requests(rng), strict=False):
            request = Command(code, ext_fields={k: str(v) for k, v in fields.items()}, body=body)
            handlers.handle(request, may_suspend=False)
            store.get_message(stranger(rng), 1, 0, 1)

    watched = [
        tracemalloc.Filter(True, f"*{part}*")
        for part in ("/tiered/", "/providers/", "/prometheus_client/", "/cachetools/")
    ]
    tracemalloc.start()
    try:
        burst(2000)  # the rate limiter of unknown names fills up here
        first = tracemalloc.take_snapshot().filter_traces(watched)
        burst(N)
        second = tracemalloc.take_snapshot().filter_traces(watched)
    finally:
        tracemalloc.stop()
    grown = second.compare_to(first, "filename")
    total = sum(stat.size_diff for stat in grown)
    assert total < 64 << 10, [str(s) for s in grown[:5]]
    assert handlers.clients.remembered() <= 1


# --- known topics and the log of unknown names -----------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_unknown_names_are_logged_once_a_minute_each(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    names = UnknownNames("topic", max_names=50, clock=clock)
    caplog.set_level(logging.INFO, "tiered.metrics.labels")
    for _ in range(1000):
        names.note("RandOne")
    assert [r.getMessage().count("'RandOne'") for r in caplog.records] == [1]
    clock.now += 59
    names.note("RandOne")
    assert len(caplog.records) == 1
    clock.now += 2
    names.note("RandOne")
    assert len(caplog.records) == 2  # a minute later: once more
    caplog.clear()
    for i in range(10_000):
        names.note(f"Rand{i}")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 50  # 49 names + one summary line; memory: 50 names
    assert messages[-1].startswith("1 more request(s) named topics") and len(names) == 50
    clock.now += 61  # the next period: room for names again, the rest summed up once
    caplog.clear()
    for i in range(10_000, 10_100):
        names.note(f"Rand{i}")
    assert len(caplog.records) == 51 and "9951 more" in caplog.records[-1].getMessage()


def test_store_reads_of_an_unknown_topic_log_it_once(
    module_tier: SampleTier, caplog: pytest.LogCaptureFixture
) -> None:
    store = module_tier.store()
    store.topics.unknown = UnknownNames("topic")
    caplog.set_level(logging.INFO, "tiered.metrics.labels")
    for offset in range(300):
        store.get_message("RandNoSuchTopic", 0, offset, 1)
        store.get_offset_by_time("RandNoSuchTopic", 1, offset)
        store.get_message(TOPIC, 0, offset, 1)
    named = [r for r in caplog.records if "RandNoSuchTopic" in r.getMessage()]
    assert len(named) == 1 and "_other" in named[0].getMessage()
    assert not [r for r in caplog.records if TOPIC in r.getMessage()]


def test_known_topics_are_the_tiers_and_the_brokers_listed_once_per_period(
    tmp_path: Path,
) -> None:
    clock = Clock()
    tier_topics = ["TierTopic"]
    (tmp_path / "BrokerTopic" / "0").mkdir(parents=True)
    (tmp_path / "not-a-topic").write_text("")
    known = KnownTopics(lambda: list(tier_topics), tmp_path, ttl_s=3.0, clock=clock)
    known.unknown = UnknownNames("topic", clock=clock)
    assert [known.label(t) for t in ("TierTopic", "BrokerTopic", "not-a-topic", "Rand")] == [
        "TierTopic",
        "BrokerTopic",
        OTHER_LABEL,
        OTHER_LABEL,
    ]
    for i in range(1000):
        known.label(f"Rand{i}")
    assert known.listings == 1  # a flood of unknown names: no directory read each
    tier_topics.append("NewTopic")
    (tmp_path / "NewBrokerTopic").mkdir()
    assert known.label("NewTopic") == OTHER_LABEL  # until the listing is renewed
    clock.now += 3
    assert known.label("NewTopic") == "NewTopic" and known.label("NewBrokerTopic") != OTHER_LABEL
    assert known.listings == 2


def test_a_group_without_live_clients_is_forgotten() -> None:
    clients = Clients(expiry_s=10.0)
    for i in range(100):
        beat = {"clientID": f"c{i}", "consumerDataSet": [{"groupName": f"G{i}"}]}
        clients.heartbeat(beat, now=float(i))
    assert clients.remembered() == 20  # a sweep per 10 s period: the groups of the last two remain
    assert clients.clients("G99", now=99.0) == ["c99"]


def test_reads_of_unknown_queues_leave_nothing_behind_at_every_level(
    module_tier: SampleTier,
) -> None:
    for level in ("NOT_IN_DISK", "NOT_IN_MEM", "FORCE"):
        store = module_tier.store(level)
        rng = random.Random(9)
        for _ in range(200):
            topic = stranger(rng)
            store.get_message(topic, 0, 5, 1)
            store.get_offset_by_time(topic, 0, 0)
            store.offsets(topic, 0)
        local = store.local
        assert (len(local._queues), len(local._min_memo), len(local._max_hint)) == (0, 0, 0)
