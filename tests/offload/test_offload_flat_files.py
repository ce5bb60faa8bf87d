"""The container layer: offset rewrite, segments, commit vs append offsets, retries, rolling."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import MemoryProvider
from tiered.providers import Provider

from tiered.broker import message as msgcodec
from tiered.broker.commitlog import CommitLog
from tiered.broker.consumequeue import ConsumeQueue
from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.broker.unit_fields import check_units
from tiered.broker.unit_fields import rewrite_physical_offsets
from tiered.broker.unit_fields import store_timestamps
from tiered.errors import IntegrityError
from tiered.errors import ReadPastEndError
from tiered.file import FlatAddress
from tiered.file import FlatAppendFile
from tiered.file import FlatCommitLogFile
from tiered.file import FlatMessageFile
from tiered.file import MessageBatch
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataStore

ADDRESS = FlatAddress("DefaultCluster", "broker-a", "TopicTest", 3)


def metadata(tmp_path: Path) -> MetadataStore:
    store = MetadataStore(tmp_path / "data")
    store.load()
    return store


def on_disk(store: MetadataStore, kind: FileSegmentType) -> dict[int, int]:
    """Segment base -> recorded size, as persisted (a fresh store reads the file)."""
    fresh = MetadataStore(store.path.parent.parent)
    fresh.load()
    return {m.base_offset: m.size for m in fresh.segments(kind, ADDRESS.path)}


def append_file(tmp_path: Path, provider: Provider, max_size: int = 100) -> FlatAppendFile:
    f = FlatCommitLogFile(provider, metadata(tmp_path), ADDRESS, max_size)
    f.init_offset(0)
    return f


# --- vectorised codecs --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(36, 300), min_size=1, max_size=40), st.integers(0, 2**40))
def test_rewrite_matches_a_per_unit_loop(sizes: list[int], base: int) -> None:
    rng = np.random.default_rng(len(sizes))
    data = bytearray(rng.integers(0, 256, sum(sizes), dtype=np.uint8).tobytes())
    expected = bytearray(data)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    for s in starts.tolist():
        struct.pack_into(">q", expected, s + 28, base + s)
    rewrite_physical_offsets(data, starts, base + starts)
    assert data == expected


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytearray, np.ndarray, np.ndarray]:
    """Every unit of one queue of a store with IPv6 hosts and v2 messages, back to back."""
    root = tmp_path_factory.mktemp("units")
    generate_store(root, GenSpec(messages=400, ipv6_fraction=0.5, v2_fraction=0.5, queues=1))
    cq = ConsumeQueue.for_queue(root / "consumequeue", "GenTopic0", 0)
    found = cq.read_units(0, cq.max_offset())
    log = CommitLog(root / "commitlog", 1 << 30)
    bulk = log.read_many(found["offset"].astype(np.int64), found["size"].astype(np.int64))
    return bulk.data, bulk.starts, found


def test_store_timestamps_honour_ipv6_born_hosts(
    units: tuple[bytearray, np.ndarray, np.ndarray],
) -> None:
    data, starts, _ = units
    expected = [msgcodec.store_timestamp_of(memoryview(data), s) for s in starts.tolist()]
    assert store_timestamps(data, starts).tolist() == expected
    sysflags = [struct.unpack_from(">i", data, s + 36)[0] for s in starts.tolist()]
    assert any(f & msgcodec.BORNHOST_V6_FLAG for f in sysflags)  # the case Java gets wrong


def test_check_units_finds_the_first_disagreeing_unit(
    units: tuple[bytearray, np.ndarray, np.ndarray],
) -> None:
    data, starts, found = units
    sizes = found["size"].astype(np.int64)
    phys = found["offset"].astype(np.int64)
    queue_offsets = np.arange(len(starts), dtype=np.int64)
    assert check_units(data, starts, sizes, queue_offsets, phys) == len(starts)
    wrong = queue_offsets.copy()
    wrong[7] = 99
    assert check_units(data, starts, sizes, wrong, phys) == 7
    assert check_units(data[: int(starts[5]) + 10], starts, sizes, queue_offsets) == 5


# --- segments -----------------------------------------------------------------------------------


def test_append_then_commit_and_only_committed_bytes_are_readable(tmp_path: Path) -> None:
    provider = MemoryProvider()
    f = append_file(tmp_path, provider)
    assert on_disk(f.metadata, FileSegmentType.COMMIT_LOG) == {0: 0}  # recorded before data
    assert f.append(b"a" * 30, 5, 9) == 0
    assert (f.append_offset, f.commit_offset) == (30, 0)
    with pytest.raises(ReadPastEndError):
        f.read(0, 10)
    assert f.commit() == 30
    assert f.read(0, 100) == b"a" * 30  # clamped to the committed end
    f.flush_metadata()
    assert on_disk(f.metadata, FileSegmentType.COMMIT_LOG) == {0: 30}
    seg = f.segments[0]
    assert (seg.begin_timestamp, seg.end_timestamp) == (5, 9)


def test_rolling_and_reads_spanning_two_segments(tmp_path: Path) -> None:
    provider = MemoryProvider()
    f = append_file(tmp_path, provider, max_size=100)
    f.append(b"x" * 80, 1, 1)
    f.commit()
    assert f.room() == 20
    f.roll()
    assert [s.base for s in f.segments] == [0, 80] and f.segments[0].sealed
    f.append(b"y" * 50, 2, 2)
    f.commit()
    assert f.read(70, 20) == b"x" * 10 + b"y" * 10
    assert f.read(75, 1000) == b"x" * 5 + b"y" * 50  # at most two segments, short at the end
    f.flush_metadata()
    assert on_disk(f.metadata, FileSegmentType.COMMIT_LOG) == {0: 80, 80: 50}


def test_a_read_never_splices_a_segment_after_a_gap(tmp_path: Path) -> None:
    f = append_file(tmp_path, MemoryProvider())
    f.append(b"a" * 40, 1, 1)
    f.commit()
    f.roll(1000)  # a jump: offsets 40..999 do not exist
    f.append(b"b" * 10, 2, 2)
    f.commit()
    assert f.read(20, 100) == b"a" * 20
    with pytest.raises(ReadPastEndError):
        f.read(500, 10)
    assert f.read(1000, 100) == b"b" * 10


def test_a_failed_upload_that_landed_is_not_sent_again(tmp_path: Path) -> None:
    inner = MemoryProvider()
    provider = FaultInjectingProvider(
        inner, FaultPlan(nth={1}, operations={"append"}, when="after")
    )
    f = append_file(tmp_path, provider)
    f.append(b"q" * 25, 1, 1)
    with pytest.raises(ConnectionError):
        f.commit()  # the bytes landed, the answer was lost
    assert f.commit_offset == 0 and f.pending_size == 25
    assert f.commit() == 25
    assert inner.size(f.key(0)) == 25 and f.read(0, 25) == b"q" * 25


def test_a_partly_landed_upload_resumes_exactly_where_it_stopped(tmp_path: Path) -> None:
    provider = MemoryProvider()
    f = append_file(tmp_path, provider)
    data = bytes(range(60))
    f.append(data, 1, 1)
    provider.append(f.key(0), data[:17], 0)  # a pwrite cut short by a crash
    assert f.commit() == 60
    assert provider.read(f.key(0), 0, 100) == data


def test_an_upload_refused_before_it_happened_is_retried(tmp_path: Path) -> None:
    inner = MemoryProvider()
    provider = FaultInjectingProvider(inner, FaultPlan(nth={1}, operations={"append"}))
    f = append_file(tmp_path, provider)
    f.append(b"z" * 10, 1, 1)
    with pytest.raises(ConnectionError):
        f.commit()
    assert f.commit() == 10 and inner.size(f.key(0)) == 10


def test_a_backend_size_this_file_cannot_explain_is_an_integrity_error(tmp_path: Path) -> None:
    provider = MemoryProvider()
    f = append_file(tmp_path, provider)
    f.append(b"1" * 10, 1, 1)
    provider.append(f.key(0), b"2" * 50, 0)  # more than pending: someone else wrote here
    with pytest.raises(IntegrityError, match="restart the sidecar to reconcile"):
        f.commit()


def test_a_segment_sealed_before_its_roll_was_recorded_moves_pending_on(tmp_path: Path) -> None:
    provider = MemoryProvider()
    f = append_file(tmp_path, provider)
    f.append(b"a" * 30, 1, 1)
    f.commit()
    provider.seal(f.key(0))  # sealed, then a crash before the new segment was recorded
    f.append(b"b" * 20, 2, 2)
    assert f.commit() == 20
    assert [s.base for s in f.segments] == [0, 30]
    assert f.read(0, 50) == b"a" * 30 + b"b" * 20
    f.flush_metadata()
    assert on_disk(f.metadata, FileSegmentType.COMMIT_LOG) == {0: 30, 30: 20}


def test_delete_first_removes_the_record_before_the_object(tmp_path: Path) -> None:
    provider = MemoryProvider()
    f = append_file(tmp_path, provider, max_size=10)
    for _ in range(3):
        f.append(b"x" * 10, 1, 1)
        f.commit()
        f.roll()
    seen: list[dict[int, int]] = []

    class Watch(FaultInjectingProvider):
        def delete(self, key: str) -> None:
            seen.append(on_disk(f.metadata, FileSegmentType.COMMIT_LOG))
            super().delete(key)

    f.provider = Watch(provider)
    first = f.delete_first()
    assert first.base == 0 and 0 not in seen[0]  # the record was gone when the object went
    assert not provider.exists(f.key(0))


def test_message_file_commits_commitlog_before_consume_queue(tmp_path: Path) -> None:
    calls: list[str] = []
    inner = MemoryProvider()

    class Order(FaultInjectingProvider):
        def append(self, key: str, data: bytes | bytearray | memoryview, position: int) -> int:
            calls.append(key.split("/")[-2])
            return super().append(key, data, position)

    flat = FlatMessageFile(
        Order(inner),
        metadata(tmp_path),
        ADDRESS,
        commitlog_max_size=1 << 20,
        consume_queue_max_size=1 << 20,
    )
    flat.init(100)
    assert flat.consume_queue.min_offset == 2000  # queue offset 100 x 20 bytes
    unit = bytearray(
        msgcodec.encode(
            topic="TopicTest",
            queue_id=3,
            queue_offset=100,
            physical_offset=9,
            body=b"hi",
            properties=b"",
            born_timestamp=4,
            store_timestamp=5,
        )
    )
    size = np.array([len(unit)], dtype=np.int64)
    batch = MessageBatch(100, unit, np.zeros(1, np.int64), size, np.array([7]), np.array([5]))
    flat.append_batch(batch)
    flat.commit()
    assert calls == ["COMMIT_LOG", "CONSUME_QUEUE"]
    assert flat.commit_offset == 101 and flat.min_offset() == 100
    assert struct.unpack_from(">q", inner.read(flat.commitlog.key(0), 28, 8))[0] == 0


def test_time_rolling_goes_by_the_segments_age_not_its_messages(tmp_path: Path) -> None:
    now = [1_800_000_000_000]
    store = metadata(tmp_path)
    flat = FlatMessageFile(
        MemoryProvider(),
        store,
        ADDRESS,
        commitlog_max_size=1 << 20,
        consume_queue_max_size=1 << 20,
        clock=lambda: now[0],
    )
    flat.init(0)
    old = 1_000_000_000_000  # a backlog: every message is years old
    unit = bytearray(
        msgcodec.encode(
            topic="TopicTest",
            queue_id=3,
            queue_offset=0,
            physical_offset=0,
            body=b"x" * 100,
            properties=b"",
            born_timestamp=old,
            store_timestamp=old,
        )
    )
    size = np.array([len(unit)], dtype=np.int64)
    flat.append_batch(
        MessageBatch(0, unit, np.zeros(1, np.int64), size, np.array([0]), np.array([old]))
    )
    flat.commit()
    hour = 3_600_000
    # upstream would roll now (first message older than the interval); the segment is new
    assert not flat.commitlog.try_time_roll(now[0], 1, 1)
    assert not flat.commitlog.try_time_roll(now[0] + hour, 1, 1)  # exactly the interval
    assert not flat.commitlog.try_time_roll(now[0] + 2 * hour, 1, 1 << 20)  # below the minimum
    assert flat.commitlog.try_time_roll(now[0] + 2 * hour, 1, 1)
    assert [s.base for s in flat.commitlog.segments] == [0, len(unit)]
    assert flat.commitlog.segments[0].sealed
