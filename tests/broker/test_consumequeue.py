"""Consume queue and ConsumeQueueExt readers against real broker files and hand-made queues."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered.broker import consumequeue as cqmod
from tiered.broker import message
from tiered.broker.consumequeue import BLANK_FILL_SIZE
from tiered.broker.consumequeue import CQ_UNIT_DTYPE
from tiered.broker.consumequeue import ConsumeQueue
from tiered.broker.consumequeue import ConsumeQueueExt
from tiered.broker.consumequeue import decode_units
from tiered.broker.consumequeue import effective_cq_file_size
from tiered.broker.consumequeue import encode_units
from tiered.broker.consumequeue import ext_offsets
from tiered.broker.consumequeue import first_invalid
from tiered.broker.consumequeue import is_blank_unit
from tiered.broker.consumequeue import is_ext_tags_code
from tiered.broker.consumequeue import list_queues
from tiered.broker.consumequeue import valid_mask
from tiered.broker.javautil import tags_code
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.errors import StoreFileNotFoundError

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "real"
UNIT_STORE = "EricPanGopher__rocketmq/store/unit_test_store"
I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)


def real() -> Path:
    if not REAL.is_dir():
        pytest.fail(f"{REAL} is missing: the shared test data must sit beside the repo (../shared)")
    return REAL


def unit_store() -> Path:
    return real() / UNIT_STORE


def make_queue(root: Path, units_per_file: int, files: dict[int, bytes]) -> ConsumeQueue:
    """Queue dir with files {first queue offset: content}; content is padded to the file size."""
    d = root / "consumequeue" / "T" / "0"
    d.mkdir(parents=True)
    size = units_per_file * 20
    for first, content in files.items():
        (d / f"{first * 20:020d}").write_bytes(content.ljust(size, b"\0"))
    return ConsumeQueue(d, size)


def seq_units(first_phys: int, n: int, size: int = 100) -> bytes:
    phys = first_phys + np.arange(n, dtype=np.int64) * size
    return encode_units(phys, np.full(n, size), np.arange(n))


# --- real files ---------------------------------------------------------------------------------


def test_every_real_consumequeue_file_parses() -> None:
    paths = [
        p
        for p in real().rglob("*")
        if p.is_file()
        and "consumequeue" in p.parts
        and p.parent.parent.parent.name == "consumequeue"
    ]
    assert len(paths) >= 6
    for p in paths:
        units = decode_units(p.read_bytes(), path=p)
        assert len(units) == p.stat().st_size // 20
        end = first_invalid(units)
        assert valid_mask(units[:end]).all()
        assert not valid_mask(units[end:]).any()  # written data is a prefix, the rest zeros
        assert (units["tags_code"][end:] == 0).all()


def test_real_queue_offsets_and_units() -> None:
    cq = ConsumeQueue.for_queue(unit_store() / "consumequeue", "abc", 0, file_size=200)
    assert [f.start for f in cq.files()] == [0, 200, 400, 600, 800, 1000]
    assert cq.max_offset() == 56
    assert cq.max_offset(hint=50) == 56
    assert cq.max_offset(hint=56) == 56
    assert cq.min_offset() == 0
    assert cq.min_offset(commitlog_min_offset=0) == 0
    assert cq.min_offset(commitlog_min_offset=1720) == 10  # first unit of the 2nd file
    assert cq.min_offset(commitlog_min_offset=1721) == 11
    assert cq.min_offset(commitlog_min_offset=10**9) == 56  # nothing readable: min == max
    units = cq.read_units(0, 1000)
    assert len(units) == 56
    assert (units["size"] == 172).all()
    assert is_ext_tags_code(units["tags_code"]).all()
    assert np.array_equal(cq.read_units(7, 9), units[7:16])  # spans the first two files
    assert np.array_equal(cq.read_units(50, 100), units[50:])
    assert len(cq.read_units(56, 10)) == 0
    assert len(cq.read_units(10_000, 10)) == 0


def test_real_units_point_at_their_commitlog_messages() -> None:
    store = unit_store()
    cq = ConsumeQueue(store / "consumequeue" / "abc" / "0", 200)
    ext = ConsumeQueueExt(store / "consumequeue_ext" / "abc" / "0", file_size=840)
    units = cq.read_units(0, 1000)
    tags, store_times = ext.lookup(units["tags_code"])
    assert np.array_equal(ext.resolve_tags_codes(units["tags_code"]), tags)
    commitlog = {int(p.name): p.read_bytes() for p in (store / "commitlog").iterdir()}
    for q, (phys, size, _) in enumerate(units.tolist()):
        buf = commitlog[phys - phys % 8192]
        m = message.decode(buf, phys % 8192)
        assert (m.total_size, m.queue_offset, m.physical_offset) == (size, q, phys)
        assert (m.topic, m.queue_id) == ("abc", 0)
        assert tags[q] == tags_code(m.tags) == 2567159  # "TAG1"
        assert store_times[q] == m.store_timestamp


def test_real_consumequeue_ext_files() -> None:
    ext = ConsumeQueueExt(unit_store() / "consumequeue_ext" / "abc" / "0", file_size=840)
    scanned = ext.scan()
    assert len(scanned) == 41 + 15
    assert scanned[0][0] == -(2**63)
    assert scanned[41][0] == -(2**63) + 840  # second file, after the -1 "filled to end" mark
    assert all(u.size == 20 and u.filter_bit_map == b"" for _, u in scanned)
    address, unit = scanned[20]
    assert ext.get(address) == unit
    assert unit.tags_code == 2567159
    with pytest.raises(CorruptStoreFileError, match="no ext unit at offset 820"):
        ext.get(-(2**63) + 820)
    with pytest.raises(CorruptStoreFileError, match="unwritten ext data"):
        ext.lookup([-(2**63) + 840 + 300])
    with pytest.raises(OffsetNotInStoreError, match="missing file 00000000000000001680"):
        ext.lookup([-(2**63) + 1700])


def test_real_queue_with_the_default_file_size_is_refused() -> None:
    cq = ConsumeQueue(unit_store() / "consumequeue" / "abc" / "0")
    with pytest.raises(CorruptStoreFileError, match=r"00000000000000000000: size 200 .*6000000"):
        cq.max_offset()


def test_list_queues(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert list_queues(unit_store() / "consumequeue") == [("abc", 0)]
    root = tmp_path / "consumequeue"
    for rel in ["TopicA/0", "TopicA/3", "TopicA/12", "%RETRY%g/0", "TopicA/x", "TopicA/01"]:
        (root / rel).mkdir(parents=True)
    (root / "TopicA" / "7").write_bytes(b"")  # a file, not a directory
    (root / "stray").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        assert list_queues(root) == [("%RETRY%g", 0), ("TopicA", 0), ("TopicA", 3), ("TopicA", 12)]
    for skipped in ("'x'", "'01'", "'7'", "'stray'"):
        assert skipped in caplog.text
    with pytest.raises(StoreFileNotFoundError, match="no consumequeue directory"):
        list_queues(tmp_path / "nope")


# --- codec ----------------------------------------------------------------------------------------


def test_v5_unit_bytes() -> None:
    raw = encode_units([1073741952], [181], [tags_code("TagA")])
    assert raw.hex() == "0000000040000080000000b5000000000027a807"
    neg = encode_units([0], [1], [-1655984460])
    assert neg.hex()[-16:] == "ffffffff9d4baeb4"
    assert decode_units(raw).tolist() == [(1073741952, 181, 2598919)]


@given(st.lists(st.tuples(I64, I32, I64), max_size=50))
def test_encode_decode_round_trip(rows: list[tuple[int, int, int]]) -> None:
    raw = encode_units([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    assert len(raw) == 20 * len(rows)
    assert decode_units(raw).tolist() == rows


def test_encode_rejects_ragged_columns() -> None:
    with pytest.raises(ValueError, match="equally long"):
        encode_units([1, 2], [3], [4, 5])
    with pytest.raises(ValueError, match="32-bit"):
        encode_units([1], [2**31], [0])


def test_decode_rejects_partial_units() -> None:
    with pytest.raises(CorruptStoreFileError, match="41 bytes is not a whole number"):
        decode_units(bytes(41))


def test_ext_tags_code_boundary() -> None:
    codes = np.array([0, 2598919, -1, -(2**31), -(2**31) - 1, -(2**63), -(2**63) + 840])
    assert is_ext_tags_code(codes).tolist() == [False, False, False, False, True, True, True]
    assert ext_offsets([-(2**63), -(2**63) + 840, -(2**31) - 1]).tolist() == [
        0,
        840,
        2**63 - 2**31 - 1,
    ]


def test_effective_file_size_rounds_up() -> None:
    assert effective_cq_file_size(6_000_000) == 6_000_000
    assert effective_cq_file_size(199) == 200
    assert ConsumeQueue("x", 190).units_per_file == 10
    with pytest.raises(ValueError, match="mappedFileSizeConsumeQueue=0"):
        effective_cq_file_size(0)


# --- hand-made queues ------------------------------------------------------------------------


def test_min_offset_reads_one_unit_when_the_first_qualifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usual min (a file's first unit is readable) costs one 20-byte read, not the whole
    file: asked every second per queue a consumer reads, a 6 MB file read each time showed in
    replay profiles."""
    cq = make_queue(tmp_path, 1000, {0: seq_units(500, 1000)})
    reads: list[int] = []
    real_pread = cqmod._pread

    def counting(path: Path, length: int, position: int) -> bytes:
        reads.append(length)
        return real_pread(path, length, position)

    monkeypatch.setattr(cqmod, "_pread", counting)
    assert cq.min_offset(commitlog_min_offset=500) == 0
    assert reads == [20]
    reads.clear()
    assert cq.min_offset(commitlog_min_offset=501) == 1  # below the commitlog min: searched
    assert reads == [20, 20_000]


def test_min_offset_of_a_queue_being_written_is_not_a_later_max(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new queue's file exists, but the broker has not yet written its first unit when the
    file is read. Its min is 0, where the written data ends as that read saw it, even when the
    broker writes unit 0 before a second read: a min taken from that later read (1) made the
    sidecar offload a new queue from offset 1 and never hold its first message."""
    cq = make_queue(tmp_path, 5, {0: b""})
    path = cq.files()[0].path
    real_pread = cqmod._pread

    def broker_writes_between(p: Path, length: int, position: int) -> bytes:
        data = real_pread(p, length, position)
        if length == 100:  # the whole file was read: now the broker writes unit 0
            with open(path, "r+b") as f:
                f.write(seq_units(0, 1))
        return data

    monkeypatch.setattr(cqmod, "_pread", broker_writes_between)
    assert cq.min_offset() == 0
    monkeypatch.setattr(cqmod, "_pread", real_pread)
    assert (cq.min_offset(), cq.max_offset()) == (0, 1)


def test_pre_blank_fill_is_below_the_min(tmp_path: Path) -> None:
    blank = encode_units([0] * 3, [BLANK_FILL_SIZE] * 3, [0] * 3)
    cq = make_queue(tmp_path, 10, {0: blank + seq_units(0, 7), 10: seq_units(700, 2)})
    units = cq.read_units(0, 100)
    assert is_blank_unit(units).tolist() == [True] * 3 + [False] * 9
    assert valid_mask(units).all()
    assert cq.min_offset() == 3  # the real data starts after the fill, even at commitlog offset 0
    assert cq.min_offset(commitlog_min_offset=0) == 3
    assert cq.min_offset(commitlog_min_offset=250) == 6
    assert cq.min_offset(commitlog_min_offset=700) == 10  # found in the second file
    assert cq.max_offset() == 12


def test_size_not_a_multiple_of_20(tmp_path: Path) -> None:
    cq = make_queue(tmp_path, 10, {0: seq_units(0, 10)})
    bad = cq.directory / f"{200:020d}"
    bad.write_bytes(bytes(199))
    with pytest.raises(
        CorruptStoreFileError, match=r"00000000000000000200: size 199 .*whole number"
    ) as e:
        cq.read_units(0, 1)
    assert e.value.path == str(bad)
    assert e.value.offset == 200
    bad.write_bytes(bytes(180))
    with pytest.raises(CorruptStoreFileError, match=r"size 180 .*not the configured size"):
        cq.max_offset()


def test_empty_last_file_and_stray_names_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cq = make_queue(tmp_path, 10, {0: seq_units(0, 10)})
    (cq.directory / f"{200:020d}").write_bytes(b"")  # being created by the broker
    (cq.directory / "00000000000000000400.tmp").write_bytes(b"junk")
    with caplog.at_level(logging.WARNING):
        assert [f.start for f in cq.files()] == [0]
    assert "00000000000000000400.tmp" in caplog.text
    assert cq.max_offset() == 10
    assert len(cq.read_units(0, 50)) == 10


def test_no_files(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "missing", 200)
    assert (cq.files(), cq.max_offset(), cq.min_offset(5)) == ([], 0, 0)
    assert cq.read_units(0, 10).dtype == CQ_UNIT_DTYPE
    assert len(cq.read_units(0, 10)) == 0


def test_deleted_and_missing_files(tmp_path: Path) -> None:
    cq = make_queue(
        tmp_path, 10, {10: seq_units(0, 10), 20: seq_units(1000, 10), 40: seq_units(3000, 5)}
    )
    with pytest.raises(OffsetNotInStoreError, match="below the first file"):
        cq.read_units(9, 1)
    assert cq.min_offset() == 10
    assert len(cq.read_units(15, 100)) == 15  # stops before the missing file 30
    with pytest.raises(OffsetNotInStoreError, match="missing file 00000000000000000600"):
        cq.read_units(30, 1)
    assert cq.max_offset() == 45


def test_read_units_one_read_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cq = make_queue(
        tmp_path, 10, {0: seq_units(0, 10), 10: seq_units(1000, 10), 20: seq_units(2000, 4)}
    )
    calls: list[tuple[int, int]] = []
    real_pread: Callable[[int, int, int], bytes] = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        calls.append((n, pos))
        return real_pread(fd, n, pos)

    monkeypatch.setattr(os, "pread", counting)
    units = cq.read_units(3, 1000)
    assert calls == [(140, 60), (200, 0), (200, 0)]
    assert units["offset"].tolist() == [
        *range(300, 1000, 100),
        *range(1000, 2000, 100),
        *range(2000, 2400, 100),
    ]


@pytest.mark.parametrize("valid", [0, 1, 4095, 4096, 4097, 20_000, 29_999, 30_000])
def test_max_offset_scan(tmp_path: Path, valid: int) -> None:
    cq = make_queue(tmp_path, 30_000, {30_000: seq_units(0, valid, 1)})
    assert cq.max_offset() == 30_000 + valid
    assert cq.max_offset(hint=30_000 + valid) == 30_000 + valid
    assert cq.max_offset(hint=30_000 + valid // 2) == 30_000 + valid
    assert cq.max_offset(hint=0) == 30_000 + valid
    got = cq.read_units(30_000, 50_000)
    assert len(got) == valid
