"""Reads whose tier answer is missing: segment objects deleted or truncated behind the store's back
(as an expiry under a reader would), over real HTTP -- a 503 naming the object and saying to
retry, or the broker's answer, counted as a fallback, where the broker still holds the offset or
the time -- and offsets by time that the broker answers after asking the tier."""

from __future__ import annotations

import os
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY
from tiered.providers import PosixProvider
from tiered.providers import unwrap

from tiered.broker import message as msgcodec
from tiered.errors import AccessDeniedError
from tiered.file.flat_message_file import FlatMessageFile
from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.testing.http import get
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]
TOPIC, QID = "GenTopic0", 0


def fallbacks(operation: str) -> float:
    name = "rocketmq_tiered_store_get_message_fallback_total"
    return REGISTRY.get_sample_value(name, {"operation": operation, "topic": TOPIC}) or 0


@dataclass
class Served:
    url: str
    tier: SampleTier
    flat: FlatMessageFile
    posix: PosixProvider

    def segment_of(self, queue_offset: int) -> tuple[str, int]:
        """The key of the commitlog segment holding ``queue_offset``, and its position there."""
        physical = int(self.flat.consume_queue.read_units(queue_offset, 1)["offset"][0])
        base = max(s.base for s in self.flat.commitlog.segments if s.base <= physical)
        return self.flat.commitlog.key(base), physical - base

    def store_time(self, queue_offset: int) -> int:
        data = self.tier.expected[(TOPIC, QID, queue_offset)]
        return msgcodec.decode(data).store_timestamp


@pytest.fixture
def served(make_tier: TierFactory) -> Iterator[Served]:
    """The API over a posix tier read at level FORCE (every read asks the tier first), without
    the read-ahead cache (each request reads the backend)."""
    tier = make_tier("posix", readAheadCacheEnable="false")
    flat = tier.sidecar.flat_store.get(TOPIC, QID)
    posix = unwrap(tier.provider)
    assert flat is not None and isinstance(posix, PosixProvider)
    ok = {"metadata": "ok"}
    app = create_app(
        tier.store("FORCE"), status=lambda query: {}, ready=lambda: ok, alive=lambda: ok
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield Served(server.url, tier, flat, posix)
    finally:
        server.stop()


MESSAGES = f"/v1/topics/{TOPIC}/queues/{QID}/messages"
OFFSETS = f"/v1/topics/{TOPIC}/queues/{QID}/offsets"


def test_a_deleted_segment_is_a_503_naming_it_or_the_brokers_copy(served: Served) -> None:
    lmin = served.tier.local_min[(TOPIC, QID)]
    cold = 1  # only in the tier
    key, _ = served.segment_of(cold)
    assert get(served.url, MESSAGES, offset=cold).status == 200
    served.posix.path(key).unlink()  # behind the store's back: its metadata still lists it
    was = fallbacks("get_message")
    r = get(served.url, MESSAGES, offset=cold, maxCount=4)
    assert r.status == 503, r.body
    assert r.json()["objectKey"] == key and r.json()["retry"] is True
    assert "gone from the backend" in r.json()["error"] and "retry the request" in r.json()["error"]
    assert r.headers["retry-after"] == "1"
    assert fallbacks("get_message") == was  # nothing served
    # the broker still has this one: its copy is served instead, counted as a fallback
    warm_key, _ = served.segment_of(lmin)
    if warm_key != key:
        served.posix.path(warm_key).unlink()
    r = get(served.url, MESSAGES, offset=lmin, maxCount=1, format="json")
    assert (r.status, r.json()["status"], r.json()["tier"]) == (200, "FOUND", "local")
    assert [m["queueOffset"] for m in r.json()["messages"]] == [lmin]
    assert fallbacks("get_message") == was + 1


def test_a_truncated_segment_is_a_503_not_a_silent_skip(served: Served) -> None:
    cold = 2
    key, position = served.segment_of(cold)
    assert position > 100
    os.truncate(served.posix.path(key), 100)  # shorter than its record says
    r = get(served.url, MESSAGES, offset=cold, maxCount=4)
    assert r.status == 503, r.body  # was 200 OFFSET_FOUND_NULL, next offset past the segment
    assert r.json()["objectKey"] == key and r.json()["retry"] is True
    assert "holds less than its metadata said" in r.json()["error"]


def test_offset_by_time_when_the_tier_fails(served: Served) -> None:
    lmin = served.tier.local_min[(TOPIC, QID)]
    key, _ = served.segment_of(0)  # every search reads the first message's time
    served.posix.path(key).unlink()
    was = fallbacks("get_offset_by_time")
    # older than anything the broker holds: only the tier knows, so no answer but a retry
    r = get(served.url, OFFSETS, timestamp=served.store_time(3))
    assert r.status == 503 and r.json()["objectKey"] == key, r.body
    assert fallbacks("get_offset_by_time") == was
    # a time the broker holds: its answer is exact, counted as a fallback
    r = get(served.url, OFFSETS, timestamp=served.store_time(lmin + 5))
    assert r.status == 200 and r.json()["offset"] == lmin + 5, r.body
    assert fallbacks("get_offset_by_time") == was + 1


def test_offset_by_time_is_a_fallback_when_the_tier_holds_nothing_then(
    make_tier: TierFactory,
) -> None:
    tier = make_tier("memory")
    store = tier.store()
    lmin = tier.local_min[(TOPIC, QID)]
    first = msgcodec.decode(tier.expected[(TOPIC, QID, 0)]).store_timestamp
    at_lmin = msgcodec.decode(tier.expected[(TOPIC, QID, lmin)]).store_timestamp
    was = fallbacks("get_offset_by_time")
    assert store.get_offset_by_time(TOPIC, QID, first) == 0  # the tier answers
    assert store.get_offset_by_time(TOPIC, QID, at_lmin) == lmin  # the broker's time: not asked
    assert fallbacks("get_offset_by_time") == was
    tier.sidecar.expire(10**15)  # the tier keeps nothing (the queue keeps its position)
    assert store.get_offset_by_time(TOPIC, QID, first) == lmin  # the broker's oldest
    assert fallbacks("get_offset_by_time") == was + 1


def test_a_backend_that_refuses_access_is_a_503_naming_the_object(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permissions cannot be taken from root here, so the posix provider's read is made to fail
    the way a backend that refuses access does (a non-retriable AccessDeniedError)."""
    cold = 1
    key, _ = served.segment_of(cold)

    original = served.posix.read

    def refuse(k: str, position: int, length: int) -> bytes:
        if "/COMMIT_LOG/" not in k:
            return original(k, position, length)
        raise AccessDeniedError(f"read of {k!r} refused: check the backend's permissions", key=k)

    monkeypatch.setattr(served.posix, "read", refuse)
    r = get(served.url, MESSAGES, offset=cold, maxCount=1)
    assert r.status == 503, r.body
    assert r.json()["objectKey"] == key and r.json()["retry"] is False
    assert "check the backend's permissions" in r.json()["error"]
