"""The compiled kernel's unit walk (``check_units``, ``store_timestamps``, ``check_batch``,
``rewrite_physical_offsets``, ``encode_cq_units`` of :mod:`tiered.broker.unit_fields`, the body
CRCs of the read path) against the numpy reference
(:mod:`tiered.broker.numpy_units`): generated units of every host and magic shape, wrong
sizes and offsets, torn buffers, empty batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker import message as msgcodec
from tiered.broker.consumequeue import encode_units
from tiered.broker.numpy_units import reference_check_units
from tiered.broker.numpy_units import reference_crc_mismatches
from tiered.broker.numpy_units import reference_rewrite_physical_offsets
from tiered.broker.numpy_units import reference_store_timestamps
from tiered.broker.unit_fields import check_batch
from tiered.broker.unit_fields import check_units
from tiered.broker.unit_fields import encode_cq_units
from tiered.broker.unit_fields import rewrite_physical_offsets
from tiered.broker.unit_fields import store_timestamps
from tiered.read.fetcher import crc_mismatches

T0 = 1_700_000_000_000


def _batch(shapes: list[tuple[bool, bool, bool, int]]) -> tuple[bytes, np.ndarray, np.ndarray]:
    units = [
        msgcodec.encode(
            topic="T", queue_id=0, queue_offset=100 + i, physical_offset=5000 + 300 * i,
            body=b"b" * body, properties=b"KEYS\x01k\x02", born_timestamp=T0,
            store_timestamp=T0 + 7 * i, born_host="[::1]:1" if b6 else "10.0.0.1:1",
            store_host="[::2]:2" if s6 else "10.0.0.2:2", v2=v2,
        )
        for i, (v2, b6, s6, body) in enumerate(shapes)
    ]  # fmt: skip
    sizes = np.array([len(u) for u in units], np.int64)
    return b"".join(units), np.cumsum(sizes) - sizes, sizes


_SHAPES = st.lists(
    st.tuples(st.booleans(), st.booleans(), st.booleans(), st.integers(0, 300)), max_size=10
)


def _damaged(
    shapes: list[tuple[bool, bool, bool, int]], cut: int, wrong: int, field: str
) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
    """A batch with unit ``wrong`` damaged in ``field`` (its size as the consumequeue says it,
    its stored queue offset, its expected physical offset or its magic), whole and torn at
    ``cut``: (the two buffers, starts, sizes, physical offsets); the queue offsets start at 100."""
    data, starts, sizes = _batch(shapes)
    n = len(starts)
    physical = 5000 + 300 * np.arange(n, dtype=np.int64)
    buf = bytearray(data)
    if n and wrong < n:
        at = int(starts[wrong])
        if field == "size":
            sizes = sizes.copy()
            sizes[wrong] += 1
        elif field == "queue":
            buf[at + msgcodec.QUEUE_OFFSET_POSITION + 7] ^= 0x01
        elif field == "physical":
            physical[wrong] -= 1
        elif field == "magic":
            buf[at + 7] ^= 0x10
    return [bytes(buf), bytes(buf[: max(cut, len(buf) // 2)])], starts, sizes, physical


@given(
    shapes=_SHAPES,
    cut=st.integers(0, 5000),
    wrong=st.integers(0, 12),
    field=st.sampled_from(["size", "queue", "physical", "magic", "none"]),
)
@settings(max_examples=300, deadline=None)
def test_unit_checks_equal_the_reference(
    shapes: list[tuple[bool, bool, bool, int]], cut: int, wrong: int, field: str
) -> None:
    """``check_units`` and ``check_batch`` (one pass: starts, check, store times and their
    range) agree with the numpy reference's check and timestamps, on the same damage."""
    buffers, starts, sizes, physical = _damaged(shapes, cut, wrong, field)
    n = len(starts)
    queue = 100 + np.arange(n, dtype=np.int64)
    for d in buffers:
        for p in (physical, None):
            want = reference_check_units(d, starts, sizes, queue, p) if n else 0
            assert check_units(d, starts, sizes, queue, p) == want
            checked = check_batch(d, sizes, 100, p)
            assert checked.good == want
            assert checked.starts.tolist() == (np.cumsum(sizes) - sizes).tolist()
            times = reference_store_timestamps(d, starts[:want]) if want else np.zeros(0)
            assert checked.timestamps.tolist() == times.tolist()
            expect = (int(times.min()), int(times.max())) if want else None
            assert checked.time_range == expect


@given(
    rows=st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=20,
    )
)
@settings(max_examples=200, deadline=None)
def test_compiled_consumequeue_units_equal_the_reference_encoding(
    rows: list[tuple[int, int, int]],
) -> None:
    cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
    assert encode_cq_units(*cols) == encode_units(*cols)


def test_a_compiled_unit_encoding_refuses_what_the_reference_refuses() -> None:
    with pytest.raises(ValueError, match="32-bit"):
        encode_cq_units([1, 2], [3, 2**31], [4, 5])
    with pytest.raises(ValueError, match="32-bit"):
        encode_units([1, 2], [3, 2**31], [4, 5])
    with pytest.raises(ValueError, match="one entry per unit"):
        encode_cq_units([1, 2], [3], [4, 5])


@given(shapes=_SHAPES)
@settings(max_examples=150, deadline=None)
def test_store_timestamps_and_offset_rewrites_equal_the_reference(
    shapes: list[tuple[bool, bool, bool, int]],
) -> None:
    data, starts, _ = _batch(shapes)
    got = store_timestamps(data, starts)
    assert got.tolist() == reference_store_timestamps(data, starts).tolist()
    assert got.tolist() == [T0 + 7 * i for i in range(len(starts))]
    mine, theirs = bytearray(data), bytearray(data)
    offsets = 10**12 + starts * 3
    rewrite_physical_offsets(mine, starts, offsets)
    reference_rewrite_physical_offsets(theirs, starts, offsets)
    assert mine == theirs


def test_bad_buffers_are_refused_with_the_unit_named() -> None:
    data, starts, _ = _batch([(False, False, False, 10)] * 2)
    with pytest.raises(ValueError, match=r"unit 1 at .* has no header inside"):
        store_timestamps(data[:-60], starts)
    with pytest.raises(ValueError, match="writable"):
        rewrite_physical_offsets(data, starts, starts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unit 1 .* lies outside"):
        rewrite_physical_offsets(bytearray(data[: int(starts[1]) + 10]), starts, starts)
    with pytest.raises(ValueError, match="one entry per unit"):
        check_units(data, starts, starts[:1], starts)


@given(
    shapes=_SHAPES,
    flips=st.lists(st.integers(0, 10**6), max_size=4),
    cut=st.integers(0, 10**6),
)
@example(shapes=[(True, False, False, 0)], flips=[39], cut=10**6)  # found by CI, see below
@example(shapes=[(False, True, True, 5)] * 2, flips=[], cut=150)
@settings(max_examples=200, deadline=None)
def test_crc_mismatches_equal_the_reference(
    shapes: list[tuple[bool, bool, bool, int]], flips: list[int], cut: int
) -> None:
    """Bytes flipped anywhere (bodies, CRC fields, lengths, sysflags) and buffers torn anywhere:
    the same units fail the body CRC. A flipped sysflag bit that makes an empty body's unit
    read its body length from the topic bytes (negative) once passed the reference (an empty
    slice has CRC 0, an empty body's): a body that is not inside the buffer does not match."""
    data, starts, _ = _batch(shapes)
    buf = bytearray(data)
    for f in flips:
        if buf:
            buf[f % len(buf)] ^= 0x5A
    torn = buf[:cut]
    assert crc_mismatches(torn, starts) == reference_crc_mismatches(torn, starts)


def test_the_smallest_units_pass_the_compiled_checks() -> None:
    """A one-byte topic, an empty or one-byte body and no properties (92 and 93 bytes: under
    what a unit with a property or two ever is) are whole units for the compiled checks as for
    the reference."""
    units = [
        msgcodec.encode(
            topic="T", queue_id=0, queue_offset=100 + i, physical_offset=5000 + 300 * i,
            body=b"b" * i, properties=b"", born_timestamp=T0, store_timestamp=T0 + i,
            born_host="10.0.0.1:1", store_host="10.0.0.2:2",
        )
        for i in range(2)
    ]  # fmt: skip
    sizes = np.array([len(u) for u in units], np.int64)
    assert sizes.tolist() == [msgcodec.MIN_UNIT_SIZE + 1, msgcodec.MIN_UNIT_SIZE + 2]
    data, starts = b"".join(units), np.cumsum(sizes) - sizes
    queue = np.array([100, 101], np.int64)
    physical = np.array([5000, 5300], np.int64)
    assert reference_check_units(data, starts, sizes, queue, physical) == 2
    assert check_units(data, starts, sizes, queue, physical) == 2
    assert check_batch(data, sizes, 100, physical).good == 2
    assert crc_mismatches(data, starts) == []
