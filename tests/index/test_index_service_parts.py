"""The parts of the index service: keys found in stored units without decoding them, the indexed
offsets, the local file set (rolling, names, damaged files), read-only index files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker import message as msgcodec
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import scan_file
from tiered.broker.unit_fields import property_spans
from tiered.errors import IndexFileError
from tiered.index import IndexBatch
from tiered.index import IndexStoreFile
from tiered.index.bulk_keys import index_batch_of_units
from tiered.index.format import KeyQuery
from tiered.index.key_set import key_properties
from tiered.index.local_files import LocalIndexFiles
from tiered.index.progress import IndexProgress

T0 = 1_700_000_000_000


def units_of(store: Path) -> tuple[bytes, np.ndarray, np.ndarray, list[msgcodec.Message]]:
    """Every message of the store back to back, with starts, sizes and the decoded messages."""
    data = bytearray()
    starts, sizes, messages = [], [], []
    for f in list_files([store / "commitlog"]):
        raw = f.path.read_bytes()
        for item in scan_file(f.path, f.base):
            if item.kind == "message" and item.message is not None:
                starts.append(len(data))
                sizes.append(item.size)
                data += raw[item.position : item.position + item.size]
                messages.append(item.message)
    return bytes(data), np.array(starts, np.int64), np.array(sizes, np.int64), messages


def test_key_properties_match_the_decoder(index_store: Path) -> None:
    data, starts, sizes, messages = units_of(index_store)
    assert {m.version for m in messages} == {"v1", "v2"}
    assert any(m.sys_flag & msgcodec.BORNHOST_V6_FLAG for m in messages)
    uniq, keys = key_properties(data, starts, sizes)
    assert uniq == [m.properties.get(msgcodec.PROPERTY_UNIQ_KEY) for m in messages]
    assert keys == [m.properties.get(msgcodec.PROPERTY_KEYS) for m in messages]
    batch = index_batch_of_units("GenTopic0", 3, 1, data, starts, sizes, starts * 2, starts + T0)
    assert batch.messages == len(messages) and len(batch) == 3 * len(messages)


def test_units_with_inconsistent_lengths_are_not_indexed(index_store: Path) -> None:
    data, starts, sizes, _ = units_of(index_store)
    broken = bytearray(data)
    # the second unit's body length now overruns its TOTALSIZE
    body_at = int(starts[1]) + 84 + (12 if broken[int(starts[1]) + 39] & 0x10 else 0)
    body_at += 12 if broken[int(starts[1]) + 39] & 0x20 else 0
    struct.pack_into(">i", broken, body_at, 10**6)
    _, length = property_spans(broken, starts[:3], sizes[:3])
    assert length[1] == -1 and (length[[0, 2]] > 0).all()
    uniq, keys = key_properties(broken, starts[:3], sizes[:3])
    assert uniq[1] is None and keys[1] is None and uniq[0] and uniq[2]
    assert property_spans(b"", np.zeros(0, np.int64), np.zeros(0, np.int64))[0].size == 0


def test_progress_moves_over_contiguous_ranges_only(tmp_path: Path) -> None:
    p = IndexProgress(tmp_path)
    assert not p.load()
    assert p.advance("T", 0, 5, 10)  # a new queue starts where its first batch starts
    assert not p.advance("T", 0, 12, 20)  # a gap [10, 12) stays for the catch-up
    assert p.get("T", 0) == 10
    assert p.advance("T", 0, 10, 12) and p.advance("T", 0, 12, 20)
    assert p.advance("T", 0, 15, 18)  # indexed again: no move back
    assert p.get("T", 0) == 20
    assert p.set_default("T", 1, 7) == 7 and p.set_default("T", 1, 9) == 7
    p.save()
    assert not p.dirty
    q = IndexProgress(tmp_path)
    assert q.load() and q.items() == {("T", 0): 20, ("T", 1): 7}
    q.forget("T", 1)
    assert q.dirty and q.get("T", 1) is None
    p.path.write_text("{not json", "utf-8")
    assert not IndexProgress(tmp_path).load()
    p.path.write_text(json.dumps({"version": 99}), "utf-8")
    assert not IndexProgress(tmp_path).load()


def batch_of(n: int, keys: int = 1, start: int = 0) -> IndexBatch:
    rows = n * keys
    return IndexBatch.of_rows(
        np.arange(rows) * 7919 % 2**31,
        1,
        0,
        np.repeat(np.arange(start, start + n), keys) * 100,
        100,
        T0 + np.repeat(np.arange(n), keys),
        np.full(n, keys),
    )


def test_local_files_roll_with_rising_names_and_reopen(tmp_path: Path) -> None:
    clock = iter([T0, T0 - 5000, T0 - 5000, T0 + 1, T0 + 1, T0 + 1])
    files = LocalIndexFiles(tmp_path, slots=11, max_items=10, clock=lambda: next(clock))
    files.floor = T0 + 100  # uploaded files took begin timestamps up to here
    files.open()
    sealed = files.put(batch_of(20, keys=2))  # 4 messages per file (max_items - 1 = 9 items)
    assert [f.item_count for f in files.files] == [8, 8, 8, 8, 8]
    assert len(sealed) == 4 and all(f.status.value == "SEALED" for f in sealed)
    begins = [f.begin_timestamp for f in files.files]
    assert begins == sorted(begins) and len(set(begins)) == 5 and begins[0] == T0 + 101
    assert files.seal_current() is files.files[-1]
    assert files.seal_current() is None
    files.close()
    again = LocalIndexFiles(tmp_path, slots=11, max_items=10)
    assert again.open(uploaded={begins[0]}) == [begins[0]]
    assert [f.begin_timestamp for f in again.sealed()] == begins[1:]
    again.close()


def test_local_files_newest_continues_others_are_sealed(tmp_path: Path) -> None:
    for begin in (T0, T0 + 1):
        f = IndexStoreFile.create(tmp_path, begin, slots=11, max_items=50)
        f.put_many(batch_of(3))
        f.close()
    files = LocalIndexFiles(tmp_path, slots=11, max_items=50)
    files.open()
    assert [f.status.value for f in files.files] == ["SEALED", "UNSEALED"]
    assert files.current().begin_timestamp == T0 + 1
    files.put(batch_of(2, start=3))
    assert files.current().item_count == 5
    files.close()


def test_a_damaged_local_file_is_moved_aside(tmp_path: Path) -> None:
    f = IndexStoreFile.create(tmp_path, T0, slots=11, max_items=50)
    f.close()
    (tmp_path / str(T0 + 1)).write_bytes(b"garbage")
    files = LocalIndexFiles(tmp_path, slots=11, max_items=50, clock=lambda: 42)
    files.open()
    assert [f.begin_timestamp for f in files.files] == [T0]
    assert (tmp_path / f"{T0 + 1}.corrupt-42").exists()
    files.close()
    reader = LocalIndexFiles(tmp_path, slots=11, max_items=50, readonly=True)
    reader.open()
    with pytest.raises(IndexFileError, match="read-only"):
        reader.put(batch_of(1))
    reader.close()


def test_read_only_index_file(tmp_path: Path) -> None:
    f = IndexStoreFile.create(tmp_path, T0, slots=11, max_items=50)
    f.put_many(IndexBatch.for_queue("T", 1, 0, [0], [10], [T0], ["u1"], ["a b"]))
    f.flush()
    ro = IndexStoreFile.open(f.path, slots=11, max_items=50, readonly=True)
    assert ro.readonly and ro.item_count == 3
    assert [i.offset for i in ro.query(KeyQuery("T", "b", 0, 2**62, 5))] == [0]
    with pytest.raises(IndexFileError, match="read-only"):
        ro.put_many(batch_of(1))
    with pytest.raises(IndexFileError, match="read-only"):
        ro.seal()
    f.put_many(IndexBatch.for_queue("T", 1, 0, [10], [10], [T0], ["u2"], ["c"]))
    assert ro.query(KeyQuery("T", "c", 0, 2**62, 5)) == []  # put after the open: not seen
    ro.flush()  # a no-op
    ro.close()
    f.close()


# --- the kernel's key path against the message-by-message one ------------------------------------

_KEY_CHARS = st.sampled_from(
    ["a", "b", "Z", "0", "-", " ", "  ", "\t", "\x0b", "\x1f", "é", "\u3000", "键", "\x01", "",
     "K", "KEYS"]
)  # fmt: skip
_VALUES = st.lists(_KEY_CHARS, max_size=6).map("".join)
_NAMES = st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "XKEYS", "KEYSX", "UNIQ_KEYS", "", "k"])


@st.composite
def unit_properties(draw: st.DrawFn) -> bytes:
    """A properties section: items in any order, duplicates, odd names, values with \\x01."""
    items = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=5))
    raw = "".join(f"{name}\x01{value}\x02" for name, value in items)
    if draw(st.booleans()) and raw:
        raw = raw[: draw(st.integers(0, len(raw)))]  # cut anywhere
    return raw.encode("utf-8")


def test_every_ascii_byte_in_keys_equals_the_message_by_message_keys() -> None:
    """Each ASCII character (Java whitespace and its neighbours among them) alone as UNIQ_KEY,
    alone as KEYS, doubled and inside tokens of KEYS; lone non-ASCII bytes inside keys."""
    chars = [chr(c) for c in range(3, 128)] + ["\x00"]
    props = [f"UNIQ_KEY\x01{c}\x02KEYS\x01{c}{c} a{c}b\x02".encode() for c in chars]
    props += [f"UNIQ_KEY\x01u\x02KEYS\x01{c}\x02".encode() for c in chars]
    # one byte of a UTF-8 sequence alone (Java decodes it to U+FFFD), left to the Python path
    props += [
        b"UNIQ_KEY\x01" + bytes([b]) + b"\x02KEYS\x01a" + bytes([b]) + b" b\x02"
        for b in (0x80, 0xC3, 0xFF)
    ]
    _assert_numpy_keys_equal(props, [i % 2 == 0 for i in range(len(props))], [False] * len(props))


@given(
    props=st.lists(unit_properties(), min_size=1, max_size=12),
    v2=st.lists(st.booleans(), min_size=12, max_size=12),
    ipv6=st.lists(st.booleans(), min_size=12, max_size=12),
)
@settings(max_examples=300, deadline=None)
def test_numpy_keys_equal_the_message_by_message_keys(
    props: list[bytes], v2: list[bool], ipv6: list[bool]
) -> None:
    _assert_numpy_keys_equal(props, v2, ipv6)


def _assert_numpy_keys_equal(props: list[bytes], v2: list[bool], ipv6: list[bool]) -> None:
    units = [
        msgcodec.encode(
            topic="TopicK", queue_id=1, queue_offset=i, physical_offset=0, body=b"x" * (i % 5),
            properties=p, born_timestamp=T0, store_timestamp=T0 + i,
            born_host="[::1]:5" if ipv6[i] else "10.0.0.1:5", v2=v2[i],
        )
        for i, p in enumerate(props)
    ]  # fmt: skip
    data = b"".join(units)
    sizes = np.array([len(u) for u in units], np.int64)
    starts = np.cumsum(sizes) - sizes
    fast = index_batch_of_units("TopicK", 9, 1, data, starts, sizes, starts, T0 + starts)
    uniq, keys = key_properties(data, starts, sizes)
    decoded = [msgcodec.decode(u).properties for u in units]
    assert uniq == [d.get(msgcodec.PROPERTY_UNIQ_KEY) for d in decoded]
    assert keys == [d.get(msgcodec.PROPERTY_KEYS) for d in decoded]
    slow = IndexBatch.for_queue("TopicK", 9, 1, starts, sizes, T0 + starts, uniq, keys)
    for name in ("hashes", "topic_ids", "queue_ids", "offsets", "sizes", "timestamps"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert np.array_equal(fast.key_counts, slow.key_counts)
