from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tiered.broker import message as m
from tiered.broker.commitlog import CommitLog
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError

FILE_SIZE = 4096


def _unit(qoff: int, phys: int, body: bytes = b"x" * 100) -> bytes:
    return m.encode(
        topic="T",
        queue_id=0,
        queue_offset=qoff,
        physical_offset=phys,
        body=body,
        properties={"KEYS": f"k{qoff}"},
        born_timestamp=1,
        store_timestamp=1000 + qoff,
    )


def _write_store(d: Path, count: int) -> list[tuple[int, int]]:
    """Units in FILE_SIZE files with BLANK rolls, as the broker writes; returns (phys, size)."""
    d.mkdir(parents=True, exist_ok=True)
    placed: list[tuple[int, int]] = []
    files: dict[int, bytearray] = {}
    off = 0
    for q in range(count):
        size = len(_unit(q, 0))
        base = off - off % FILE_SIZE
        if size + 8 > base + FILE_SIZE - off:
            files.setdefault(base, bytearray(FILE_SIZE))[off - base : off - base + 8] = (
                m.blank_unit(base + FILE_SIZE - off)
            )
            off = base + FILE_SIZE
            base = off
        buf = files.setdefault(base, bytearray(FILE_SIZE))
        buf[off - base : off - base + size] = _unit(q, off)
        placed.append((off, size))
        off += size
    for base, buf in files.items():
        (d / f"{base:020d}").write_bytes(bytes(buf))
    return placed


def test_real_commitlogs_parse_with_good_crcs(real_data: Path) -> None:
    files = sorted(real_data.rglob("commitlog/*"))
    assert len(files) >= 8
    total = 0
    for f in files:
        base = int(f.name)
        items = list(scan_file(f))
        assert items[-1].kind in ("blank", "end"), (f, items[-1])
        for it in items[:-1]:
            assert it.kind == "message" and it.message is not None
            assert it.message.crc_ok, (f, it.position)
            assert it.message.physical_offset == base + it.position
            assert it.message.topic == "abc"
            total += 1
    assert total == 320


def test_real_store_reads_by_offset(real_data: Path) -> None:
    d = real_data / "EricPanGopher__rocketmq/store/unit_test_store/commitlog"
    log = CommitLog(d, 8192)
    assert log.min_offset == 0
    msgs = [it for f in log.files for it in scan_file(f.path) if it.kind == "message"]
    offs = np.array([it.offset for it in msgs], dtype=np.int64)
    sizes = np.array([it.size for it in msgs], dtype=np.int64)
    bulk = log.read_many(offs, sizes)
    # contiguous within each of the 4 data files: exactly one read per file
    assert bulk.ranges == 4
    for i, it in enumerate(msgs):
        assert it.message is not None
        assert m.decode(bulk.view(i)) == it.message
        assert log.read_message(it.offset) == it.message


def test_scan_reports_blank_and_zero_tail(tmp_path: Path) -> None:
    placed = _write_store(tmp_path, 60)
    files = list_files([tmp_path])
    assert len(files) >= 2
    first = list(scan_file(files[0].path))
    assert first[-1].kind == "blank"
    assert first[-1].position + first[-1].size == FILE_SIZE
    last = list(scan_file(files[-1].path))
    assert last[-1].kind == "end" and last[-1].reason == "zero-filled tail"
    seen = [it.offset for f in files for it in scan_file(f.path) if it.kind == "message"]
    assert seen == [p for p, _ in placed]


def test_scan_stops_at_garbage_with_its_offset(tmp_path: Path) -> None:
    _write_store(tmp_path, 5)
    f = tmp_path / f"{0:020d}"
    raw = bytearray(f.read_bytes())
    at = 2 * len(_unit(0, 0))
    raw[at + 4 : at + 8] = b"\xde\xad\xbe\xef"
    f.write_bytes(bytes(raw))
    items = list(scan_file(f))
    assert [it.kind for it in items] == ["message", "message", "corrupt"]
    assert items[-1].offset == at and "bad magic code 0xdeadbeef" in items[-1].reason


def test_scan_flags_a_truncated_last_unit(tmp_path: Path) -> None:
    _write_store(tmp_path, 3)
    f = tmp_path / f"{0:020d}"
    size = len(_unit(0, 0))
    f.write_bytes(f.read_bytes()[: 2 * size + 50])
    items = list(scan_file(f))
    assert items[-1].kind == "corrupt" and items[-1].offset == 2 * size


def test_read_many_preserves_request_order_and_counts_ranges(tmp_path: Path) -> None:
    placed = _write_store(tmp_path, 80)
    log = CommitLog(tmp_path, FILE_SIZE)
    rng = np.random.default_rng(3)
    pick = rng.permutation(len(placed))[:40]
    offs = np.array([placed[i][0] for i in pick], dtype=np.int64)
    sizes = np.array([placed[i][1] for i in pick], dtype=np.int64)
    bulk = log.read_many(offs, sizes)
    for j, i in enumerate(pick):
        assert m.decode(bulk.view(j)).queue_offset == i
    everything = log.read_many(
        np.array([p for p, _ in placed], dtype=np.int64),
        np.array([s for _, s in placed], dtype=np.int64),
    )
    assert everything.ranges == len(log.files)


def test_read_spans_file_boundaries(tmp_path: Path) -> None:
    _write_store(tmp_path, 60)
    log = CommitLog(tmp_path, FILE_SIZE)
    whole = b"".join(f.path.read_bytes() for f in log.files)
    assert log.read(FILE_SIZE - 10, 30) == whole[FILE_SIZE - 10 : FILE_SIZE + 20]


def test_offsets_outside_the_store_are_named(tmp_path: Path) -> None:
    _write_store(tmp_path, 10)
    log = CommitLog(tmp_path, FILE_SIZE)
    with pytest.raises(OffsetNotInStoreError, match="physical offset 999999"):
        log.read(999999, 10)
    (tmp_path / f"{0:020d}").unlink()  # the broker deleted it under us
    with pytest.raises(Exception, match="disappeared"):
        log.read(0, 10)
    log.refresh()
    assert log.min_offset == -1


def test_duplicate_file_in_two_dirs_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _write_store(a, 2)
    _write_store(b, 2)
    with pytest.raises(CorruptStoreFileError, match="exists in both"):
        CommitLog([a, b], FILE_SIZE)


def test_reader_never_writes(tmp_path: Path) -> None:
    placed = _write_store(tmp_path, 30)
    for f in tmp_path.iterdir():
        f.chmod(0o444)
    tmp_path.chmod(0o555)
    try:
        before = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in tmp_path.iterdir()}
        log = CommitLog(tmp_path, FILE_SIZE)
        log.read_many(
            np.array([p for p, _ in placed], dtype=np.int64),
            np.array([s for _, s in placed], dtype=np.int64),
        )
        for clf in log.files:
            list(scan_file(clf.path))
        after = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in tmp_path.iterdir()}
        assert before == after
    finally:
        tmp_path.chmod(0o755)
        for f in tmp_path.iterdir():
            os.chmod(f, 0o644)
