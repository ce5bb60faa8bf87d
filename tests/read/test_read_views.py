"""Reads answered from views of the S3 provider's read-ahead windows (no copy of their bytes):
byte for byte what the tier holds, over the store API and over HTTP raw, and still checked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tiered.http.app import create_app
from tiered.http.app import raw_units
from tiered.http.server import HttpServer
from tiered.read.fetcher import GetStatus
from tiered.testing.http import get
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import rolling_spec

TierFactory = Callable[..., SampleTier]
pytestmark = pytest.mark.s3


def broker_units(tier: SampleTier, qid: int, count: int) -> list[bytes]:
    """The broker's units of queue ``qid``, the physical offset (bytes 28..35) left out (the
    tier's copy holds the flat one)."""
    units = [tier.expected[("GenTopic0", qid, q)] for q in range(count)]
    return [u[:28] + u[36:] for u in units]


def test_a_raw_catch_up_over_s3_is_sent_from_the_read_ahead_windows(
    make_tier: TierFactory, s3_keys: dict[str, str]
) -> None:
    spec = rolling_spec(seed=8, topics=1, queues=2, messages=8000, max_body=300)
    tier = make_tier(
        "s3",
        spec=spec,
        deleted_files=0,
        tieredStorageLevel="FORCE",
        tieredStoreCommitLogMaxSize=1 << 20,  # sealed segments: a read-ahead window each
        tieredStoreGroupCommitSize=1 << 20,
        tieredStoreGroupCommitCount=8000,
        objectStoreGroupCommitSize=1 << 20,
        **s3_keys,
    )
    store = tier.store(readAheadMessageCountThreshold=1000)
    first = store.get_message("GenTopic0", 0, 0, 64, max_bytes=16 << 20)
    ahead = store.get_message("GenTopic0", 0, 64, 2000, max_bytes=16 << 20)  # a bulk read
    assert ahead.status is GetStatus.FOUND and first.count == 64
    assert any(isinstance(r.data, memoryview) and r.data.readonly for r in ahead.runs)
    app = create_app(
        store, status=lambda query: {}, ready=dict, alive=dict, max_response_bytes=16 << 20
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        path = "/v1/topics/GenTopic0/queues/1/messages"
        got: list[bytes] = []
        end = store.get_max_offset("GenTopic0", 1)
        while len(got) < end:
            r = get(server.url, path, offset=len(got), maxCount=65536, format="raw")
            assert r.status == 200 and r.headers["x-tier"] == "tiered", r.body[:200]
            units = raw_units(r.body)
            assert units and r.headers["x-next-begin-offset"] == str(len(got) + len(units))
            got += units
        assert [u[:28] + u[36:] for u in got] == broker_units(tier, 1, end)
    finally:
        server.stop()
    again = store.get_message("GenTopic0", 0, 0, 8000, max_bytes=16 << 20)
    expected = broker_units(tier, 0, again.count)
    assert [u.data[:28] + u.data[36:] for u in again.units] == expected


def test_a_queue_read_to_its_end_does_not_keep_its_last_window_lent(
    make_tier: TierFactory, s3_keys: dict[str, str]
) -> None:
    """The cache drops a queue's last window once a read took it to the queue's end when it is
    a view of the provider's read-ahead (nothing passes it, so it would keep the provider's
    whole window lent until it expired); reading it again reads the same units."""
    spec = rolling_spec(seed=9, topics=1, queues=1, messages=3000, max_body=300)
    tier = make_tier("s3", spec=spec, deleted_files=0, tieredStorageLevel="FORCE", **s3_keys)
    store = tier.store(readAheadMessageCountThreshold=1000)
    cache = store.cache
    assert cache is not None
    end = store.get_max_offset("GenTopic0", 0)
    offset, views = 0, 0
    while offset < end:
        got = store.get_message("GenTopic0", 0, offset, 1000, max_bytes=16 << 20)
        assert got.status is GetStatus.FOUND
        views += any(isinstance(r.data, memoryview) for r in got.runs)
        offset = got.next_begin_offset
    assert views  # windows were views of the provider's read-ahead
    assert not len(cache.run("GenTopic0", 0, end - 1, 1))  # the last window is not kept
    again = store.get_message("GenTopic0", 0, end - 5, 1000, max_bytes=16 << 20)
    assert [u.data[:28] + u.data[36:] for u in again.units] == broker_units(tier, 0, end)[-5:]
