"""Every offloaded message reads back identical, from each backend, under each storage level.

The tier is a real offload of a generated store (``make_tier``); the broker then deletes its two
oldest commitlog files, so the oldest offsets live only in the tier. What each message must be
was read from the broker's files before that. A message served by the tier equals the broker's
unit except bytes 28..35 (its offset in the flat commitlog); one served locally equals it exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from tiered.providers import build_provider

from tiered.broker import message as msgcodec
from tiered.config import StorageLevel
from tiered.core.sidecar import Sidecar
from tiered.errors import InvalidRequestError
from tiered.read.fetcher import GetStatus
from tiered.read.fetcher import Unit
from tiered.read.message_store import TieredMessageStore
from tiered.read.tag_filter import TagFilter
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import SidecarCase

TierFactory = Callable[..., SampleTier]


@dataclasses.dataclass(frozen=True)
class Got:
    unit: Unit
    tier: str
    batch_start: int


def scan(
    store: TieredMessageStore,
    topic: str,
    qid: int,
    end: int,
    before: Callable[[], None] | None = None,
    **kw: object,
) -> list[Got]:
    """Read a queue from offset 0 to ``end`` the way a consumer does (following
    ``nextBeginOffset``); ``before`` runs ahead of each request."""
    out: list[Got] = []
    offset = 0
    while offset < end:
        if before is not None:
            before()
        r = store.get_message(topic, qid, offset, 32, **kw)  # type: ignore[arg-type]
        assert r.next_begin_offset > offset, (r.status, offset)
        if r.status is GetStatus.OFFSET_TOO_SMALL:
            offset = r.next_begin_offset
            continue
        assert r.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE), (r.status, offset)
        out.extend(Got(u, r.tier, offset) for u in r.units)
        offset = r.next_begin_offset
    return out


def assert_same(got: Got, want: bytes) -> None:
    data = got.unit.data
    if got.tier == "tiered":
        assert data[:28] + data[36:] == want[:28] + want[36:]
    else:
        assert data == want
    m, w = msgcodec.decode(data), msgcodec.decode(want)
    assert m.crc_ok
    assert (m.decompressed_body(), m.properties) == (w.decompressed_body(), w.properties)


def drop_page_cache(store: Path) -> None:
    """Write back and drop the cached pages of every commitlog file (as after a long idle)."""
    os.sync()
    for f in (store / "commitlog").iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def touch_pages(store: Path) -> None:
    for f in (store / "commitlog").iterdir():
        with f.open("rb") as fh:
            while fh.read(1 << 20):
                pass


def check_level(tier: SampleTier, level: StorageLevel, resident: bool) -> int:
    """Scan every queue under ``level``; returns the messages served by the tier."""
    store = tier.store(level)
    root = tier.cfg.store_path_root_dir
    touch = functools.partial(touch_pages, root)
    from_tier = 0
    for topic, qid in tier.queues:
        lmin = tier.local_min[(topic, qid)]
        end = store.get_max_offset(topic, qid)
        # the tier still has what the broker lost (invisible under DISABLE)
        assert store.get_min_offset(topic, qid) == (lmin if level is StorageLevel.DISABLE else 0)
        assert lmin > 0
        # under memory pressure the kernel may evict a page between one touch and the read,
        # so a resident scan touches the commitlog again just before each request
        got = scan(store, topic, qid, end, before=touch if resident else None)
        first = lmin if level is StorageLevel.DISABLE else 0
        assert [g.unit.queue_offset for g in got] == list(range(first, end))
        for g in got:
            assert_same(g, tier.expected[(topic, qid, g.unit.queue_offset)])
            gone = g.batch_start < lmin
            if level is StorageLevel.FORCE or (gone and level is not StorageLevel.DISABLE):
                assert g.tier == "tiered", (level, g)
            elif level is StorageLevel.NOT_IN_MEM:
                assert g.tier == ("local" if resident else "tiered"), (level, g)
            else:
                assert g.tier == "local", (level, g)
        from_tier += sum(g.tier == "tiered" for g in got)
    return from_tier


@pytest.mark.parametrize("backend", ["posix", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def test_every_message_reads_back_identical_under_each_level(
    backend: str, make_tier: TierFactory, request: pytest.FixtureRequest
) -> None:
    keys = request.getfixturevalue("s3_keys") if backend == "s3" else {}
    tier = make_tier(backend, **keys)
    store_root = tier.cfg.store_path_root_dir
    total = len(tier.expected)
    drop_page_cache(store_root)
    assert check_level(tier, StorageLevel.FORCE, resident=False) == total
    gone = sum(tier.local_min.values())
    assert gone <= check_level(tier, StorageLevel.NOT_IN_DISK, resident=False) < total
    assert check_level(tier, StorageLevel.DISABLE, resident=False) == 0
    drop_page_cache(store_root)  # the local reads above cached the pages again
    assert check_level(tier, StorageLevel.NOT_IN_MEM, resident=False) == total
    touch_pages(store_root)
    assert gone <= check_level(tier, StorageLevel.NOT_IN_MEM, resident=True) < total


def test_single_message_fetches_by_offset(make_tier: TierFactory) -> None:
    tier = make_tier("posix")
    store = tier.store("NOT_IN_DISK")
    for (topic, qid, offset), want in sorted(tier.expected.items())[::7]:
        r = store.get_message(topic, qid, offset, 1)
        assert r.status is GetStatus.FOUND
        assert [u.queue_offset for u in r.units] == [offset]
        assert r.next_begin_offset == offset + 1
        expected_tier = "tiered" if offset < tier.local_min[(topic, qid)] else "local"
        assert r.tier == expected_tier
        assert_same(Got(r.units[0], r.tier, offset), want)


@pytest.mark.parametrize("level", ["FORCE", "DISABLE"])
def test_tag_filters_match_by_code_then_by_tags(make_tier: TierFactory, level: str) -> None:
    tier = make_tier("memory", deleted_files=0)
    store = tier.store(level)
    wanted = TagFilter.parse("TagA || TagC")
    for topic, qid in tier.queues:
        end = store.get_max_offset(topic, qid)
        got = scan(store, topic, qid, end, tags="TagA || TagC")
        expect = [
            q
            for (t, i, q), data in sorted(tier.expected.items())
            if (t, i) == (topic, qid) and wanted.match_message(msgcodec.decode(data))
        ]
        assert [g.unit.queue_offset for g in got] == expect
        assert {g.tier for g in got} == {"tiered" if level == "FORCE" else "local"}
        assert len(scan(store, topic, qid, end, tags="*")) == end


def test_statuses_at_the_edges(make_tier: TierFactory) -> None:
    tier = make_tier("memory", tieredStoreTopicExclude="GenTopic1")
    store = tier.store("FORCE")
    topic, qid = "GenTopic0", 0
    hi = store.get_max_offset(topic, qid)
    assert store.get_message(topic, qid, hi, 4).status is GetStatus.OFFSET_OVERFLOW_ONE
    over = store.get_message(topic, qid, hi + 10, 4)
    assert (over.status, over.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, hi)
    unknown = store.get_message("NoSuchTopic", 0, 0, 4)
    assert unknown.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert unknown.tier == "tiered"  # FORCE asked the tier; the broker has nothing either
    # GenTopic1 was never offloaded: FORCE finds no flat file and falls back to the broker
    before = REGISTRY.get_sample_value(
        "rocketmq_tiered_store_get_message_fallback_total",
        {"operation": "get_message", "topic": "GenTopic1"},
    )
    lmin = tier.local_min[("GenTopic1", 0)]
    r = store.get_message("GenTopic1", 0, lmin, 4)
    assert (r.status, r.tier, len(r.units)) == (GetStatus.FOUND, "local", 4)
    after = REGISTRY.get_sample_value(
        "rocketmq_tiered_store_get_message_fallback_total",
        {"operation": "get_message", "topic": "GenTopic1"},
    )
    assert after == (before or 0) + 1
    small = tier.store("DISABLE").get_message("GenTopic1", 0, 0, 4)
    assert (small.status, small.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, lmin)
    assert small.min_offset == lmin  # nothing of GenTopic1 in the tier


def test_bad_requests_name_the_value(make_tier: TierFactory) -> None:
    store = make_tier("memory", deleted_files=0).store()
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: store.get_message("../etc", 0, 0, 1), "topic='../etc'"),
        (lambda: store.get_message("T", -1, 0, 1), "queue=-1"),
        (lambda: store.get_message("T", 0, -5, 1), "offset=-5"),
        (lambda: store.get_message("T", 0, 0, 0), "maxCount=0"),
        (lambda: store.get_message("T", 0, 0, 1, "A || || B"), "tags="),
        (lambda: store.get_offset_by_time("T", 0, 1, "MIDDLE"), "boundary='MIDDLE'"),
    ]
    for call, match in calls:
        with pytest.raises(InvalidRequestError, match=match):
            call()


def test_message_bytes_cap_and_response_min_offsets(make_tier: TierFactory) -> None:
    tier = make_tier("memory")
    store = tier.store("FORCE")
    r = store.get_message("GenTopic0", 1, 0, 1000, max_bytes=4096)
    sizes = [len(u.data) for u in r.units]
    assert sum(sizes[:-1]) < 4096 and len(r.units) < 1000
    assert r.next_begin_offset == r.units[-1].queue_offset + 1
    one = store.get_message("GenTopic0", 1, 0, 1000, max_bytes=1)
    assert len(one.units) == 1  # at least one message


def test_gap_between_tier_segments_is_skipped(read_case: SidecarCase) -> None:
    """The broker deleted messages before they were offloaded: a read in the gap points past it."""
    spec = dataclasses.replace(read_case.spec, topics=1, queues=1, messages=800)
    store_root = read_case.store(spec)
    cfg = read_case.config(store_root, "posix", tieredStorageLevel="FORCE")
    provider = build_provider(cfg)
    with Sidecar(cfg, provider) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 800
        read_case.append(store_root, seed=5, messages=2000)
        for f in sorted((store_root / "commitlog").iterdir())[:-2]:
            f.unlink()
        local = LocalSource(cfg)
        gap_end = local.min_offset("GenTopic0", 0)
        assert gap_end > 800
        report = sidecar.dispatcher.run_pass(flush=True)
        assert report.gaps and not report.errors
        store = TieredMessageStore(cfg, sidecar.flat_store, local)
        in_gap = store.get_message("GenTopic0", 0, 800, 8)
        assert (in_gap.status, in_gap.next_begin_offset) == (GetStatus.OFFSET_FOUND_NULL, gap_end)
        before = store.get_message("GenTopic0", 0, 790, 32)
        assert [u.queue_offset for u in before.units] == list(range(790, 800))
        assert before.next_begin_offset == 800
        after = store.get_message("GenTopic0", 0, gap_end, 8)
        assert [u.queue_offset for u in after.units] == list(range(gap_end, gap_end + 8))
        assert after.tier == "tiered"
