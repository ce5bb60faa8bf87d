"""The broker IndexFile: bulk writer vs a put-by-put oracle, lookups, collisions, rollover."""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker.broker_index import INDEX_HEADER_SIZE
from tiered.broker.broker_index import IndexFile
from tiered.broker.broker_index import IndexHeader
from tiered.broker.broker_index import build_index_file
from tiered.broker.broker_index import index_file_name
from tiered.broker.broker_index import index_file_size
from tiered.broker.broker_index import key_hash_local
from tiered.broker.broker_index import key_hashes_local
from tiered.broker.broker_index import lookup_index_files
from tiered.broker.broker_index import rollover_bounds
from tiered.broker.broker_index import write_index_file
from tiered.broker.broker_index import write_index_files
from tiered.broker.javautil import java_string_hash
from tiered.errors import IndexFileError
from tiered.errors import StoreFileNotFoundError

T0 = 1_700_000_000_000


def oracle(
    entries: list[tuple[int, int, int]],
    slots: int,
    max_items: int,
    begin: int = 0,
    begin_phy: int = 0,
) -> bytes:
    """Java ``IndexFile.putKey`` one item at a time (the reference for the bulk writer)."""
    buf = bytearray(index_file_size(slots, max_items))
    end, end_phy, slot_count, count = begin, begin_phy, 0, 1
    for key_hash, phys, ts in entries:
        slot_at = INDEX_HEADER_SIZE + (key_hash % slots) * 4
        (slot_value,) = struct.unpack_from(">i", buf, slot_at)
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
        diff = abs(ts - begin) // 1000 * (-1 if ts < begin else 1)  # Java long division
        diff = 0 if begin <= 0 else min(max(diff, 0), 2**31 - 1)
        item_at = INDEX_HEADER_SIZE + slots * 4 + count * 20
        struct.pack_into(">iqii", buf, item_at, key_hash, phys, diff, slot_value)
        struct.pack_into(">i", buf, slot_at, count)
        if count <= 1:
            begin, begin_phy = ts, phys
        slot_count += slot_value == 0
        count += 1
        end, end_phy = ts, phys
    buf[:INDEX_HEADER_SIZE] = IndexHeader(
        begin, end, begin_phy, end_phy, slot_count, count
    ).encode()
    return bytes(buf)


def columns(entries: list[tuple[int, int, int]]) -> tuple[list[int], list[int], list[int]]:
    return [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]


# --- hashes and names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "key", "expected"),
    [
        ("TopicTest", "key1", 1655984460),
        ("TopicTest", "MessageKey", 638347386),
        ("TopicTest1", "MessageKey", 1160537419),
        ("StoreTest", "uk", 221212634),
        ("TopicTest", "", 1148604930),
        ("TopicTest", "中文键", 105098802),
        ("TopicTest", "ogaQmc", 0),  # hashCode is Integer.MIN_VALUE: local abs gives 0
    ],
)
def test_key_hash_local_v3(topic: str, key: str, expected: int) -> None:
    assert key_hash_local(topic, key) == expected
    assert key_hash_local(topic, key) % 5_000_000 == expected % 5_000_000


def test_min_value_key() -> None:
    assert java_string_hash("TopicTest#ogaQmc") == -(2**31)
    assert key_hashes_local([("TopicTest", "ogaQmc"), ("TopicTest", "key1")]).tolist() == [
        0,
        1655984460,
    ]


def test_names_and_sizes() -> None:
    assert index_file_name(1_700_000_000_123, dt.UTC) == "20231114221320123"
    assert (
        index_file_name(1_700_000_000_007, dt.timezone(dt.timedelta(hours=8)))
        == "20231115061320007"
    )
    assert len(index_file_name(T0)) == 17
    assert index_file_size() == 420_000_040
    assert rollover_bounds(10, 5) == [(0, 4), (4, 8), (8, 10)]
    assert rollover_bounds(0, 5) == []
    with pytest.raises(ValueError, match="max_items=1"):
        rollover_bounds(3, 1)


# --- writer vs oracle ----------------------------------------------------------------------------

ENTRY = st.tuples(
    st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(T0 - 10_000, T0 + 10**7)
)


@settings(max_examples=60)
@given(
    st.lists(ENTRY, max_size=40),
    st.integers(1, 13),
    st.sampled_from([0, T0 - 5000, T0 + 5000]),
    st.integers(0, 2**40),
)
def test_bulk_writer_matches_put_by_put(
    entries: list[tuple[int, int, int]], slots: int, prev_end: int, prev_phy: int
) -> None:
    expected = oracle(entries, slots, 41, prev_end, prev_phy)
    got = build_index_file(
        *columns(entries),
        slots=slots,
        max_items=41,
        prev_end_timestamp=prev_end,
        prev_end_phy_offset=prev_phy,
    )
    assert got == expected


def test_v6_like_chain() -> None:
    entries = [(2746024, 0, T0 + 1500), (2746025, 100, T0 + 2500), (2746024, 220, T0 + 3999)]
    raw = build_index_file(*columns(entries), slots=5, max_items=20, prev_end_timestamp=T0)
    header = IndexHeader(*struct.unpack_from(">qqqqii", raw))
    assert header == IndexHeader(T0 + 1500, T0 + 3999, 0, 220, 2, 4)
    slots = struct.unpack_from(">5i", raw, INDEX_HEADER_SIZE)
    assert slots == (2, 0, 0, 0, 3)
    items = [struct.unpack_from(">iqii", raw, 60 + i * 20) for i in range(1, 4)]
    assert items == [(2746024, 0, 1, 0), (2746025, 100, 1, 0), (2746024, 220, 2, 1)]


# --- lookups -------------------------------------------------------------------------------------


def test_every_key_is_found(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 600
    keys = [("TopicA", f"k{i % 250}") for i in range(n)] + [("TopicTest", "ogaQmc")]
    phys = np.arange(len(keys), dtype=np.int64) * 173
    ts = T0 + np.sort(rng.integers(0, 3_600_000, len(keys)))
    hashes = key_hashes_local(keys)
    path = tmp_path / "idx"
    header = write_index_file(path, hashes, phys, ts, slots=97, max_items=1000)
    assert header.index_count == len(keys) + 1
    assert header.hash_slot_count == len({h % 97 for h in hashes.tolist()})
    assert path.stat().st_size == index_file_size(97, 1000)
    with IndexFile.open(path, slots=97) as f:
        assert f.header == header
        assert f.max_items == 1000
        assert len(f.items()) == len(keys)
        for topic, key in set(keys):
            want = [int(phys[i]) for i in range(len(keys) - 1, -1, -1) if keys[i] == (topic, key)]
            hits = f.lookup(topic, key)
            assert [h.phys_offset for h in hits] == want, key
        assert [h.phys_offset for h in f.lookup("TopicTest", "ogaQmc")] == [int(phys[-1])]
        assert f.slot_table()[0] == len(keys)  # hash 0 lives in slot 0
        assert f.lookup("TopicA", "absent") == []
        assert f.lookup("TopicB", "k1") == []


def test_collisions_in_one_slot(tmp_path: Path) -> None:
    slots = 7
    by_slot: dict[int, list[str]] = {}
    i = 0
    while not any(len(v) >= 2 for v in by_slot.values()):
        by_slot.setdefault(key_hash_local("T", f"c{i}") % slots, []).append(f"c{i}")
        i += 1
    a, b = next(v for v in by_slot.values() if len(v) >= 2)[:2]
    assert key_hash_local("T", a) != key_hash_local("T", b)
    keys = [("T", a), ("T", b), ("T", a), ("T", b), ("T", b)]
    path = tmp_path / "idx"
    write_index_file(
        path, key_hashes_local(keys), [10, 20, 30, 40, 50], [T0] * 5, slots=slots, max_items=8
    )
    with IndexFile.open(path, slots=slots) as f:
        assert f.header.hash_slot_count == 1
        assert [h.phys_offset for h in f.lookup("T", a)] == [30, 10]
        assert [h.phys_offset for h in f.lookup("T", b)] == [50, 40, 20]
        assert [h.item for h in f.lookup("T", b)] == [5, 4, 2]
        assert [h.phys_offset for h in f.lookup("T", b, max_num=2)] == [50, 40]


def test_time_range(tmp_path: Path) -> None:
    ts = [T0, T0 + 1_000, T0 + 2_500, T0 + 60_000, T0 + 61_999]
    path = tmp_path / "idx"
    write_index_file(
        path, [key_hash_local("T", "k")] * 5, [1, 2, 3, 4, 5], ts, slots=3, max_items=10
    )
    with IndexFile.open(path, slots=3) as f:
        stored = [h.store_timestamp for h in f.lookup("T", "k")]
        assert stored == [T0 + 61_000, T0 + 60_000, T0 + 2_000, T0 + 1_000, T0]  # second precision
        assert [h.phys_offset for h in f.lookup("T", "k", T0 + 1_000, T0 + 60_000)] == [4, 3, 2]
        assert [h.phys_offset for h in f.lookup("T", "k", T0 + 60_500)] == [5]
        assert f.lookup("T", "k", 0, T0 - 1) == []
        assert f.is_time_matched(T0 - 10, T0)
        assert f.is_time_matched(0, 2**63 - 1)
        assert not f.is_time_matched(T0 + 62_000, T0 + 99_000)


def test_rollover_files(tmp_path: Path) -> None:
    n = 10
    keys = [("T", f"k{i % 3}") for i in range(n)]
    ts = [T0 + i * 1000 for i in range(n)]
    written = write_index_files(
        tmp_path / "index",
        key_hashes_local(keys),
        range(100, 100 + n),
        ts,
        slots=5,
        max_items=5,
        tz=dt.UTC,
    )
    assert [p.name for p, _ in written] == [
        index_file_name(T0, dt.UTC),
        index_file_name(T0 + 4000, dt.UTC),
        index_file_name(T0 + 8000, dt.UTC),
    ]
    assert [h.index_count for _, h in written] == [5, 5, 3]
    second = written[1][1]
    assert (second.begin_timestamp, second.begin_phy_offset) == (T0 + 4000, 104)
    raw = written[1][0].read_bytes()
    first_item = struct.unpack_from(">iqii", raw, INDEX_HEADER_SIZE + 5 * 4 + 20)
    assert first_item[2] == 1  # measured from the previous file's end (T0 + 3000)
    paths = [p for p, _ in written]
    hits = lookup_index_files(paths, "T", "k1", slots=5)
    assert [h.phys_offset for h in hits] == [107, 104, 101]
    assert [h.phys_offset for h in lookup_index_files(paths, "T", "k1", T0 + 4000, slots=5)] == [
        107,
        104,
    ]
    assert len(lookup_index_files(paths, "T", "k1", slots=5, max_num=2)) == 2
    again = write_index_files(tmp_path / "index", [1], [5], [T0], slots=5, max_items=5, tz=dt.UTC)
    assert again[0][0].name == index_file_name(T0 + 1, dt.UTC)  # the name was taken


def test_empty_file(tmp_path: Path) -> None:
    raw = build_index_file(
        [], [], [], slots=4, max_items=4, prev_end_timestamp=T0, prev_end_phy_offset=9
    )
    assert IndexHeader(*struct.unpack_from(">qqqqii", raw)) == IndexHeader(T0, T0, 9, 9, 0, 1)
    (tmp_path / "e").write_bytes(raw)
    with IndexFile.open(tmp_path / "e", slots=4) as f:
        assert f.lookup("T", "k") == []
        assert len(f.items()) == 0


# --- bad input ----------------------------------------------------------------------------------


def test_writer_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exceed one file"):
        build_index_file([1] * 5, [1] * 5, [T0] * 5, slots=3, max_items=5)
    with pytest.raises(ValueError, match="key_hash_local"):
        build_index_file([-1], [1], [T0], slots=3, max_items=5)
    with pytest.raises(ValueError, match="equally long"):
        build_index_file([1, 2], [1], [T0], slots=3, max_items=5)
    with pytest.raises(ValueError, match="key_hash_local"):
        write_index_file(tmp_path / "x", [-1], [1], [T0], slots=3, max_items=5)
    assert not (tmp_path / "x").exists()  # refused before a byte is written
    write_index_file(tmp_path / "x", [1], [1], [T0], slots=3, max_items=5)
    with pytest.raises(FileExistsError):
        write_index_file(tmp_path / "x", [1], [1], [T0], slots=3, max_items=5)


def test_reader_rejects_bad_files(tmp_path: Path) -> None:
    with pytest.raises(StoreFileNotFoundError, match="no such index file"):
        IndexFile.open(tmp_path / "missing", slots=3)
    path = tmp_path / "idx"
    path.write_bytes(build_index_file([5, 5], [1, 2], [T0, T0], slots=3, max_items=5))
    with pytest.raises(IndexFileError, match="maxHashSlotNum=4"):
        IndexFile.open(path, slots=4)
    with pytest.raises(IndexFileError, match="does not fit"):
        IndexFile.open(path)  # the default 5,000,000 slots
    raw = bytearray(path.read_bytes())
    struct.pack_into(">i", raw, 36, 99)  # indexCount beyond capacity
    (tmp_path / "big").write_bytes(raw)
    with pytest.raises(IndexFileError, match="indexCount 99"):
        IndexFile.open(tmp_path / "big", slots=3)
    h = key_hash_local("T", "k")
    path.write_bytes(build_index_file([h, h], [1, 2], [T0, T0], slots=3, max_items=5))
    raw = bytearray(path.read_bytes())
    struct.pack_into(">i", raw, INDEX_HEADER_SIZE + 3 * 4 + 20 + 16, 2)  # item 1 -> 2 -> 1 ...
    (tmp_path / "loop").write_bytes(raw)
    with (
        IndexFile.open(tmp_path / "loop", slots=3) as f,
        pytest.raises(IndexFileError, match="loops"),
    ):
        f.lookup("T", "k")
