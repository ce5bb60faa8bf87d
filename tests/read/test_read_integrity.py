"""A damaged tier is reported, never returned: body CRC and header checks on every tiered read."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from tiered.providers import PosixProvider
from tiered.providers import unwrap

from tiered.broker import message as msgcodec
from tiered.errors import IntegrityError
from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.read.fetcher import BULK_UNITS
from tiered.read.fetcher import GetStatus
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]


TOPIC, QID = "GenTopic0", 0


def segment_file(tier: SampleTier, queue_offset: int) -> tuple[Path, int, int, str]:
    """The posix file holding the message at ``queue_offset``: (path, position, size, key)."""
    flat = tier.sidecar.flat_store.get(TOPIC, QID)
    assert flat is not None
    unit = flat.consume_queue.read_units(queue_offset, 1)
    offset, size = int(unit["offset"][0]), int(unit["size"][0])
    base = max(s.base for s in flat.commitlog.segments if s.base <= offset)
    key = flat.commitlog.key(base)
    posix = unwrap(tier.provider)
    assert isinstance(posix, PosixProvider)
    return posix.path(key), offset - base, size, key


def flip(path: Path, position: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, position)
        os.pwrite(fd, bytes([byte[0] ^ 0x20]), position)
    finally:
        os.close(fd)


def damage_body(tier: SampleTier, queue_offset: int) -> tuple[str, int]:
    path, position, size, key = segment_file(tier, queue_offset)
    unit = path.read_bytes()[position : position + size]
    body = msgcodec.decode(unit).body
    flip(path, position + unit.index(body) + len(body) // 2)
    flat = tier.sidecar.flat_store.get(TOPIC, QID)
    assert flat is not None
    return key, int(flat.consume_queue.read_units(queue_offset, 1)["offset"][0])


def failures() -> float:
    labels = {"topic": TOPIC, "queue_id": str(QID)}
    return REGISTRY.get_sample_value("rocketmq_tiered_store_read_crc_failures_total", labels) or 0


def test_a_flipped_body_byte_is_an_error_naming_segment_and_offset(
    make_tier: TierFactory,
) -> None:
    tier = make_tier("posix")
    key, flat_offset = damage_body(tier, 50)
    store = tier.store("FORCE")
    before = failures()
    with pytest.raises(IntegrityError, match="queue offset 50: body CRC mismatch") as info:
        store.get_message(TOPIC, QID, 50, 8)
    assert info.value.key == key and info.value.offset == flat_offset
    assert key in str(info.value) and str(flat_offset) in str(info.value)
    assert failures() > before
    # the messages before it still read (the damaged one ends their run) ...
    r = store.get_message(TOPIC, QID, 40, 32)
    assert [u.queue_offset for u in r.units] == list(range(40, 50))
    assert r.next_begin_offset == 50
    # ... and so do those after it
    after = store.get_message(TOPIC, QID, 51, 8)
    assert [u.queue_offset for u in after.units] == list(range(51, 59))
    no_cache = tier.store("FORCE", read_ahead_cache_enable=False)
    with pytest.raises(IntegrityError):
        no_cache.get_message(TOPIC, QID, 50, 1)


def test_a_damaged_header_is_an_error(make_tier: TierFactory) -> None:
    tier = make_tier("posix")
    path, position, _, _ = segment_file(tier, 60)
    flip(path, position + msgcodec.QUEUE_OFFSET_POSITION + 7)  # the unit's queue offset
    with pytest.raises(IntegrityError, match="queue offset 60: header disagrees"):
        tier.store("FORCE").get_message(TOPIC, QID, 60, 4)


def test_the_broker_copy_is_served_when_it_still_has_the_message(make_tier: TierFactory) -> None:
    """NOT_IN_MEM routes a cold local range to the tier; a damaged tier copy falls back to the
    broker's (logged and counted); FORCE never does."""
    tier = make_tier("posix", deleted_files=0)
    damage_body(tier, 70)
    os.sync()
    for f in (tier.cfg.store_path_root_dir / "commitlog").iterdir():
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    store = tier.store("NOT_IN_MEM")
    assert store.explain(TOPIC, QID, 70)["tier"] == "tiered"
    before = failures()
    r = store.get_message(TOPIC, QID, 70, 1)
    assert (r.status, r.tier) == (GetStatus.FOUND, "local")
    assert r.units[0].data == tier.expected[(TOPIC, QID, 70)]
    assert failures() == before + 1
    with pytest.raises(IntegrityError):
        tier.store("FORCE").get_message(TOPIC, QID, 70, 1)


def test_the_api_answers_502_naming_the_segment(make_tier: TierFactory) -> None:
    tier = make_tier("posix")
    key, _ = damage_body(tier, 50)
    app = create_app(
        tier.store("FORCE"),
        status=lambda query: {},
        ready=lambda: {"x": "ok"},
        alive=lambda: {"x": "ok"},
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        url = f"{server.url}/v1/topics/{TOPIC}/queues/{QID}/messages?offset=50"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url, timeout=30)
        assert info.value.code == 502
        error = json.loads(info.value.read())["error"]
        assert key in error and "queue offset 50: body CRC mismatch" in error
    finally:
        server.stop()


def test_a_prefetch_meeting_damage_leaves_the_report_to_the_reader(
    make_tier: TierFactory,
) -> None:
    """Loaded ahead of the reader, a window that holds a damaged message keeps its good units
    and reports nothing; the reader's own read meets the damage and reports it."""
    tier = make_tier("posix")
    bad = BULK_UNITS + 10  # in the window loaded ahead
    damage_body(tier, bad)
    store = tier.store("FORCE", read_ahead_message_count_threshold=BULK_UNITS)
    before = failures()
    try:
        offset = 0
        while offset < BULK_UNITS:
            offset = store.get_message(TOPIC, QID, offset, 32).next_begin_offset
        deadline = time.monotonic() + 30
        while store.fetcher.prefetching:  # the window after the first one loaded ahead
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert store.fetcher.prefetched == 1
        assert failures() == before  # the prefetch kept the good units and reported nothing
        assert store.get_message(TOPIC, QID, offset, 32).next_begin_offset == bad
        with pytest.raises(IntegrityError, match=f"queue offset {bad}"):
            store.get_message(TOPIC, QID, bad, 32)
        assert failures() > before
    finally:
        store.close()
