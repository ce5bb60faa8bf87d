"""The metadata journal: a persist writes what changed, readers replay it, compaction and crashes
at every step leave the document whole, the mirror gets chunks and recovery replays them."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from tiered.providers.base import Payload
from tiered.providers.memory import MemoryProvider

from tiered.metadata import journal as journal_module
from tiered.metadata import metadata_store as store_module
from tiered.metadata.journal import JOURNAL_NAME
from tiered.metadata.journal import chunk_prefix
from tiered.metadata.journal import encode_frame
from tiered.metadata.metadata_store import MetadataStore
from tiered.metadata.metadata_store import mirror_key_for
from tiered.metadata.metadata_store import read_metadata
from tiered.metadata.metadata_store import read_mirror
from tiered.metadata.models import FileSegmentMetadata
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import MessageQueue
from tiered.metadata.models import MetadataDocument
from tiered.metadata.models import dump_metadata
from tiered.metadata.models import parse_metadata

CL = FileSegmentType.COMMIT_LOG
CQ = FileSegmentType.CONSUME_QUEUE
KEY = mirror_key_for("DefaultCluster", "broker-a")
T0 = 1700000000000


def _clock() -> Callable[[], int]:
    counter = itertools.count(T0)
    return lambda: next(counter)


def _store(data_dir: Path, min_bytes: int = 0, **kwargs: object) -> MetadataStore:
    store = MetadataStore(
        data_dir,
        clock=_clock(),
        journal_min_bytes=min_bytes,
        **kwargs,  # type: ignore[arg-type]
    )
    store.load()
    return store


def _queue(store: MetadataStore, topic: str, qid: int, size: int) -> None:
    """Record a queue with a commitlog and a consumequeue segment of ``size`` bytes."""
    with store.batch():
        store.add_topic(topic)
        mq = MessageQueue(broker_name="broker-a", queue_id=qid, topic=topic)
        meta = store.add_queue(mq)
        store.update_queue(meta.model_copy(update={"max_offset": size}))
        path = f"broker-a/{topic}/{qid}"
        for kind in (CL, CQ):
            store.update_segment(
                FileSegmentMetadata(
                    path=path, type=kind, base_offset=0, size=size, create_timestamp=T0
                )
            )


def _wide(store: MetadataStore, topics: int) -> None:
    with store.batch():
        for t in range(topics):
            for q in range(8):
                _queue(store, f"T{t}", q, 100)


def _reloaded(data_dir: Path) -> MetadataDocument:
    again = MetadataStore(data_dir, journal_min_bytes=0)
    again.load()
    return again.document()


def _journal_frames(store: MetadataStore) -> int:
    return len(store.journal.read().frames)


def test_a_persist_writes_the_queues_it_changed_not_the_file(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _wide(store, 250)  # 2,000 queues: a snapshot of about a megabyte
    snapshot = store.path.read_bytes()
    assert len(snapshot) > 1_000_000
    assert store.journal.open and _journal_frames(store) == 0

    with store.batch():
        for q in range(8):
            _queue(store, "T7", q, 5_000)
    assert store.path.read_bytes() == snapshot  # the snapshot is not rewritten
    assert 0 < store.last_persist_bytes < len(snapshot) / 200
    assert _journal_frames(store) == 1
    assert read_metadata(tmp_path)[0] == store.document() == _reloaded(tmp_path)
    assert "1 journal changes" in read_metadata(tmp_path)[1]


def test_a_round_that_changes_most_records_writes_the_file_not_a_frame(tmp_path: Path) -> None:
    """A frame is built whole in memory; a persist of at least half the file's records (from
    4,096 on) writes the file instead, in parts, as a first offload's round does."""
    store = _store(tmp_path)
    _queue(store, "T0", 0, 1)  # the file is written and the journal starts
    assert store.journal.open

    def persisted(topics: range, size: int) -> tuple[int, bytes]:
        with store.batch():
            for t in topics:
                for q in range(8):
                    _queue(store, f"T{t}", q, size)
        assert _reloaded(tmp_path) == store.document()
        return _journal_frames(store), store.path.read_bytes()

    frames, file = persisted(range(500), 100)  # 4,000 queues: 12,500 records, all new
    assert frames == 0 and parse_metadata(file.decode(), source="main") == store.document()
    assert persisted(range(175), 200) == (1, file)  # 4,375 records: under half, a frame
    assert persisted(range(300), 300)[0] == 0  # 7,500 records: over half, the file
    assert persisted(range(1), 400)[0] == 1  # 25 records


def test_random_changes_replay_to_the_same_document(tmp_path: Path) -> None:
    rng = random.Random(45)
    store = _store(tmp_path)
    for step in range(60):
        with store.batch():
            for _ in range(rng.randint(1, 6)):
                action = rng.random()
                topic, qid = f"T{rng.randint(0, 5)}", rng.randint(0, 3)
                path = f"broker-a/{topic}/{qid}"
                if action < 0.5:
                    _queue(store, topic, qid, rng.randint(0, 10_000))
                elif action < 0.65:
                    store.delete_queue(topic, qid)
                elif action < 0.8:
                    store.delete_segments(CL, path)
                elif action < 0.9:
                    store.delete_segment(CQ, path, 0)
                else:
                    store.delete_topic(topic)
        assert read_metadata(tmp_path)[0] == store.document(), step
    assert _reloaded(tmp_path) == store.document()
    assert store.compact()
    assert _journal_frames(store) == 0
    assert parse_metadata(store.path.read_text("utf-8"), source="main") == store.document()


def test_a_small_file_is_rewritten_whole_and_has_no_journal(tmp_path: Path) -> None:
    store = _store(tmp_path, min_bytes=store_module.JOURNAL_MIN_BYTES)
    _wide(store, 2)
    assert not store.journal.path.exists()
    before = store.path.read_bytes()
    _queue(store, "T0", 0, 77)
    assert store.path.read_bytes() != before
    assert store.bak_path.exists()
    assert not store.compact()  # nothing to compact


def test_the_journal_is_compacted_once_it_is_as_large_as_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "COMPACT_MIN_BYTES", 0)
    store = _store(tmp_path)
    _wide(store, 4)
    snapshot = store.path.read_bytes()
    writes = 0
    while store.path.read_bytes() == snapshot:
        _queue(store, "T1", 1, 1000 + writes)
        writes += 1
    assert writes > 3  # the journal took several persists first
    assert _journal_frames(store) == 0
    assert parse_metadata(store.path.read_text("utf-8"), source="main") == store.document()
    assert store.bak_path.read_bytes() == snapshot


def test_a_torn_tail_is_dropped_and_appends_go_on(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _wide(store, 2)
    _queue(store, "T0", 0, 111)
    good = store.document()
    frame = encode_frame(b'{"set":{}}')
    with store.journal.path.open("ab") as f:
        f.write(frame[: len(frame) // 2])  # a persist cut short by a crash
    assert read_metadata(tmp_path)[0] == good

    again = MetadataStore(tmp_path, journal_min_bytes=0)
    again.load()
    assert again.document() == good
    assert again.journal.path.stat().st_size == again.journal.size  # the tail was cut off
    _queue(again, "T1", 1, 222)
    assert _reloaded(tmp_path) == again.document()
    assert _reloaded(tmp_path).queue_metadata_table["T1"][1].max_offset == 222


def test_a_frame_that_is_not_a_change_ends_the_replay(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _wide(store, 1)
    _queue(store, "T0", 0, 5)
    good = store.document()
    with store.journal.path.open("ab") as f:
        f.write(encode_frame(b'{"not":"a change"}'))
    again = MetadataStore(tmp_path, journal_min_bytes=0)
    again.load()
    assert again.document() == good
    _queue(again, "T0", 1, 6)  # appended after the good frames, so a reader sees it
    assert read_metadata(tmp_path)[0] == again.document()


class _CrashError(Exception):
    pass


@pytest.mark.parametrize("step", ["tmp-written", "bak-kept", "renamed"])
def test_a_crash_at_each_step_of_a_compaction_loses_nothing(tmp_path: Path, step: str) -> None:
    store = _store(tmp_path)
    _wide(store, 3)
    _queue(store, "T2", 2, 999)
    expected = store.document()

    def hook(name: str) -> None:
        if name == step:
            raise _CrashError(name)

    store._file.step_hook = hook  # the compaction's file write stops there, as a crash would
    with pytest.raises(_CrashError):
        store.compact()
    store.journal.close()
    assert read_metadata(tmp_path)[0] == expected
    again = MetadataStore(tmp_path, journal_min_bytes=0)
    report = again.load()
    assert report.used == "main" and report.problems == []
    assert again.document() == expected
    _queue(again, "T0", 0, 1)
    assert _reloaded(tmp_path) == again.document()


def test_a_journal_of_another_file_is_set_aside_not_replayed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _wide(store, 2)
    _queue(store, "T0", 0, 321)
    store.journal.close()
    replaced = MetadataDocument()  # e.g. the Java plugin's file copied in by hand
    store.path.write_text(dump_metadata(replaced), "utf-8")
    assert read_metadata(tmp_path)[0] == replaced
    again = MetadataStore(tmp_path, journal_min_bytes=0)
    again.load()
    assert again.document() == replaced
    assert list(tmp_path.joinpath("config").glob(JOURNAL_NAME + ".stale-*"))


def test_a_damaged_file_replays_its_journal_onto_the_backup(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _wide(store, 2)
    assert store.compact() is False
    _queue(store, "T0", 0, 5)
    store.compact()  # .bak: the first snapshot; main: the compacted one
    _queue(store, "T1", 3, 4444)  # journal frame extending main
    store.journal.close()
    store.path.write_bytes(b"{ torn")
    again = MetadataStore(tmp_path, journal_min_bytes=0)
    report = again.load()
    assert report.used == "bak"
    assert any("replayed 1 journal changes" in p for p in report.problems)
    assert again.document().queue_metadata_table["T1"][3].max_offset == 4444
    assert _reloaded(tmp_path) == again.document()  # written whole at once


def test_the_mirror_gets_chunks_and_recovery_replays_them(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    store = _store(tmp_path / "a", mirror=mirror, mirror_key=KEY)
    _wide(store, 3)
    snapshot_puts = mirror.read(KEY, 0, mirror.size(KEY))
    for n in range(3):
        _queue(store, "T0", n, 100 + n)
    prefix = chunk_prefix(KEY)
    chunks = sorted(k for k in mirror.list(prefix) if not k.endswith("/snapshot"))
    assert len(chunks) == 3 and mirror.read(KEY, 0, mirror.size(KEY)) == snapshot_puts
    doc, _, frames = read_mirror(mirror, KEY)
    assert frames == 3
    assert doc == store.document()

    recovered = MetadataStore.recover_from_mirror(tmp_path / "b", mirror, KEY, journal_min_bytes=0)
    assert recovered.document() == store.document()

    store.compact()  # a new snapshot: its anchor, and the older chunks deleted
    left = list(mirror.list(prefix))
    assert len(left) == 1 and left[0].endswith("/snapshot")
    assert read_mirror(mirror, KEY)[0] == store.document()


class _Puts(MemoryProvider):
    def __init__(self) -> None:
        super().__init__()
        self.puts: list[str] = []

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        self.puts.append(key)
        super().put(key, data, overwrite)


def test_a_start_after_a_compaction_puts_no_snapshot_the_mirror_holds(tmp_path: Path) -> None:
    mirror = _Puts()
    store = _store(tmp_path, mirror=mirror, mirror_key=KEY)
    _wide(store, 3)
    _queue(store, "T0", 0, 100)
    store.compact()
    mirror.puts.clear()
    again = _store(tmp_path, mirror=mirror, mirror_key=KEY)
    with again.batch():
        pass
    assert mirror.puts == [] and again._mirror_snapshot is None  # nothing to put, nothing held
    _queue(again, "T0", 1, 200)  # the next change goes to the mirror as a chunk of it
    assert mirror.puts and all(k.startswith(chunk_prefix(KEY)) for k in mirror.puts)
    assert read_mirror(mirror, KEY)[0] == again.document()
    mirror.delete(next(k for k in mirror.list(chunk_prefix(KEY)) if k.endswith("/snapshot")))
    third = _store(tmp_path, mirror=mirror, mirror_key=KEY)
    with third.batch():  # an anchor missing: the snapshot is put again
        pass
    assert KEY in mirror.puts


def test_spaced_mirror_puts_one_chunk_for_many_persists(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    store = _store(tmp_path, mirror=mirror, mirror_key=KEY)
    _wide(store, 2)
    with store.mirror_spaced(3600.0):
        store.persist()  # a put is due the first time
        for n in range(5):
            _queue(store, "T1", 0, n)
    puts = [k for k in mirror.list(chunk_prefix(KEY)) if not k.endswith("/snapshot")]
    assert len(puts) <= 1
    store.journal.close()
    assert read_mirror(mirror, KEY)[0] != store.document()  # the last puts wait for their time
    with store.mirror_spaced(0.0):
        pass
    assert read_mirror(mirror, KEY)[0] == store.document()


def test_decode_stops_at_damage() -> None:
    frames = [b"one", b"two", b"three"]
    raw = b"".join(encode_frame(f) for f in frames)
    assert journal_module.decode_frames(raw) == (frames, len(raw))
    damaged = bytearray(raw)
    damaged[len(encode_frame(b"one")) + 9] ^= 1
    assert journal_module.decode_frames(bytes(damaged))[0] == [b"one"]
