"""Key hashes (vectorised ``String.hashCode``), message key sets, IndexBatch (vectors V3, V9)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker.javautil import java_split_space
from tiered.broker.javautil import java_string_hash
from tiered.broker.javautil import to_i32
from tiered.index import java_hash
from tiered.index.format import slot_of
from tiered.index.index_batch import IndexBatch
from tiered.index.java_hash import index_hashes
from tiered.index.java_hash import string_hashes as java_hashes
from tiered.index.java_hash import tiered_hash
from tiered.index.key_set import is_java_blank
from tiered.index.key_set import message_key_sets

# vectors.md V3: key string -> (hashCode, tiered abs, tiered slot @5,000,000, tiered slot @5)
V3 = {
    "TopicTest#key1": (-1655984460, 1655984460, 984460, 0),
    "TopicTest#MessageKey": (638347386, 638347386, 3347386, 1),
    "TopicTest1#MessageKey": (1160537419, 1160537419, 537419, 4),
    "TopicTest#uk": (2746392, 2746392, 2746392, 2),
    "StoreTest#uk": (-221212634, 221212634, 1212634, 4),
    "TopicTest#": (1148604930, 1148604930, 3604930, 0),
    "TopicTest#中文键": (105098802, 105098802, 98802, 2),
    "TopicTest#ogaQmc": (-2147483648, -2147483648, -2483648, -3),
}


@pytest.mark.parametrize(("composite", "expected"), V3.items())
def test_v3_hash_abs_and_slots(composite: str, expected: tuple[int, int, int, int]) -> None:
    java, tiered, slot_default, slot_5 = expected
    topic, key = composite.split("#", 1)
    assert to_i32(int(java_hashes([composite])[0][0])) == java
    (h,) = index_hashes(topic, [key]).tolist()
    assert h == tiered
    assert slot_of(h, 5_000_000) == slot_default
    assert slot_of(h, 5) == slot_5


def test_min_value_stays_negative_other_negatives_flip() -> None:
    assert tiered_hash([-(2**31), -1, 0, 2**31 - 1, 2**32 - 5]).tolist() == [
        -(2**31),
        1,
        0,
        2**31 - 1,
        5,
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30))
def test_vectorised_hash_equals_java_hash(strings: list[str]) -> None:
    hashes, units = java_hashes(strings)
    assert [to_i32(int(h)) for h in hashes] == [java_string_hash(s) for s in strings]
    assert units.tolist() == [len(s.encode("utf-16-le", "surrogatepass")) // 2 for s in strings]


def test_hash_chunks_and_awkward_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(java_hash, "_CHUNK_UNITS", 7)  # many chunks, strings longer than one
    strings = ["", "x" * 100, "\ud800", "😀" * 3, "", "polygenelubricants", "a", "中文键" * 9]
    hashes, _ = java_hashes(strings)
    assert [to_i32(int(h)) for h in hashes] == [java_string_hash(s) for s in strings]
    assert to_i32(int(java_hashes(["polygenelubricants"])[0][0])) == -(2**31)


def test_substring_hashes_anywhere_in_a_buffer_of_many_blocks() -> None:
    """Runs in any order, overlapping, empty, spanning block bounds, at the very end of a buffer
    more than three blocks long (positions past 2**16 take the block tables)."""
    rng = np.random.default_rng(7)
    text = "".join(rng.choice(list("abcXYZ019 #é中"), size=3 * (1 << 16) + 777))
    units = np.frombuffer(text.encode("utf-16-le"), dtype="<u2")
    n = units.size
    bounds = [(0, 0), (0, 1), (0, n), (n - 1, n), (n, n), ((1 << 16) - 5, (1 << 16) + 5)]
    starts = rng.integers(0, n, size=400)
    bounds += [(int(a), int(min(a + rng.integers(0, 90_000), n))) for a in starts]
    start = np.array([a for a, _ in bounds], dtype=np.int64)
    end = np.array([b for _, b in bounds], dtype=np.int64)
    got = java_hash.substring_hashes(units, start, end)
    assert [to_i32(int(h)) for h in got] == [java_string_hash(text[a:b]) for a, b in bounds]


def test_index_hashes_equal_composite_hash() -> None:
    keys = [f"k{i}" for i in range(1000)] + ["", "中文键", "😀"]
    expected = tiered_hash([java_string_hash(f"Topic-x#{k}") & 0xFFFFFFFF for k in keys])
    assert np.array_equal(index_hashes("Topic-x", keys), expected)


# --- key sets ------------------------------------------------------------------------------------


def java_hashset_order(members: list[str]) -> list[str]:
    """An independent model of ``new HashSet<>()`` + ``add`` per member, then iteration."""
    table: list[list[str]] = [[] for _ in range(16)]
    size = 0

    def bucket(key: str, n: int) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (n - 1)

    for key in members:
        chain = table[bucket(key, len(table))]
        if key in chain:
            continue
        chain.append(key)
        size += 1
        if size > len(table) * 3 // 4:  # HashMap.resize: split each bin, order kept
            bigger: list[list[str]] = [[] for _ in range(2 * len(table))]
            for old in table:
                for k in old:
                    bigger[bucket(k, len(bigger))].append(k)
            table = bigger
    return [k for chain in table for k in chain]


def test_v3_hashset_order() -> None:
    flat, counts = message_key_sets(["uk-1"], ["key1 key2"])
    assert flat == ["key1", "key2", "uk-1"]
    assert counts.tolist() == [3]


def test_v9_split_blank_and_dedupe() -> None:
    flat, counts = message_key_sets(
        [None, "", " ", "u", "\u00a0", "k"], [" a  b ", "k1 k2", None, "u u", None, "k"]
    )
    sets = np.split(np.array(flat, dtype=object), np.cumsum(counts)[:-1])
    assert [sorted(s) for s in sets] == [["", "a", "b"], ["k1", "k2"], [], ["u"], ["\u00a0"], ["k"]]
    assert java_split_space(" a  b ") == ["", "a", "", "b"]


def test_java_blank_is_not_python_isspace() -> None:
    assert is_java_blank(None) and is_java_blank("") and is_java_blank(" \t\n\u2003\u3000")
    assert not is_java_blank("\u00a0") and not is_java_blank("\u2007") and not is_java_blank("a ")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.text("abcdefgh", max_size=3)),
            st.one_of(st.none(), st.lists(st.text("abcdefghij", max_size=4), max_size=20)),
        ),
        max_size=8,
    )
)
def test_key_sets_iterate_like_java_hashset(
    messages: list[tuple[str | None, list[str] | None]],
) -> None:
    uniq = [u for u, _ in messages]
    joined = [None if k is None else " ".join(k) for _, k in messages]
    flat, counts = message_key_sets(uniq, joined)
    expected: list[str] = []
    for u, j in zip(uniq, joined, strict=True):
        members = [] if is_java_blank(u) else [u]
        members += [] if j is None or is_java_blank(j) else java_split_space(j)
        expected_set = java_hashset_order([m for m in members if m is not None])
        expected += expected_set
    assert flat == expected
    assert int(counts.sum()) == len(flat)


# --- IndexBatch ----------------------------------------------------------------------------------


def test_batch_for_queue_repeats_message_columns_per_key() -> None:
    batch = IndexBatch.for_queue(
        "TopicTest", 7, 3, [0, 100, 200], [100, 100, 50], [10, 20, 30],
        ["u1", None, "u3"], ["a b", None, "u3"],
    )  # fmt: skip
    assert batch.key_counts.tolist() == [3, 0, 1]
    assert batch.offsets.tolist() == [0, 0, 0, 200]
    assert batch.timestamps.tolist() == [10, 10, 10, 30]
    assert set(batch.topic_ids.tolist()) == {7} and set(batch.queue_ids.tolist()) == {3}
    assert batch.hashes[-1] == index_hashes("TopicTest", ["u3"])[0]
    rest = batch.messages_slice(1)
    assert rest.messages == 2 and len(rest) == 1 and rest.offsets.tolist() == [200]


def test_batch_blank_topic_indexes_nothing() -> None:
    batch = IndexBatch.for_queue(" ", 1, 0, [0], [1], [1], ["u"], ["k"])
    assert len(batch) == 0 and batch.messages == 0


def test_batch_rejects_mismatched_columns() -> None:
    with pytest.raises(ValueError, match="key_counts must sum to 2"):
        IndexBatch.of_rows([1, 2], 0, 0, 0, 0, 0, key_counts=[1])
