"""The HTTP API on a real uvicorn server (127.0.0.1, port 0) over a real offloaded tier."""

from __future__ import annotations

import base64
import http.client
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest
from fastapi import APIRouter

from tiered import metrics
from tiered.broker import message as msgcodec
from tiered.core.status_report import collect_status
from tiered.http.app import create_app
from tiered.http.app import message_json
from tiered.http.app import raw_units
from tiered.http.server import HttpServer
from tiered.read.message_store import TieredMessageStore
from tiered.read.tag_filter import TagFilter
from tiered.testing.http import get
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import rolling_spec

TierFactory = Callable[..., SampleTier]


@dataclass
class Api:
    url: str
    tier: SampleTier
    store: TieredMessageStore
    checks: dict[str, dict[str, str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def api(module_tier: SampleTier) -> Iterator[Api]:
    store = module_tier.store()
    checks = {"alive": {"process": "ok", "scheduler": "ok"}, "ready": {"metadata": "ok"}}
    keys = APIRouter()

    @keys.get("/v1/topics/{topic}/keys/{key}")
    def by_key(topic: str, key: str) -> dict[str, str]:
        return {"topic": topic, "key": key}

    app = create_app(
        store,
        status=lambda query: collect_status(module_tier.cfg, query).to_json(),
        ready=lambda: dict(checks["ready"]),
        alive=lambda: dict(checks["alive"]),
        max_response_bytes=64 << 10,
        extra_routers=[keys],
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    assert server.port > 0
    yield Api(server.url, module_tier, store, checks)
    server.stop()


def test_messages_as_json(api: Api) -> None:
    r = get(api.url, "/v1/topics/GenTopic0/queues/0/messages", offset=5, maxCount=10)
    assert r.status == 200
    doc = r.json()
    assert (doc["status"], doc["tier"], doc["nextBeginOffset"]) == ("FOUND", "tiered", 15)
    assert r.headers["x-status"] == "FOUND" and r.headers["x-next-begin-offset"] == "15"
    assert [m["queueOffset"] for m in doc["messages"]] == list(range(5, 15))
    for m in doc["messages"]:
        want = msgcodec.decode(api.tier.expected[("GenTopic0", 0, m["queueOffset"])])
        assert base64.b64decode(m["bodyBase64"]) == want.decompressed_body()
        assert m["properties"] == want.properties
        assert m["msgId"] == want.properties["UNIQ_KEY"] and m["tier"] == "tiered"
        assert m["crcOk"] is True
    # exactly what the store returns, through THE message JSON function
    direct = api.store.get_message("GenTopic0", 0, 5, 10)
    assert doc["messages"] == [message_json(u.data, "tiered") for u in direct.units]


def test_messages_raw_and_local(api: Api) -> None:
    lmin = api.tier.local_min[("GenTopic1", 1)]
    r = get(
        api.url, "/v1/topics/GenTopic1/queues/1/messages", offset=lmin, maxCount=20, format="raw"
    )
    assert r.status == 200 and r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-tier"] == "local"
    units = raw_units(r.body)
    assert units == [api.tier.expected[("GenTopic1", 1, q)] for q in range(lmin, lmin + 20)]
    path = "/v1/topics/GenTopic1/queues/1/messages"
    most = get(api.url, path, offset=lmin, maxCount=65536, format="raw")  # the byte cap binds
    assert most.headers["x-tier"] == "local"
    many = raw_units(most.body)
    assert len(many) > 20 and sum(map(len, many[:-1])) <= 64 << 10
    assert many == [api.tier.expected[("GenTopic1", 1, q)] for q in range(lmin, lmin + len(many))]


def test_raw_from_the_tier_is_the_units_back_to_back_in_bulk(api: Api) -> None:
    path = "/v1/topics/GenTopic0/queues/0/messages"
    r = get(api.url, path, offset=5, maxCount=30, format="raw")
    assert r.headers["x-tier"] == "tiered" and r.headers["x-status"] == "FOUND"
    direct = api.store.get_message("GenTopic0", 0, 5, 30)
    assert raw_units(r.body) == [u.data for u in direct.units]  # flat offsets, as the tier has
    assert r.headers["x-next-begin-offset"] == str(direct.next_begin_offset)
    big = get(api.url, path, offset=0, maxCount=1024, format="raw")
    sizes = [len(u) for u in raw_units(big.body)]
    assert sum(sizes[:-1]) <= 64 << 10 < sum(sizes) + 1024 * 600  # capped by bytes, as JSON
    assert big.headers["x-next-begin-offset"] == str(len(sizes))
    over = get(api.url, path, offset=10**9, format="raw")
    assert over.headers["x-status"] == "OFFSET_OVERFLOW_BADLY" and over.body == b""


def test_a_raw_catch_up_takes_a_whole_window_per_request(make_tier: TierFactory) -> None:
    """Raw answers carry up to 65536 messages (a catch-up asks for more than a read-ahead
    window at a time, not 1024, and its windows are as large); JSON ones at most 1024, a larger
    maxCount taken as 1024 (the answer says where to go on, as when the byte cap cuts it
    short)."""
    spec = rolling_spec(seed=5, topics=1, queues=1, messages=6000, max_body=64)
    tier = make_tier("posix", spec=spec, deleted_files=0, tieredStorageLevel="FORCE")
    store = tier.store()
    app = create_app(
        store, status=lambda query: {}, ready=dict, alive=dict, max_response_bytes=16 << 20
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        path = "/v1/topics/GenTopic0/queues/0/messages"
        r = get(server.url, path, offset=0, maxCount=5000, format="raw")
        assert r.status == 200 and r.headers["x-tier"] == "tiered", r.body[:200]
        units = raw_units(r.body)
        assert 1024 < len(units) <= 5000  # a read-ahead window or more in one request
        broker = [tier.expected[("GenTopic0", 0, q)] for q in range(len(units) + 1)]
        # the broker's units with the physical offset (bytes 28..35) rewritten to the flat one
        assert [u[:28] + u[36:] for u in units] == [u[:28] + u[36:] for u in broker[:-1]]
        assert r.headers["x-next-begin-offset"] == str(len(units))
        rest = get(server.url, path, offset=len(units), maxCount=65536, format="raw")
        assert raw_units(rest.body)[0][36:] == broker[-1][36:]
        tagged = get(server.url, path, offset=0, maxCount=65536, format="raw", tags="TagA")
        direct = store.get_message(
            "GenTopic0", 0, 0, 65536, TagFilter.parse("TagA"), max_bytes=16 << 20
        )
        assert raw_units(tagged.body) == [u.data for u in direct.units] != []
        assert all(msgcodec.decode(u).tags == "TagA" for u in raw_units(tagged.body))
        too_many = get(server.url, path, offset=0, maxCount=65537, format="raw")
        assert too_many.status == 400 and too_many.json()["parameter"] == "maxCount"
        doc = get(server.url, path, offset=0, maxCount=5000).json()  # JSON: 1024 at most
        assert len(doc["messages"]) == 1024 and doc["nextBeginOffset"] == 1024
    finally:
        server.stop()


def test_connections_past_the_limit_are_closed_and_the_open_ones_go_on(api: Api) -> None:
    """``tieredHttpMaxConnections``: a connection past the limit is closed at once (and
    counted); the connections being served keep being answered, and a new one is taken once one
    has closed."""
    app = create_app(api.store, status=lambda query: {}, ready=dict, alive=dict)
    server = HttpServer(app, "127.0.0.1", 0, max_connections=2)
    server.start()
    rejected = metrics.HTTP_REJECTED.labels("too_many_connections")
    before = rejected._value.get()

    def ask(conn: http.client.HTTPConnection) -> int:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        return response.status

    try:
        first, second, third = (
            http.client.HTTPConnection("127.0.0.1", server.port, timeout=10) for _ in range(3)
        )
        assert ask(first) == 200 and ask(second) == 200  # both kept open (keep-alive)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            ask(third)
        assert rejected._value.get() == before + 1
        assert ask(first) == 200 and ask(second) == 200  # the open ones go on
        first.close()
        deadline = time.monotonic() + 5
        while True:  # the server sees the close a moment later
            fourth = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            try:
                assert ask(fourth) == 200
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                fourth.close()
                assert time.monotonic() < deadline, "no connection taken after one closed"
                time.sleep(0.05)
        fourth.close()
        second.close()
        third.close()
    finally:
        server.stop()


def test_tags_and_the_response_cap(api: Api) -> None:
    r = get(api.url, "/v1/topics/GenTopic0/queues/1/messages", offset=0, maxCount=50, tags="TagB")
    doc = r.json()
    assert doc["messages"] and all(m["tags"] == "TagB" for m in doc["messages"])
    big = get(api.url, "/v1/topics/GenTopic0/queues/1/messages", offset=0, maxCount=1024).json()
    sizes = [m["totalSize"] for m in big["messages"]]
    assert sum(sizes[:-1]) <= 64 << 10 < sum(sizes) + 1024 * 600  # capped by bytes
    assert big["nextBeginOffset"] == big["messages"][-1]["queueOffset"] + 1


def test_offsets_time_and_explain(api: Api) -> None:
    doc = get(api.url, "/v1/topics/GenTopic0/queues/0/offsets").json()
    lmin = api.tier.local_min[("GenTopic0", 0)]
    assert (doc["min"], doc["localMin"], doc["tieredMin"]) == (0, lmin, 0)
    assert doc["max"] == doc["commit"] == doc["localMax"]
    first = msgcodec.decode(api.tier.expected[("GenTopic0", 0, 3)]).store_timestamp
    timed = get(api.url, "/v1/topics/GenTopic0/queues/0/offsets", timestamp=first, boundary="UPPER")
    assert timed.json()["offset"] == 3 and timed.json()["boundary"] == "UPPER"
    why = get(api.url, "/v1/topics/GenTopic0/queues/0/explain", offset=1).json()
    assert why["tier"] == "tiered" and why["level"] == "NOT_IN_DISK"
    assert "no longer on the broker's disk" in why["reason"]
    assert why["flatCommitOffset"] == doc["commit"] and why["localMinOffset"] == lmin


def test_status_metrics_health_and_extra_routes(api: Api) -> None:
    status = get(api.url, "/v1/status").json()
    assert status["totals"]["queues"] == 4 and status["totals"]["lagMessages"] == 0
    assert status["page"] == {"offset": 0, "next": None}
    page = get(api.url, "/v1/status", limit=3).json()
    assert len(page["queues"]) == 3 and page["page"] == {"offset": 0, "next": 3}
    rest = get(api.url, "/v1/status", limit=3, offset=3).json()
    assert [q["queueId"] for q in rest["queues"]] == [status["queues"][3]["queueId"]]
    assert rest["page"]["next"] is None and rest["totals"]["listed"] == 1
    assert rest["totals"]["queues"] == page["totals"]["queues"] == 4
    assert page["topics"] == status["topics"] and rest["topics"] == []  # (the first page's)
    assert get(api.url, "/v1/status", limit=0).status == 400
    get(api.url, "/v1/topics/GenTopic0/queues/0/messages", offset=0, maxCount=2)
    text = get(api.url, "/metrics").body.decode()
    for name in (
        "rocketmq_tiered_store_api_latency_bucket",
        "rocketmq_tiered_store_messages_out_total",
        "rocketmq_tiered_store_read_ahead_cache_messages",
        "rocketmq_tiered_store_read_ahead_cache_hit_total",
        "rocketmq_tiered_store_provider_requests_total",
    ):
        assert name in text
    assert get(api.url, "/healthz").status == 200
    assert get(api.url, "/readyz").json() == {
        "ok": True,
        "failed": [],
        "checks": {"metadata": "ok"},
    }
    api.checks["ready"] = {"metadata": "ok", "backend": "unreachable: connection refused"}
    down = get(api.url, "/readyz")
    assert down.status == 503 and down.json()["failed"] == ["backend"]
    api.checks["ready"] = {"metadata": "ok"}
    assert get(api.url, "/v1/topics/T/keys/k1").json() == {"topic": "T", "key": "k1"}
    schema = get(api.url, "/openapi.json").json()
    assert "/v1/topics/{topic}/queues/{queueId}/messages" in schema["paths"]


@pytest.mark.parametrize(
    ("path", "params", "parameter"),
    [
        ("/v1/topics/GenTopic0/queues/0/messages", {"offset": -1}, "offset"),
        ("/v1/topics/GenTopic0/queues/0/messages", {}, "offset"),
        ("/v1/topics/GenTopic0/queues/0/messages", {"offset": "x"}, "offset"),
        ("/v1/topics/GenTopic0/queues/0/messages", {"offset": 0, "maxCount": 0}, "maxCount"),
        ("/v1/topics/GenTopic0/queues/0/messages", {"offset": 0, "maxCount": 65537}, "maxCount"),
        ("/v1/topics/GenTopic0/queues/0/messages", {"offset": 0, "tags": "A || || B"}, "tags"),
        ("/v1/topics/GenTopic0/queues/0/messages", {"offset": 0, "format": "xml"}, "format"),
        ("/v1/topics/bad.topic/queues/0/messages", {"offset": 0}, "topic"),
        ("/v1/topics/GenTopic0/queues/x/messages", {"offset": 0}, "queueId"),
        ("/v1/topics/GenTopic0/queues/70000/offsets", {}, "queueId"),
        ("/v1/topics/GenTopic0/queues/0/offsets", {"timestamp": -5}, "timestamp"),
        ("/v1/topics/GenTopic0/queues/0/offsets", {"timestamp": 1, "boundary": "MID"}, "boundary"),
        ("/v1/topics/GenTopic0/queues/0/explain", {}, "offset"),
    ],
)
def test_bad_requests_are_400_naming_the_parameter(
    api: Api, path: str, params: dict[str, Any], parameter: str
) -> None:
    r = get(api.url, path, **params)
    assert r.status == 400, r.body
    assert r.json()["parameter"] == parameter
    assert parameter in r.json()["error"]


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/v1/topics/GenTopic0/queues/0/offsets?timestamp=1&timestamp=2", "timestamp"),
        ("/v1/topics/GenTopic0/queues/0/messages?offset=0&maxCount=2&offset=5", "offset"),
        ("/v1/topics/GenTopic0/queues/0/messages?offset=0&tags=A&tags=B", "tags"),
        ("/v1/topics/T/keys/k1?x=1&x=1", "x"),  # extra routers too, and equal values too
    ],
)
def test_a_parameter_given_twice_is_a_400_naming_it(api: Api, path: str, parameter: str) -> None:
    r = get(api.url, path)
    assert r.status == 400, r.body
    assert r.json()["parameter"] == parameter
    assert f"{parameter}: given more than once" in r.json()["error"]


def test_unknown_queues_and_offsets_are_statuses_not_errors(api: Api) -> None:
    doc = get(api.url, "/v1/topics/NoSuchTopic/queues/0/messages", offset=0).json()
    assert doc["status"] == "NO_MATCHED_LOGIC_QUEUE" and doc["messages"] == []
    far = get(api.url, "/v1/topics/GenTopic0/queues/0/messages", offset=2**62).json()
    assert far["status"] == "OFFSET_OVERFLOW_BADLY"
    assert get(api.url, "/v1/topics/NoSuchTopic/queues/0/offsets").json()["min"] == -1
    assert get(api.url, "/nowhere").status == 404
    retry = get(api.url, "/v1/topics/%25RETRY%25group/queues/0/offsets")  # '%' sent as %25
    assert retry.status == 200 and retry.json()["min"] == -1
