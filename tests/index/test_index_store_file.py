"""The local tiered index file: byte-exact puts (V6, V3), FULL/seal, reopen, crash undo, queries."""

from __future__ import annotations

import itertools
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker.javautil import java_rem
from tiered.broker.javautil import java_string_hash
from tiered.broker.javautil import to_i32
from tiered.errors import IndexFileError
from tiered.index import IndexBatch
from tiered.index import IndexStatus
from tiered.index import IndexStoreFile
from tiered.index import local_index_files
from tiered.index.format import BEGIN_MAGIC_CODE
from tiered.index.format import END_MAGIC_CODE
from tiered.index.format import KeyQuery
from tiered.index.key_set import message_key_sets

T0 = 1_700_000_000_000

V6_LOCAL = bytes.fromhex(
    "bcc50289 0000018b cfe56800 0000018b cfe5779f 00000002 00000003 00000002"
    "00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000003"
    "00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"
    "00000000 0029e6a8 00000007 00000001 00000000 00000000 00000064 00000001"
    "00000000 0029e6a9 00000007 00000001 00000000 00000064 00000078 00000002"
    "00000000 0029e6a8 00000007 00000002 00000000 000000dc 00000082 00000003"
    "00000001".replace(" ", "")
)


class ReferenceFile:
    """A direct port of upstream ``IndexStoreFile`` construction and ``putKey``, over a bytearray.

    One documented difference, matching the sidecar: a key whose slot position is negative is
    skipped alone (upstream throws there and abandons the rest of the message's key set).
    """

    def __init__(self, begin: int, slots: int, max_items: int):
        self.buf = bytearray(28 + slots * 8 + max_items * 32)
        self.slots, self.max_items, self.begin = slots, max_items, begin
        self.end = self.slot_count = self.count = 0
        self.sealed = False
        self.flush()

    def flush(self) -> None:
        magic = END_MAGIC_CODE if self.max_items == self.count + 1 else BEGIN_MAGIC_CODE
        struct.pack_into(
            ">iqqii", self.buf, 0, magic, self.begin, self.end, self.slot_count, self.count
        )

    def put_key(
        self, topic: str, topic_id: int, queue_id: int, keys: list[str], offset: int, size: int,
        ts: int,
    ) -> str:  # fmt: skip
        if not keys:
            return "SUCCESS"
        if self.sealed:
            return "FILE_FULL"
        if self.count + len(keys) >= self.max_items:
            self.sealed = True
            return "FILE_FULL"
        for key in keys:
            h = java_string_hash(f"{topic}#{key}")
            h = to_i32(-h) if h < 0 else h
            slot_pos = 28 + java_rem(h, self.slots) * 8
            if slot_pos < 0:
                continue  # upstream: IndexOutOfBoundsException -> UNKNOWN_ERROR
            (old,) = struct.unpack_from(">i", self.buf, slot_pos)
            old = max(old, 0)
            delta = ts - self.begin
            diff = to_i32(abs(delta) // 1000 * (1 if delta >= 0 else -1))
            self.count += 1
            struct.pack_into(
                ">iiiqiii", self.buf, 28 + self.slots * 8 + self.count * 32,
                h, topic_id, queue_id, offset, size, diff, old,
            )  # fmt: skip
            struct.pack_into(">i", self.buf, slot_pos, self.count)
            if old <= 0:
                self.slot_count += 1
            self.end = max(self.end, ts)
            self.flush()
        return "SUCCESS"


def file_bytes(f: IndexStoreFile) -> bytes:
    view = f.buffer()
    try:
        return bytes(view)
    finally:
        view.release()


def v6_file(tmp_path: Path) -> IndexStoreFile:
    f = IndexStoreFile.create(tmp_path, T0, slots=5, max_items=20)
    batch = IndexBatch.for_queue(
        "TopicTest", 7, 1, [0, 100], [100, 120], [T0 + 1500, T0 + 2500], [None, None], ["k1", "k2"]
    )
    assert f.put_many(batch) == 2
    batch = IndexBatch.for_queue("TopicTest", 7, 2, [220], [130], [T0 + 3999], [None], ["k1"])
    assert f.put_many(batch) == 1
    return f


# --- V6 ------------------------------------------------------------------------------------------


def test_v6_local_file_is_byte_exact(tmp_path: Path) -> None:
    with v6_file(tmp_path) as f:
        data = file_bytes(f)
    assert len(data) == 708
    assert data[: len(V6_LOCAL)] == V6_LOCAL
    assert data[len(V6_LOCAL) :] == bytes(708 - len(V6_LOCAL))
    assert (tmp_path / str(T0)).read_bytes() == data


def test_v6_queries_newest_first_and_the_unsealed_off_by_one(tmp_path: Path) -> None:
    with v6_file(tmp_path) as f:
        found = f.query(KeyQuery("TopicTest", "k1", T0, T0 + 10000, 10))
        assert [(i.queue_id, i.offset, i.item_index) for i in found] == [(2, 220, 3), (1, 0, 1)]
        assert found[0].store_timestamp(f.begin_timestamp) == T0 + 3000
        assert (
            len(f.query(KeyQuery("TopicTest", "k1", T0, T0 + 10000, 1))) == 2
        )  # upstream quirk, kept
        assert [i.offset for i in f.query(KeyQuery("TopicTest", "k1", T0, T0 + 2000, 10))] == [0]
        assert f.query(KeyQuery("TopicTest", "k1", T0 + 4000, T0 + 9000, 10)) == []
        assert f.query(KeyQuery("TopicTest", "k1", T0, T0 + 10000, 10, topic_id=8)) == []
        assert f.query(KeyQuery("OtherTopic", "k1", T0, T0 + 10000, 10)) == []
    assert f.status is IndexStatus.SHUTDOWN
    assert f.query(KeyQuery("TopicTest", "k1", T0, T0 + 10000, 10)) == []


def test_reopen_keeps_the_end_timestamp_and_continues(tmp_path: Path) -> None:
    v6_file(tmp_path).close()
    with IndexStoreFile.open(tmp_path / str(T0), slots=5, max_items=20) as f:
        assert f.status is IndexStatus.UNSEALED
        assert (f.end_timestamp, f.item_count, f.header.hash_slot_count) == (T0 + 3999, 3, 2)
        assert file_bytes(f)[: len(V6_LOCAL)] == V6_LOCAL  # opening writes nothing


# --- bulk put == the per-key loop ----------------------------------------------------------------

KEY = st.sampled_from(["k1", "k2", "k3", "", "ogaQmc", "中文键", "😀", "x y"])
MESSAGE = st.tuples(
    st.one_of(st.none(), KEY), st.one_of(st.none(), st.lists(KEY, max_size=4).map(" ".join))
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    slots=st.sampled_from([1, 2, 4, 5, 7, 16, 5_000_000 // 4096]),
    max_items=st.integers(2, 40),
    messages=st.lists(MESSAGE, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_put_many_equals_upstream_put_key_loop(
    tmp_path_factory: pytest.TempPathFactory,
    slots: int,
    max_items: int,
    messages: list[tuple[str | None, str | None]],
    cuts: list[int],
) -> None:
    directory = tmp_path_factory.mktemp("put")
    n = len(messages)
    offsets, sizes = np.arange(n) * 100, np.full(n, 100)
    timestamps = T0 - 5000 + np.arange(n) * 1700  # some before begin: negative timeDiff
    uniq = [u for u, _ in messages]
    keys = [k for _, k in messages]
    # the reference: a message at a time, a new file (begin + i) whenever one is full
    references = [ReferenceFile(T0, slots, max_items)]
    for i in range(n):
        members, _ = message_key_sets(uniq[i : i + 1], keys[i : i + 1])
        if len(members) >= max_items:
            continue  # fits no file: the sidecar skips it (upstream seals file after file)
        args = ("TopicTest", 3, 1, members, int(offsets[i]), 100, int(timestamps[i]))
        if references[-1].put_key(*args) == "FILE_FULL":
            references.append(ReferenceFile(T0 + len(references), slots, max_items))
            assert references[-1].put_key(*args) == "SUCCESS"
    # the sidecar: the same messages in a few bulk batches
    files = [IndexStoreFile.create(directory, T0, slots=slots, max_items=max_items)]
    everything = IndexBatch.for_queue("TopicTest", 3, 1, offsets, sizes, timestamps, uniq, keys)
    bounds = sorted({0, n, *(c for c in cuts if c <= n)})
    for lo, hi in itertools.pairwise(bounds):
        rest = everything.messages_slice(lo, hi)
        while rest.messages:
            put = files[-1].put_many(rest)
            if put < rest.messages:
                assert files[-1].status is IndexStatus.SEALED
                files.append(
                    IndexStoreFile.create(
                        directory, T0 + len(files), slots=slots, max_items=max_items
                    )
                )
            rest = rest.messages_slice(put)
    assert len(files) == len(references)
    for f, ref in zip(files, references, strict=True):
        data = file_bytes(f)
        f.close()
        if f is not files[-1] and data[:4] != ref.buf[:4]:  # sealed by us: END magic
            assert struct.unpack_from(">i", data)[0] == END_MAGIC_CODE
            data = bytes(ref.buf[:4]) + data[4:]
        assert data == bytes(ref.buf)


# --- Integer.MIN_VALUE (vectors V3) ---------------------------------------------------------------


def min_value_batch() -> IndexBatch:
    return IndexBatch.for_queue("TopicTest", 1, 0, [0], [10], [T0 + 1000], [None], ["ogaQmc"])


def test_min_value_key_with_default_slots_is_not_indexed(tmp_path: Path) -> None:
    with IndexStoreFile.create(tmp_path, T0, slots=5_000_000, max_items=100) as f:
        assert f.put_many(min_value_batch()) == 1
        assert f.item_count == 0 and f.end_timestamp == 0
        assert f.query(KeyQuery("TopicTest", "ogaQmc", 0, 2**62, 10)) == []


@pytest.mark.parametrize("slots", [5, 7])
def test_min_value_key_with_tiny_slots_is_counted_but_unreachable(
    tmp_path: Path, slots: int
) -> None:
    reference = ReferenceFile(T0, slots, 20)
    reference.put_key("TopicTest", 1, 0, ["ogaQmc"], 0, 10, T0 + 1000)
    with IndexStoreFile.create(tmp_path, T0, slots=slots, max_items=20) as f:
        assert f.put_many(min_value_batch()) == 1
        assert f.item_count == 1
        assert f.query(KeyQuery("TopicTest", "ogaQmc", 0, 2**62, 10)) == []
        assert file_bytes(f) == bytes(reference.buf)


def test_min_value_key_with_power_of_two_slots_lands_in_slot_0(tmp_path: Path) -> None:
    with IndexStoreFile.create(tmp_path, T0, slots=4, max_items=20) as f:
        f.put_many(min_value_batch())
        (hit,) = f.query(KeyQuery("TopicTest", "ogaQmc", 0, 2**62, 10))
        assert hit.hash == -(2**31)


# --- full, seal, reopen, crash -------------------------------------------------------------------


def single_keys(n: int, start: int = 0) -> IndexBatch:
    return IndexBatch.for_queue(
        "T", 1, 0, np.arange(start, start + n), np.full(n, 9), T0 + np.arange(start, start + n),
        [None] * n, [f"k{i}" for i in range(start, start + n)],
    )  # fmt: skip


def test_a_file_holds_max_items_minus_one_then_seals(tmp_path: Path) -> None:
    with IndexStoreFile.create(tmp_path, T0, slots=3, max_items=20) as f:
        assert f.put_many(single_keys(25)) == 19
        assert f.item_count == 19 and f.status is IndexStatus.SEALED
        assert f.header.magic == END_MAGIC_CODE
        assert f.put_many(single_keys(1)) == 0


def test_a_message_that_does_not_fit_goes_whole_to_the_next_file(tmp_path: Path) -> None:
    three = IndexBatch.for_queue("T", 1, 0, [5], [9], [T0], ["u"], ["a b"])
    with IndexStoreFile.create(tmp_path, T0, slots=3, max_items=20) as f:
        assert f.put_many(single_keys(17)) == 17
        assert f.put_many(three) == 0  # 17 + 3 >= 20: sealed, nothing written
        assert f.item_count == 17 and f.status is IndexStatus.SEALED
    with IndexStoreFile.open(tmp_path / str(T0), slots=3, max_items=20) as f:
        assert f.status is IndexStatus.SEALED  # our END magic survives the restart
    with IndexStoreFile.create(tmp_path, T0 + 1, slots=3, max_items=20) as g:
        assert g.put_many(three) == 1 and g.item_count == 3


def test_reopen_after_restart_continues_byte_identically(tmp_path: Path) -> None:
    batch = single_keys(300)
    with IndexStoreFile.create(tmp_path / "a", T0, slots=11, max_items=1000) as f:
        f.put_many(batch)
        expected = file_bytes(f)
    for lo, hi in ((0, 7), (7, 120), (120, 300)):
        if lo:
            f = IndexStoreFile.open(tmp_path / "b" / str(T0), slots=11, max_items=1000)
        else:
            f = IndexStoreFile.create(tmp_path / "b", T0, slots=11, max_items=1000)
        with f:
            assert f.put_many(batch.messages_slice(lo, hi)) == hi - lo
    assert (tmp_path / "b" / str(T0)).read_bytes() == expected


def test_a_batch_cut_short_by_a_crash_is_undone_on_open(tmp_path: Path) -> None:
    first, second = single_keys(50), single_keys(50, start=50)
    path = tmp_path / str(T0)
    with IndexStoreFile.create(tmp_path, T0, slots=7, max_items=200) as f:
        f.put_many(first)
        header_after_first = file_bytes(f)[:28]
        f.put_many(second)
        expected = file_bytes(f)
    # the crash: items and slot heads of the second batch written, its header not
    data = bytearray(path.read_bytes())
    data[:28] = header_after_first
    path.write_bytes(data)
    with IndexStoreFile.open(path, slots=7, max_items=200) as f:
        assert f.item_count == 50
        assert [i.offset for i in f.query(KeyQuery("T", "k60", 0, 2**62, 5))] == []
        assert [i.offset for i in f.query(KeyQuery("T", "k3", 0, 2**62, 5))] == [3]
        assert f.put_many(second) == 50
    assert path.read_bytes() == expected


def test_open_refuses_a_file_of_another_shape_or_a_bad_header(tmp_path: Path) -> None:
    IndexStoreFile.create(tmp_path, T0, slots=5, max_items=20).close()
    with pytest.raises(IndexFileError, match="tieredStoreIndexFileMaxHashSlotNum=6"):
        IndexStoreFile.open(tmp_path / str(T0), slots=6, max_items=20)
    bad = tmp_path / "bad" / "123"
    bad.parent.mkdir()
    shutil.copy(tmp_path / str(T0), bad)
    with bad.open("r+b") as fh:
        fh.write(b"\0\0\0\0")
    with pytest.raises(IndexFileError, match="not a tiered index file header"):
        IndexStoreFile.open(bad, slots=5, max_items=20)
    with pytest.raises(FileExistsError):
        IndexStoreFile.create(tmp_path, T0, slots=5, max_items=20)
    with pytest.raises(IndexFileError, match="slots=0"):
        IndexStoreFile.create(tmp_path, T0 + 1, slots=0, max_items=20)


def test_local_index_files_are_listed_oldest_first(tmp_path: Path) -> None:
    for name in ("1700000000000", "999", "notes", "1700000000001"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "compacting").mkdir()
    assert [p.name for p in local_index_files(tmp_path)] == [
        "999",
        "1700000000000",
        "1700000000001",
    ]
    assert local_index_files(tmp_path / "absent") == []


def test_a_query_visits_at_most_512_items(tmp_path: Path) -> None:
    with IndexStoreFile.create(tmp_path, T0, slots=1, max_items=1000) as f:
        f.put_many(single_keys(1))  # k0, then 600 newer items in the same (only) slot
        f.put_many(single_keys(511, start=1))
        assert [i.offset for i in f.query(KeyQuery("T", "k0", 0, 2**62, 5))] == [0]
        f.put_many(single_keys(1, start=512))
        assert f.query(KeyQuery("T", "k0", 0, 2**62, 5)) == []


def test_topic_id_filter_drops_colliding_topics_before_counting(tmp_path: Path) -> None:
    batches = [
        IndexBatch.for_queue("T", topic_id, 0, [i], [1], [T0 + i], [None], ["k"])
        for i, topic_id in enumerate([1, 2, 2, 2])
    ]
    with IndexStoreFile.create(tmp_path, T0, slots=1, max_items=20) as f:
        for b in batches:
            f.put_many(b)
        assert [i.offset for i in f.query(KeyQuery("T", "k", 0, 2**62, 1, topic_id=1))] == [0]
        assert [i.offset for i in f.query(KeyQuery("T", "k", 0, 2**62, 1))] == [3, 2]
