"""The compiled kernel's index items (``tiered._kernel.index_items`` through
:func:`~tiered.index.bulk_keys.index_batch_of_units`) against the numpy reference
(:func:`~tiered.index.numpy_keys.reference_index_batch`): generated units with every key shape
the tests pin -- ASCII and Java whitespace, CJK, Cyrillic, characters outside the BMP (surrogate
pairs), non-breaking spaces Java does not call blank, invalid UTF-8 -- duplicate and blank
tokens, repeated items, torn buffers, inconsistent sizes and empty batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker import message as msgcodec
from tiered.index import IndexBatch
from tiered.index.bulk_keys import UnitsOf
from tiered.index.bulk_keys import index_batch_of_units
from tiered.index.bulk_keys import index_batches_of_units
from tiered.index.index_batch import BatchPart
from tiered.index.numpy_keys import reference_index_batch
from tiered.process.native import kernel

T0 = 1_700_000_000_000
COLUMNS = ("hashes", "topic_ids", "queue_ids", "offsets", "sizes", "timestamps", "key_counts")

_PIECES = st.sampled_from(
    ["a", "b", "Z", "0", "-", " ", "  ", "\t", "\x0b", "\x1c", "\x1f", "\x01", "",
     "é", "键", "订单", "заказ", "\U0001f680", "\U00010400", "\u3000", "\u2028", "\u00a0",
     "\u2007", "\u202f", "\u1680", "\ufeff", "order-1", "KEYS"]
)  # fmt: skip
_VALUES = st.lists(_PIECES, max_size=8).map("".join)
_NAMES = st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "XKEYS", "KEYSX", "UNIQ_KEYS", "", "k"])
_BAD_UTF8 = (b"\x80", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x9a", b"\xff", b"\xed\xa0\x80")


@st.composite
def unit_properties(draw: st.DrawFn) -> bytes:
    """A properties section: items in any order and number, odd names, values with ``\\x01``;
    sometimes a stray invalid UTF-8 sequence, sometimes cut anywhere."""
    items = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=5))
    raw = "".join(f"{name}\x01{value}\x02" for name, value in items).encode()
    if raw and draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from(_BAD_UTF8)) + raw[at:]
    if raw and draw(st.booleans()):
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


def _units(props: list[bytes], v2: list[bool], ipv6: list[bool]) -> list[bytes]:
    return [
        msgcodec.encode(
            topic="TopicK", queue_id=1, queue_offset=i, physical_offset=0, body=b"x" * (i % 7),
            properties=p, born_timestamp=T0, store_timestamp=T0 + i,
            born_host="[::1]:5" if ipv6[i] else "10.0.0.1:5",
            store_host="[::2]:6" if ipv6[i] and v2[i] else "10.0.0.2:6", v2=v2[i],
        )
        for i, p in enumerate(props)
    ]  # fmt: skip


def assert_kernel_equals_reference(
    topic: str, data: bytes, starts: np.ndarray, sizes: np.ndarray
) -> IndexBatch:
    args = (topic, 7, 3, data, starts, sizes, starts * 3 + 11, T0 + starts)
    got = index_batch_of_units(*args)
    want = reference_index_batch(*args)
    for name in COLUMNS:
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    return got


@given(
    props=st.lists(unit_properties(), max_size=12),
    v2=st.lists(st.booleans(), min_size=12, max_size=12),
    ipv6=st.lists(st.booleans(), min_size=12, max_size=12),
    topic=st.sampled_from(["TopicK", "订单主题", "T\U0001f680", "%RETRY%g"]),
)
@settings(max_examples=400, deadline=None)
def test_kernel_items_equal_the_numpy_reference(
    props: list[bytes], v2: list[bool], ipv6: list[bool], topic: str
) -> None:
    units = _units(props, v2, ipv6)
    sizes = np.array([len(u) for u in units], np.int64)
    starts = np.cumsum(sizes) - sizes
    assert_kernel_equals_reference(topic, b"".join(units), starts, sizes)


@given(
    props=st.lists(unit_properties(), min_size=1, max_size=6),
    cut=st.integers(msgcodec.MIN_UNIT_SIZE, 4000),
    skew=st.lists(st.integers(-120, 120), min_size=6, max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_torn_buffers_and_wrong_sizes_equal_the_reference(
    props: list[bytes], cut: int, skew: list[int]
) -> None:
    """A buffer cut short (a torn read) and units whose TOTALSIZE is off (a corrupt
    consumequeue): the same units are indexed and the rest left out, never read past the end.
    (The reference needs a buffer of one unit at least; the kernel needs nothing:
    :func:`test_tiny_buffers_are_inconsistent_units`.)"""
    units = _units(props, [False] * 6, [False] * 6)
    data = b"".join(units)
    sizes = np.array([len(u) for u in units], np.int64)
    starts = np.cumsum(sizes) - sizes
    assert_kernel_equals_reference("TopicK", data[: min(cut, len(data))], starts, sizes)
    wrong = np.maximum(sizes + np.array(skew[: sizes.size], np.int64), 0)
    assert_kernel_equals_reference("TopicK", data, starts, wrong)
    assert_kernel_equals_reference("TopicK", data, starts + np.int64(skew[0] % 50), sizes)


@pytest.mark.parametrize("length", [0, 1, 40, msgcodec.MIN_UNIT_SIZE - 1])
def test_tiny_buffers_are_inconsistent_units(length: int) -> None:
    starts = np.array([0, 5, -3, 2**62], np.int64)
    sizes = np.array([120, 97, 97, 97], np.int64)
    msg, hashes, slow, inconsistent = kernel().index_items(b"\x01" * length, starts, sizes, 5)
    assert (msg, hashes, slow, inconsistent) == (b"", b"", b"", 4)


def test_realistic_key_shapes_in_one_batch() -> None:
    """The realistic key mix of the benchmark: shared, duplicate, blank, non-ASCII tokens, a
    blank value, a key set larger than 16 (deduplicated through a set), all in one batch."""
    values = [
        "T-0-1 order-0", "T-0-3 order-0 order-0", " T-0-11  order-2 ", "   ",
        "T-0-7 order-1 订单-1", "заказ-10", "\U0001f680-18 \U0001f680-18",
        " ".join(f"k{i % 20}" for i in range(60)), "a\u3000b \u3000",
    ]  # fmt: skip
    props = [f"KEYS\x01{v}\x02UNIQ_KEY\x01U{i}\x02".encode() for i, v in enumerate(values)]
    props.append(b"UNIQ_KEY\x01\xe4\xb8\x02KEYS\x01ok\x02")  # invalid UTF-8: Python path
    n = len(props)
    units = _units(props, [i % 2 == 0 for i in range(n)], [i % 3 == 0 for i in range(n)])
    sizes = np.array([len(u) for u in units], np.int64)
    starts = np.cumsum(sizes) - sizes
    got = assert_kernel_equals_reference("TopicK", b"".join(units), starts, sizes)
    assert got.key_counts.tolist() == [3, 3, 4, 1, 4, 2, 2, 21, 3, 2]


def test_empty_batches_and_blank_topics_index_nothing() -> None:
    empty = np.zeros(0, np.int64)
    assert len(assert_kernel_equals_reference("TopicK", b"", empty, empty)) == 0
    unit = _units([b"KEYS\x01a\x02"], [False], [False])[0]
    one = np.array([len(unit)], np.int64)
    assert len(assert_kernel_equals_reference(" ", unit, np.zeros(1, np.int64), one)) == 0
    msg, hashes, slow, inconsistent = kernel().index_items(b"", empty, empty, 0)
    assert (msg, hashes, slow, inconsistent) == (b"", b"", b"", 0)


def test_the_kernel_refuses_mismatched_or_strided_inputs() -> None:
    starts = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="one entry per unit"):
        kernel().index_items(b"x" * 100, starts, np.zeros(3, np.int64), 0)
    with pytest.raises(ValueError, match="contiguous"):
        kernel().index_items(b"x" * 100, starts[::2], np.zeros(2, np.int64), 0)
    with pytest.raises(BufferError):
        kernel().index_items(b"x", starts.astype(np.int32), np.zeros(4, np.int32), 0)


@given(
    batches=st.lists(
        st.tuples(
            st.lists(unit_properties(), max_size=5),
            st.sampled_from(["TopicK", "订单主题", " ", "%RETRY%g"]),
        ),
        max_size=8,
    ),
    torn=st.integers(0, 3),
)
@settings(max_examples=300, deadline=None)
def test_many_batches_index_as_each_batch_alone(
    batches: list[tuple[list[bytes], str]], torn: int
) -> None:
    """A wave's batches indexed by one kernel call (:func:`index_batches_of_units`): each
    batch's items are what it alone gets (blank topics, empty batches, invalid UTF-8 keys and
    a torn buffer among them), and the wave's parts put together are the batches one after
    the other."""
    wave: list[UnitsOf] = []
    for b, (props, topic) in enumerate(batches):
        units = _units(props, [True] * len(props), [False] * len(props))
        sizes = np.array([len(u) for u in units], np.int64)
        starts = np.cumsum(sizes) - sizes
        data = b"".join(units)
        if b == torn and len(data):
            data = data[: len(data) // 2]
        wave.append(UnitsOf(topic, 7 + b, b, data, starts, sizes, starts * 3 + b, T0 + starts))
    got = index_batches_of_units(wave)
    alone = [index_batch_of_units(*units) for units in wave]
    assert len(got) == len(alone)
    for part, want in zip(got, alone, strict=True):
        batch = part.rows() if isinstance(part, BatchPart) else part
        assert len(part) == len(want)
        for name in COLUMNS:
            assert np.array_equal(getattr(batch, name), getattr(want, name)), name
    if alone:
        joined, whole = IndexBatch.concat(got), IndexBatch.concat(alone)
        for name in COLUMNS:
            assert np.array_equal(getattr(joined, name), getattr(whole, name)), name


def test_a_waves_parts_in_order_are_put_as_one_view_of_it() -> None:
    units = _units([b"KEYS\x01a b\x02", b"UNIQ_KEY\x01u\x02", b"KEYS\x01c\x02"], [True] * 3,
                   [False] * 3)  # fmt: skip
    sizes = np.array([len(u) for u in units], np.int64)
    wave = [
        UnitsOf(f"T{i}", i, 0, u, np.zeros(1, np.int64), sizes[i : i + 1],
                np.array([i], np.int64), np.array([T0], np.int64))
        for i, u in enumerate(units)
    ]  # fmt: skip
    a, b, c = index_batches_of_units(wave)
    assert isinstance(a, BatchPart) and a.batch is b.batch is c.batch  # type: ignore[union-attr]
    assert IndexBatch.concat([a, b, c]) is a.batch  # the whole wave: no copy
    other = index_batch_of_units(*wave[1])
    cases: list[list[IndexBatch | BatchPart]] = [[a, c], [c, a], [a, other, b, c], [b]]
    for parts in cases:
        joined = IndexBatch.concat(parts)
        rows = [p.rows() if isinstance(p, BatchPart) else p for p in parts]
        assert joined.hashes.tolist() == [h for r in rows for h in r.hashes.tolist()]
        assert joined.key_counts.tolist() == [k for r in rows for k in r.key_counts.tolist()]
        assert joined.topic_ids.tolist() == [t for r in rows for t in r.topic_ids.tolist()]


def test_the_many_batch_kernel_refuses_bounds_that_do_not_fit() -> None:
    starts = sizes = offsets = times = np.zeros(3, np.int64)
    prefixes = np.zeros(2, np.uint32)
    for bounds in ([0, 1], [0, 2, 1, 3], [1, 2, 3], [0, 1, 4]):
        with pytest.raises(ValueError, match=r"bounds|entries"):
            kernel().index_columns_many([b"", b""], np.array(bounds, np.int64), starts, sizes,
                                        prefixes, offsets, times)  # fmt: skip
    with pytest.raises(ValueError, match="prefixes"):
        kernel().index_columns_many([b""], np.array([0, 3], np.int64), starts, sizes, prefixes,
                                    offsets, times)  # fmt: skip
