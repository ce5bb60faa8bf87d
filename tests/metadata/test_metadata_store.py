"""MetadataStore: atomic persist, .bak, corrupt fallback, crash safety, mirror, API (§7, §1.5)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import pytest

from tiered.broker.fastjson import dumps_fastjson
from tiered.errors import MetadataError
from tiered.metadata.metadata_store import FILE_NAME
from tiered.metadata.metadata_store import JOURNAL_MIN_BYTES
from tiered.metadata.metadata_store import LoadReport
from tiered.metadata.metadata_store import MetadataStore
from tiered.metadata.models import LONG_MAX
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import MetadataDocument
from tiered.metadata.models import QueueMetadata
from tiered.metadata.models import TopicMetadata
from tiered.metadata.models import dump_metadata
from tiered.metadata.models import parse_metadata

# --- load / persist ------------------------------------------------------------------------------
from .conftest import CL
from .conftest import CQ
from .conftest import INDEX
from .conftest import T0
from .conftest import clock
from .conftest import disk_document
from .conftest import fill
from .conftest import mq
from .conftest import open_store
from .conftest import segment


def test_missing_both_starts_empty_and_writes_nothing(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    assert store.path == tmp_path / "config" / FILE_NAME
    assert store.load() == LoadReport(used="empty", moved_aside=[], problems=[])
    assert store.topic_serial_number == -1
    assert store.document() == MetadataDocument()
    assert not (tmp_path / "config").exists()


def test_persist_load_round_trip(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    fill(store, 3)
    again = MetadataStore(tmp_path)
    assert again.load().used == "main"
    assert again.document() == store.document()
    assert again.topic_serial_number == 2
    assert store.path.read_text("utf-8") == dump_metadata(store.document())
    assert not list(store.path.parent.glob("*.tmp"))


def test_bak_holds_the_previous_version(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("A")
    assert not store.bak_path.exists()
    first = store.path.read_bytes()
    store.add_topic("B")
    assert store.bak_path.read_bytes() == first
    second = store.path.read_bytes()
    store.add_topic("C")
    assert store.bak_path.read_bytes() == second
    assert [t.topic for t in disk_document(store).topic_metadata_table.values()] == ["A", "B", "C"]


def test_bak_without_hard_links_is_a_synced_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted (no hard links here)")

    monkeypatch.setattr(os, "link", no_links)
    store = open_store(tmp_path)
    store.add_topic("A")
    first = store.path.read_bytes()
    store.add_topic("B")
    assert store.bak_path.read_bytes() == first
    assert not list(store.path.parent.glob("*.tmp"))


def test_writes_standard_json_readable_without_the_fastjson_dialect(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    fill(store, 1)
    data = json.loads(store.path.read_bytes())
    assert data["commitLogFileSegmentTable"]["broker-a/T0/0"]["0"]["size"] == 0
    assert data["queueMetadataTable"]["T0"]["1"]["queue"]["queueId"] == 1


def _java_text(doc: MetadataDocument) -> str:
    """The document as fastjson writes it: bare integer keys (the generator's writer)."""

    def ints(node: object) -> object:
        if isinstance(node, dict):
            return {key: ints(value) for key, value in node.items()}
        return int(node) if isinstance(node, FileSegmentType) else node

    return dumps_fastjson(ints(msgspec.to_builtins(doc)))


def test_loads_a_file_written_by_a_java_broker(tmp_path: Path) -> None:
    source = open_store(tmp_path / "src")
    fill(source, 1)
    java = _java_text(source.document())
    assert "{0:{" in java
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / FILE_NAME).write_text(java, "utf-8")
    store = MetadataStore(tmp_path, clock=clock())
    assert store.load().used == "main"
    assert store.document() == source.document()
    assert store.add_topic("Second").topic_id == 1
    assert store.bak_path.read_text("utf-8") == java  # the Java file is kept as the backup
    assert json.loads(store.path.read_bytes())["topicSerialNumber"] == 1


def _garbage(good: bytes) -> bytes:
    return b"\x00\x17garbage\xff"


def _truncated(good: bytes) -> bytes:
    return good[: len(good) // 2]


def _wrong_shape(good: bytes) -> bytes:
    return b'{"dataVersion":{"counter":1},"offsetTable":{}}'


def _empty(good: bytes) -> bytes:
    return b""


def _bad_value(good: bytes) -> bytes:
    return good.replace(b'"size":100', b'"size":-100.5')


CORRUPTIONS = [_garbage, _truncated, _wrong_shape, _empty, _bad_value]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_corrupt_main_falls_back_to_bak_and_is_moved_aside(
    tmp_path: Path, corrupt: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(tmp_path)
    fill(store, 2)
    previous = store.document()
    store.add_topic("Newest")
    damaged = corrupt(store.path.read_bytes())
    store.path.write_bytes(damaged)

    again = MetadataStore(tmp_path, clock=lambda: 1234)
    report = again.load()
    assert report.used == "bak"
    assert again.document() == previous
    assert report.moved_aside == [store.path.with_name(f"{FILE_NAME}.corrupt-1234")]
    assert report.moved_aside[0].read_bytes() == damaged  # kept, bytes unchanged
    assert not store.path.exists()
    assert len(report.problems) == 1
    assert str(store.path) in report.problems[0]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert f"damaged file moved to {report.moved_aside[0]}" in warnings[0].getMessage()
    # the next persist restores the main file; the .bak is still the good old one
    again.add_topic("After")
    assert disk_document(again).topic_metadata_table.keys() == {"T0", "T1", "After"}
    assert parse_metadata(store.bak_path.read_text("utf-8"), source="bak") == previous


def test_moving_aside_never_overwrites_an_earlier_corrupt_file(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    fill(store, 1)
    store.add_topic("X")
    moved = []
    for _ in range(2):
        store.path.write_bytes(b"junk")
        report = MetadataStore(tmp_path, clock=lambda: 77).load()
        moved += report.moved_aside
    assert [p.name for p in moved] == [f"{FILE_NAME}.corrupt-77", f"{FILE_NAME}.corrupt-78"]
    assert all(p.read_bytes() == b"junk" for p in moved)


def test_both_corrupt_raises_naming_both_files_and_the_fix(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    fill(store, 2)
    store.path.write_bytes(b"{broken")
    store.bak_path.write_bytes(b"[]")
    with pytest.raises(MetadataError) as info:
        MetadataStore(tmp_path).load()
    message = str(info.value)
    assert str(store.path) in message
    assert str(store.bak_path) in message
    # the mirror first (it keeps topic ids), the listing only when the mirror is gone too
    first, rest = message.split("`rmq-tiered recover`", 1)
    assert "--from-backend" not in first and "if the mirror is gone too" in rest
    assert "`rmq-tiered recover --from-backend`" in rest
    # nothing moved: the next start fails the same way instead of starting empty
    assert store.path.read_bytes() == b"{broken"
    assert store.bak_path.read_bytes() == b"[]"


def test_corrupt_main_without_bak_raises(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("A")
    store.path.write_bytes(b"nope")
    with pytest.raises(MetadataError, match=r"is missing.*`rmq-tiered recover` \(keeps topic"):
        MetadataStore(tmp_path).load()
    assert store.path.read_bytes() == b"nope"


def test_missing_main_with_corrupt_bak_raises(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("A")
    store.add_topic("B")
    store.path.unlink()
    store.bak_path.write_bytes(b"")
    with pytest.raises(MetadataError, match="empty"):
        MetadataStore(tmp_path).load()


def test_missing_main_uses_bak(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("A")
    store.add_topic("B")
    store.path.unlink()
    again = MetadataStore(tmp_path)
    report = again.load()
    assert (report.used, report.moved_aside) == ("bak", [])
    assert report.problems == [f"{store.path} is missing"]
    assert [t.topic for t in again.topics()] == ["A"]


def test_never_loaded_store_refuses_to_write(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("A")
    fresh = MetadataStore(tmp_path)
    with pytest.raises(MetadataError, match="call load"):
        fresh.add_topic("B")
    with pytest.raises(MetadataError, match="call load"):
        fresh.persist()
    assert [t.topic for t in disk_document(store).topic_metadata_table.values()] == ["A"]


# --- crash safety --------------------------------------------------------------------------------


class _Crash(BaseException):
    """Stands for the process dying between two persist steps."""


@pytest.mark.parametrize(
    ("step", "survivor"),
    [("tmp-written", "old"), ("bak-kept", "old"), ("renamed", "new")],
)
def test_crash_between_persist_steps_leaves_old_or_new(
    tmp_path: Path, step: str, survivor: str
) -> None:
    store = open_store(tmp_path)
    fill(store, 2)
    old = store.document()

    def hook(name: str) -> None:
        if name == step:
            raise _Crash(name)

    store._file.step_hook = hook
    with pytest.raises(_Crash):
        store.add_topic("New")
    new = store.document()

    again = MetadataStore(tmp_path)
    report = again.load()
    assert (report.used, report.moved_aside) == ("main", [])
    assert again.document() == (old if survivor == "old" else new)
    assert not list(store.path.parent.glob("*.tmp"))  # a stale temp file is cleaned up
    again.add_topic("Later")
    assert "Later" in disk_document(again).topic_metadata_table


_CHILD = """
import sys
from pathlib import Path
from tiered.metadata.models import FileSegmentMetadata, FileSegmentType
from tiered import metrics
from tiered.metadata.metadata_store import MetadataStore

metrics.register()  # as `run` does at start: the metric families are not made inside a persist
store = MetadataStore(Path(sys.argv[1]), journal_min_bytes=int(sys.argv[2]))
store.load()
print("ready", flush=True)
while True:
    n = store.topic_serial_number + 1
    with store.batch():  # version n: topics T0..Tn, every segment of size n
        store.add_topic(f"T{n}")
        for q in range(400):
            store.update_segment(FileSegmentMetadata(
                path=f"b/t/{q}", type=FileSegmentType.COMMIT_LOG, base_offset=0,
                size=n, create_timestamp=n))
    print(n, flush=True)
"""


def _kill_round(data_dir: Path, acked: int, delay: float, journal: int) -> int:
    """Start a persisting child, SIGKILL it after ``delay``; return its last acknowledged serial."""
    # cwd: not the repo root, whose unmapped source tree would shadow the installed package
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(data_dir), str(journal)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=data_dir,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        time.sleep(delay)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        # read the rest through the same file object: readline() may already have buffered acks
        # that communicate(timeout=...) would skip (it reads the raw pipe)
        assert child.stdout is not None
        with child.stdout:
            out = child.stdout.read()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    acks = [int(line) for line in out.split()]
    assert acks == list(range(acked + 1, acked + 1 + len(acks)))
    return acks[-1] if acks else acked


@pytest.mark.slow
@pytest.mark.parametrize("journal", [JOURNAL_MIN_BYTES, 0], ids=["whole-file", "journal"])
def test_kill_9_at_random_points_never_tears_the_file(tmp_path: Path, journal: int) -> None:
    """24 real processes killed with SIGKILL mid-loop (3 lanes at a time, one data dir each);
    with the journal, every persist appends to it and compactions come every few persists."""
    rng = random.Random(20261122)
    lanes = [tmp_path / f"lane{n}" for n in range(3)]
    acked = {}
    for lane in lanes:
        open_store(lane).add_topic("T0")  # version 0: the main file exists from the start
        acked[lane] = 0
    seen: set[int] = set()
    for _ in range(8):
        pool = ThreadPoolExecutor(len(lanes))
        with pool:
            rounds = {
                lane: pool.submit(_kill_round, lane, acked[lane], rng.uniform(0.0, 0.08), journal)
                for lane in lanes
            }
        for lane, done in rounds.items():
            last = done.result()
            store = MetadataStore(lane, journal_min_bytes=journal)
            report = store.load()
            assert (report.used, report.moved_aside, report.problems) == ("main", [], [])
            serial = store.topic_serial_number
            assert serial in (last, last + 1)  # the last acknowledged persist, or the one in flight
            doc = store.document()
            assert list(doc.topic_metadata_table) == [f"T{n}" for n in range(serial + 1)]
            sizes = {seg[0].size for seg in doc.commit_log_file_segment_table.values()}
            assert sizes == ({serial} if serial else set())
            acked[lane] = serial
            seen.add(serial)
    assert len(seen) > 10  # the children really made progress between kills


# --- topics, queues, segments --------------------------------------------------------------------


def test_topic_ids_increment_from_zero_and_add_is_idempotent(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    assert [store.add_topic(t).topic_id for t in ("A", "B", "C")] == [0, 1, 2]
    writes = store.persist_count
    again = store.add_topic("B", reserve_time=99)
    assert (again.topic_id, again.reserve_time) == (1, -1)
    assert store.persist_count == writes
    assert store.topic_serial_number == 2
    assert [t.topic for t in store.topics()] == ["A", "B", "C"]
    first = store.get_topic("A")
    assert first == TopicMetadata(topic_id=0, topic="A", update_timestamp=T0)
    assert store.get_topic("missing") is None


def test_update_and_delete_topic(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    meta = store.add_topic("A")
    store.add_queue(mq("A", 0))
    meta.reserve_time = 48
    store.update_topic(meta)
    got = store.get_topic("A")
    assert got is not None
    assert got.reserve_time == 48
    assert got.update_timestamp > meta.update_timestamp
    store.update_topic(TopicMetadata(topic_id=10, topic="Imported", update_timestamp=0))
    assert store.add_topic("Next").topic_id == 11  # an id is never handed out twice
    store.delete_topic("A")
    store.delete_topic("A")
    assert store.get_topic("A") is None
    assert store.get_queue("A", 0) is not None  # as upstream: queues stay
    assert "A" not in disk_document(store).topic_metadata_table


def test_queues_add_update_delete(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    created = store.add_queue(mq("T", 1))
    assert created == QueueMetadata(queue=mq("T", 1), update_timestamp=T0)
    writes = store.persist_count
    assert store.add_queue(mq("T", 1)) == created
    assert store.persist_count == writes
    store.add_queue(mq("T", 0))
    store.add_queue(mq("A", 3))
    assert [(q.queue.topic, q.queue.queue_id) for q in store.queues()] == [
        ("A", 3),
        ("T", 0),
        ("T", 1),
    ]
    assert [q.queue.queue_id for q in store.queues("T")] == [0, 1]
    assert store.queues("none") == []

    created.min_offset, created.max_offset = 5, 9
    store.update_queue(created)
    got = store.get_queue("T", 1)
    assert got is not None
    assert (got.min_offset, got.max_offset) == (5, 9)
    assert got.update_timestamp > created.update_timestamp

    store.delete_queue("T", 1)
    store.delete_queue("T", 1)
    store.delete_queue("nope", 0)
    assert store.get_queue("T", 1) is None
    store.delete_queue("A", 3)
    assert "A" not in disk_document(store).queue_metadata_table
    assert store.get_queue("T", 0) is not None


def test_segments_by_type_sorted_and_create_timestamp_kept(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    path = "broker-a/TopicTest/0"
    for base in (2000, 0, 1000):
        store.update_segment(segment(CL, path, base, size=10))
    store.update_segment(segment(CQ, path, 40))
    store.update_segment(segment(INDEX, "broker-a/rmq_sys_INDEX/0", 0))
    assert [s.base_offset for s in store.segments(CL, path)] == [0, 1000, 2000]
    assert [s.base_offset for s in store.segments(CQ, path)] == [40]
    assert store.segments(INDEX, path) == []
    assert store.get_segment(CQ, path, 0) is None

    update = segment(CL, path, 1000, size=99)
    update.create_timestamp = 5
    update.begin_timestamp, update.end_timestamp = 10, 20
    store.update_segment(update)
    got = store.get_segment(CL, path, 1000)
    assert got is not None
    assert (got.size, got.create_timestamp, got.begin_timestamp) == (99, T0 - 1, 10)
    assert store.get_segment(CL, path, 0) == segment(CL, path, 0, size=10)
    assert segment().begin_timestamp == LONG_MAX

    store.delete_segment(CL, path, 1000)
    store.delete_segment(CL, path, 1000)
    assert [s.base_offset for s in store.segments(CL, path)] == [0, 2000]
    store.delete_segments(CL, path)
    store.delete_segments(CL, path)
    assert store.segments(CL, path) == []
    on_disk = disk_document(store)
    assert path not in on_disk.commit_log_file_segment_table
    assert list(on_disk.consume_queue_file_segment_table[path]) == [40]
    store.delete_segment(CQ, path, 40)
    assert path not in disk_document(store).consume_queue_file_segment_table


def test_getters_and_document_return_copies(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("A").reserve_time = 5
    seg = segment(size=1)
    store.update_segment(seg)  # (kept as handed over: not changed afterwards)
    got = store.get_segment(CL, seg.path, 0)
    assert got is not None
    got.size = 3
    snapshot = store.document()
    snapshot.topic_metadata_table.clear()
    snapshot.commit_log_file_segment_table[seg.path][0].size = 4
    assert store.get_topic("A") is not None
    assert store.get_topic("A").reserve_time == -1  # type: ignore[union-attr]
    assert store.segments(CL, seg.path)[0].size == 1


def test_segments_updated_at_once_persist_once_and_keep_create_timestamps(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    path = "broker-a/TopicTest/0"
    store.update_segment(segment(CL, path, 0, size=10))
    before = store.persist_count
    moved = segment(CL, path, 0, size=30)
    moved.create_timestamp = 5
    store.update_segments([moved, segment(CQ, path, 40, size=20)])
    assert store.persist_count == before + 1
    store.update_segments([])
    assert store.persist_count == before + 1
    reopened = open_store(tmp_path)
    got = reopened.get_segment(CL, path, 0)
    assert got is not None and (got.size, got.create_timestamp) == (30, T0 - 1)
    assert reopened.segments(CQ, path) == [segment(CQ, path, 40, size=20)]


def test_reload_restores_topics_queues_and_segments(tmp_path: Path) -> None:
    """Upstream DefaultMetadataStoreTest: a new store over the same file sees everything."""
    store = open_store(tmp_path)
    fill(store, 4)
    store.update_segment(segment(INDEX, "broker-a/rmq_sys_INDEX/0", 0, size=77))
    again = open_store(tmp_path)
    assert [t.topic_id for t in again.topics()] == [0, 1, 2, 3]
    assert len(again.queues()) == 8
    assert again.segments(CQ, "broker-a/T3/1")[0].size == 60
    assert again.segments(INDEX, "broker-a/rmq_sys_INDEX/0")[0].size == 77


# --- batch ---------------------------------------------------------------------------------------


def _is_dirty(store: MetadataStore) -> bool:
    return store.dirty  # a call: mypy would otherwise narrow the property across statements


def test_batch_persists_once_at_the_end(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.add_topic("first")
    writes, inode = store.persist_count, store.path.stat().st_ino
    with store.batch():
        for q in range(50):
            store.add_queue(mq("T", q))
            store.update_segment(segment(CL, f"broker-a/T/{q}", 0, size=q))
        with store.batch():  # nested: still nothing written
            store.add_topic("T")
        assert _is_dirty(store)
        assert store.persist_count == writes
        assert store.path.stat().st_ino == inode
        assert "T" not in disk_document(store).topic_metadata_table
    assert store.persist_count == writes + 1
    assert not store.dirty
    assert len(disk_document(store).queue_metadata_table["T"]) == 50
    with store.batch():  # nothing changed: nothing written
        store.add_topic("T")
    assert store.persist_count == writes + 1


def test_batch_persists_even_when_the_body_fails(tmp_path: Path) -> None:
    store = open_store(tmp_path)

    def round_that_fails() -> None:
        with store.batch():
            store.add_topic("kept")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        round_that_fails()
    assert "kept" in disk_document(store).topic_metadata_table


def test_explicit_persist_inside_a_batch_makes_removals_durable(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.update_segment(segment(CL, "b/t/0", 0))
    with store.batch():
        store.delete_segment(CL, "b/t/0", 0)
        assert "b/t/0" in disk_document(store).commit_log_file_segment_table
        store.persist()  # metadata removed before the data is deleted
        assert "b/t/0" not in disk_document(store).commit_log_file_segment_table
    assert store.persist_count == 2


# --- threads -------------------------------------------------------------------------------------


@pytest.mark.parametrize("batched", [True, False])
def test_concurrent_writers_lose_nothing(tmp_path: Path, batched: bool) -> None:
    store = open_store(tmp_path)
    per_thread = 60 if batched else 12
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def work(worker: int) -> None:
        try:
            start.wait()
            topic = f"T{worker}"
            store.add_topic(topic)
            for q in range(per_thread):
                store.add_queue(mq(topic, q))
                store.update_segment(segment(CQ, f"broker-a/{topic}/{q}", q * 20, size=q))
                store.get_segment(CQ, f"broker-a/{topic}/{q}", q * 20)
                store.queues()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    if batched:
        with store.batch():
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    else:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    for doc in (store.document(), disk_document(store)):
        assert sorted(t.topic_id for t in doc.topic_metadata_table.values()) == list(range(6))
        assert sum(len(q) for q in doc.queue_metadata_table.values()) == 6 * per_thread
        assert len(doc.consume_queue_file_segment_table) == 6 * per_thread
    assert store.persist_count == (1 if batched else 6 * (1 + 2 * per_thread))
