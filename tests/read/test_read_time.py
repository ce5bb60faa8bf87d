"""Offset by time: the tier's search (spec §9.7, its example table) and the store's routing."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tiered.providers import MemoryProvider

from tiered.broker import message as msgcodec
from tiered.config import StorageLevel
from tiered.file.flat_append_file import FlatAddress
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch
from tiered.metadata import MetadataStore
from tiered.read.time_search import Boundary
from tiered.read.time_search import offset_by_time
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]


# spec §9.7: store times of queue offsets 10..16
EXAMPLE = [(10, 40), (11, 50), (12, 50), (13, 50), (14, 60), (15, 60), (16, 70)]


def empty_queue(data_dir: Path, units_per_segment: int) -> FlatMessageFile:
    """A flat queue in memory, not yet initialised, with metadata under ``data_dir``."""
    metadata = MetadataStore(data_dir)
    metadata.load()
    return FlatMessageFile(
        MemoryProvider(),
        metadata,
        FlatAddress("DefaultCluster", "broker-a", "TopicTest", 0),
        commitlog_max_size=1 << 20,
        consume_queue_max_size=units_per_segment * 20,
    )


def flat_queue(
    tmp_path: Path, rows: list[tuple[int, int]], units_per_segment: int
) -> FlatMessageFile:
    """A flat queue holding one message per ``(queue offset, store time)``; a jump in the
    offsets is a gap (a new consumequeue segment)."""
    flat = empty_queue(tmp_path / f"data-{units_per_segment}", units_per_segment)
    flat.init(rows[0][0])
    for queue_offset, ts in rows:
        if queue_offset != flat.append_offset:
            flat.jump(queue_offset)
        unit = bytearray(
            msgcodec.encode(
                topic="TopicTest",
                queue_id=0,
                queue_offset=queue_offset,
                physical_offset=0,
                body=b"body",
                properties={"TAGS": "TagA"},
                born_timestamp=ts,
                store_timestamp=ts,
            )
        )
        size = np.array([len(unit)], dtype=np.int64)
        assert flat.fit(size, 1 << 20) == 1
        flat.append_batch(
            MessageBatch(
                queue_offset,
                unit,
                np.zeros(1, dtype=np.int64),
                size,
                np.zeros(1, dtype=np.int64),
                np.array([ts], dtype=np.int64),
            )
        )
        flat.commit()
    return flat


@pytest.mark.parametrize("units_per_segment", [100, 3, 1])
def test_the_spec_example(tmp_path: Path, units_per_segment: int) -> None:
    flat = flat_queue(tmp_path, EXAMPLE, units_per_segment)
    assert len(flat.consume_queue.segments) == -(-7 // units_per_segment)
    lower, upper = Boundary.LOWER, Boundary.UPPER
    assert offset_by_time(flat, 35, lower) == 10
    assert offset_by_time(flat, 45, lower) == 11
    assert offset_by_time(flat, 50, lower) == 11
    assert offset_by_time(flat, 50, upper) == 13
    assert offset_by_time(flat, 60, lower) == 14
    assert offset_by_time(flat, 60, upper) == 15
    assert offset_by_time(flat, 75, lower) == 17
    # and around the edges
    assert offset_by_time(flat, 40, upper) == 10
    assert offset_by_time(flat, 70, upper) == 16
    assert offset_by_time(flat, 65, upper) == 16
    assert offset_by_time(flat, 35, upper) == 10


def test_gaps_are_never_probed(tmp_path: Path) -> None:
    rows = [(10, 40), (11, 50), (12, 50), (20, 50), (21, 60), (30, 60), (31, 80)]
    flat = flat_queue(tmp_path, rows, 100)
    lower, upper = Boundary.LOWER, Boundary.UPPER
    assert offset_by_time(flat, 50, lower) == 11
    assert offset_by_time(flat, 50, upper) == 20  # the last 50 is behind the first gap
    assert offset_by_time(flat, 55, lower) == 21
    assert offset_by_time(flat, 60, upper) == 30
    assert offset_by_time(flat, 70, lower) == 31
    assert offset_by_time(flat, 90, lower) == 32
    only = flat_queue(tmp_path / "b", [(10, 40), (11, 50), (20, 60)], 100)
    assert offset_by_time(only, 50, upper) == 11  # just before the gap


def test_an_empty_tier_answers_minus_one(tmp_path: Path) -> None:
    flat = empty_queue(tmp_path, 100)
    assert offset_by_time(flat, 5, Boundary.LOWER) == -1
    flat.init(7)
    assert offset_by_time(flat, 5, Boundary.LOWER) == 7


@pytest.mark.parametrize("level", ["FORCE", "NOT_IN_DISK", "DISABLE"])
def test_store_offset_by_time_over_both_tiers(make_tier: TierFactory, level: str) -> None:
    tier = make_tier("memory")
    store = tier.store(level)
    for topic, qid in tier.queues:
        rows = sorted(
            (q, msgcodec.decode(data).store_timestamp)
            for (t, i, q), data in tier.expected.items()
            if (t, i) == (topic, qid)
        )
        offsets = [q for q, _ in rows]
        times = [ts for _, ts in rows]
        lmin = tier.local_min[(topic, qid)]
        local_first = times[offsets.index(lmin)]
        probes = [times[0] - 5, times[3], times[len(times) // 4] + 1, local_first - 1]
        probes += [local_first, times[-10], times[-1] + 100]
        for ts in probes:
            want = offsets[bisect.bisect_left(times, ts)] if ts <= times[-1] else offsets[-1] + 1
            if level == "DISABLE":
                want = max(want, lmin)  # the tier is never asked
            for boundary in ("LOWER", "UPPER"):  # store times are distinct in this store
                got = store.get_offset_by_time(topic, qid, ts, boundary)
                assert got == want, (topic, qid, ts, boundary, level)
        earliest = local_first if level == "DISABLE" else times[0]
        assert store.get_earliest_message_time(topic, qid) == earliest


def test_earliest_message_time_is_the_older_tier(make_tier: TierFactory) -> None:
    tier = make_tier("memory")
    store = tier.store(StorageLevel.NOT_IN_DISK)
    for topic, qid in tier.queues:
        first = min(
            msgcodec.decode(data).store_timestamp
            for (t, i, _), data in tier.expected.items()
            if (t, i) == (topic, qid)
        )
        assert store.get_earliest_message_time(topic, qid) == first
        assert tier.sidecar.local.earliest_time(topic, qid) > first  # its listing was stale
        assert LocalSource(tier.cfg).earliest_time(topic, qid) > first
    assert store.get_earliest_message_time("NoSuchTopic", 0) == -1
