"""The kernel's decoder of the tier table (:func:`tiered.jobs.tier_decode.decode_read`) against
the Arrow decoder (:func:`tiered.jobs.tier_batch.decode_batch`, itself held to ``fetch``) and the
read path's unit checks written out here in plain Python: equal batches and equal verdicts over
generated units -- properties with odd separators, empty names and values, repeated names, bytes
that are not UTF-8; v1 and v2; IPv4 and IPv6 hosts of any address and port; compressed bodies --
and over damaged ones (a flipped byte anywhere, a wrong size or flat offset, a torn read, a legacy
coda before a unit), with any subset of the columns and any bounds."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from tiered.jobs.tier_batch import COLUMNS
from tiered.jobs.tier_batch import decode_batch
from tiered.jobs.tier_decode import BAD_CRC
from tiered.jobs.tier_decode import BAD_HEADER
from tiered.jobs.tier_decode import BAD_LENGTHS
from tiered.jobs.tier_decode import KEPT
from tiered.jobs.tier_decode import OUTSIDE
from tiered.jobs.tier_decode import decode_read

from tiered.broker import message as msgcodec
from tiered.broker.unit_fields import property_spans
from tiered.errors import BrokerStoreError
from tiered.errors import CorruptStoreFileError
from tiered.metadata import LONG_MAX
from tiered.process.native import kernel

ALL = [name for name, _ in COLUMNS]
BASE_FLAT = 1 << 20
T0 = 1_700_000_000_000

# property sections built from pieces that stress the splitting: separators in odd places,
# empty names and values, repeated names, the names the table reads, invalid UTF-8
_PIECES = st.sampled_from(
    [b"\x01", b"\x02", b"\x01\x01", b"\x02\x02", b"TAGS", b"KEYS", b"UNIQ_KEY", b"a", b"b c",
     b" ", "é".encode(), "键".encode(), "😀".encode(), b"\xff", b"\xe9", b"\xed\xa0\x80",
     b"\xf0\x9f", b"\xc3", b"\x80", b"TAGS\x01T\x02", b"KEYS\x01 k1  k2 \x02"]
)  # fmt: skip
_PROPS = st.lists(_PIECES, max_size=12).map(b"".join)
_HOST4 = st.tuples(st.binary(min_size=4, max_size=4), st.integers(-(2**31), 2**31 - 1))
_HOST6 = st.tuples(
    st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0xABC, 0x1234]), min_size=8, max_size=8).map(
        lambda g: struct.pack(">8H", *g)
    ),
    st.integers(-(2**31), 2**31 - 1),
)
_UNIT = st.fixed_dictionaries(
    {
        "props": _PROPS,
        "born": st.one_of(_HOST4, _HOST6),
        "store": st.one_of(_HOST4, _HOST6),
        "v2": st.booleans(),
        "topic": st.sampled_from(["T", "Orders", "订单"]),
        "body": st.binary(max_size=40),  # from the smallest unit (91 bytes and a topic)
        "zip": st.sampled_from([None, None, "ZLIB", "LZ4", "ZSTD"]),
        "dt": st.integers(0, 20),
        "reconsume": st.integers(-3, 3),
        "flag": st.integers(-(2**31), 2**31 - 1),
    }
)


def build(specs: list[dict[str, Any]]) -> tuple[bytearray, list[int], list[int], list[int]]:
    """The units back to back, each at queue offset ``7 + i`` and at its flat offset."""
    data, starts, sizes, flat = bytearray(), [], [], []
    for i, s in enumerate(specs):
        body, flag = s["body"], 0
        if s["zip"]:
            body, flag = msgcodec.compress_body(body, s["zip"]), msgcodec.compression_bits(s["zip"])
        unit = msgcodec.encode(
            topic=s["topic"], queue_id=3, queue_offset=7 + i, physical_offset=BASE_FLAT + len(data),
            body=body, properties=s["props"], born_timestamp=T0 - 5, store_timestamp=T0 + s["dt"],
            born_host=s["born"][0] + struct.pack(">i", s["born"][1]),
            store_host=s["store"][0] + struct.pack(">i", s["store"][1]),
            sys_flag=flag, flag=s["flag"], reconsume_times=s["reconsume"], v2=s["v2"],
        )  # fmt: skip
        flat.append(BASE_FLAT + len(data))
        starts.append(len(data))
        sizes.append(len(unit))
        data += unit
    return data, starts, sizes, flat


def i32(data: bytes | bytearray, at: int) -> int:
    return int(struct.unpack_from(">i", data, at)[0])


def i64(data: bytes | bytearray, at: int) -> int:
    return int(struct.unpack_from(">q", data, at)[0])


def reference(
    data: bytes | bytearray,
    starts: list[int],
    sizes: list[int],
    flat: list[int],
    first_q: int | None,
    bounds: tuple[int, int, int, int],
) -> tuple[list[int], list[int]]:
    """The read path's checks one unit at a time: each unit's verdict and (coda skipped) start."""
    q_lo, q_hi, t_lo, t_hi = bounds
    timed = t_lo > 0 or t_hi < LONG_MAX
    verdicts, moved = [], []
    for i, (pointed, z) in enumerate(zip(starts, sizes, strict=True)):
        coda = pointed + 8 <= len(data) and i32(data, pointed + 4) == msgcodec.BLANK_MAGIC
        s = pointed + 16 if coda else pointed
        moved.append(s)
        inside = s >= 0 and z >= msgcodec.MIN_UNIT_SIZE and s + z <= len(data)
        q = first_q + i if first_q is not None else i64(data, s + 20) if inside else -1
        if not (
            inside
            and i32(data, s) == z
            and i32(data, s + 4) in (msgcodec.MAGIC_V1, msgcodec.MAGIC_V2)
            and i64(data, s + 20) == q
            and i64(data, s + 28) == flat[i]
        ):
            verdicts.append(BAD_HEADER)
            continue
        if property_spans(data, np.array([s]), np.array([z]))[1][0] < 0:
            verdicts.append(BAD_LENGTHS)
            continue
        stored = msgcodec.store_timestamp_of(bytes(data), s)
        if not (q_lo <= q < q_hi and (not timed or t_lo <= stored < t_hi)):
            verdicts.append(OUTSIDE)
            continue
        sys_flag = i32(data, s + 36)
        body_at = s + 84 + (12 if sys_flag & 0x10 else 0) + (12 if sys_flag & 0x20 else 0)
        body = bytes(data[body_at + 4 : body_at + 4 + i32(data, body_at)])
        crc_ok = zlib.crc32(body) & 0x7FFFFFFF == i32(data, s + 8)
        verdicts.append(KEPT if crc_ok else BAD_CRC)
    return verdicts, moved


def compare(
    data: bytes | bytearray,
    starts: list[int],
    sizes: list[int],
    flat: list[int],
    columns: list[str],
    first_q: int | None = 7,
    bounds: tuple[int, int, int, int] = (0, LONG_MAX, 0, LONG_MAX),
) -> tuple[list[int], pa.RecordBatch | None]:
    """Decode with the kernel and with the references; both agree (or both fail to decompress
    the same body, with the same error)."""
    verdicts, moved = reference(data, starts, sizes, flat, first_q, bounds)
    kept = [i for i, v in enumerate(verdicts) if v == KEPT]
    names: dict[str, Any] = {"topic": "Orders", "broker": "broker-a", "cluster": "C"}
    try:
        want = decode_batch(
            bytes(data), np.array([moved[i] for i in kept], dtype=np.int64),
            np.array([sizes[i] for i in kept], dtype=np.int64), columns,
            where=lambda r: f"unit {kept[r]}", **names,
        )  # fmt: skip
    except BrokerStoreError as e:  # a body that does not decompress, or an unknown codec
        with pytest.raises(type(e), match=str(e).split(":")[0]):
            decode_read(data, np.array(starts), np.array(sizes), np.array(flat), columns,
                        first_queue_offset=first_q, bounds=bounds,
                        where=lambda i: f"unit {i}", **names)  # fmt: skip
        return verdicts, None
    got = decode_read(data, np.array(starts), np.array(sizes), np.array(flat), columns,
                      first_queue_offset=first_q, bounds=bounds, **names)  # fmt: skip
    assert got.verdicts.tolist() == verdicts
    if first_q is not None:
        assert got.queue_offsets.tolist() == [first_q + i for i in range(len(starts))]
    got.batch.validate(full=True)
    assert got.batch.schema == want.schema
    for c in columns:  # a flipped time may be out of Python's range: compared as Arrow
        assert got.batch.column(c).equals(want.column(c)), (c, got.batch.column(c), want.column(c))
    assert got.batch.equals(want)
    return verdicts, got.batch


_COLUMN_SETS = st.one_of(
    st.just(ALL),
    st.just(["tags"]),
    st.lists(st.sampled_from(ALL), min_size=1, max_size=6, unique=True),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_UNIT, min_size=1, max_size=8), _COLUMN_SETS)
def test_sound_units_decode_as_the_arrow_decoder_does(
    specs: list[dict[str, Any]], columns: list[str]
) -> None:
    data, starts, sizes, flat = build(specs)
    verdicts, _ = compare(data, starts, sizes, flat, columns)
    assert verdicts == [KEPT] * len(specs)


_DAMAGE = st.sampled_from(["flip", "flip", "flip", "size", "flat", "torn", "coda", "crc", "props"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_UNIT, min_size=1, max_size=6),
    st.lists(st.tuples(_DAMAGE, st.integers(0, 10_000), st.integers(1, 255)), max_size=3),
    _COLUMN_SETS,
    st.booleans(),
)
def test_damaged_units_get_the_read_paths_verdicts(
    specs: list[dict[str, Any]],
    damages: list[tuple[str, int, int]],
    columns: list[str],
    from_units: bool,
) -> None:
    data, starts, sizes, flat = build(specs)

    def flip(at: int, mask: int) -> None:
        data[min(at, len(data) - 1)] ^= mask  # a torn read may have cut it off

    for kind, at, value in damages:
        i = at % len(specs)
        s = starts[i]
        if kind == "flip":
            flip(s + at % sizes[i], value)
        elif kind == "size":
            sizes[i] += 1 if value % 2 else -1
        elif kind == "flat":
            flat[i] += value
        elif kind == "torn":
            del data[len(data) - 1 - at % 40 :]
        elif kind == "crc":
            flip(s + 8 + value % 4, 0x40)
        elif kind == "props":  # the properties length disagrees with TOTALSIZE
            flip(s + sizes[i] - 1 - value % 3 - len(specs[i]["props"]), 1 << value % 8)
        elif kind == "coda":  # a 16-byte coda where the consumequeue unit points
            coda = struct.pack(">ii", 16, msgcodec.BLANK_MAGIC) + bytes(8)
            data[s:s] = coda
            starts[i + 1 :] = [x + 16 for x in starts[i + 1 :]]
    compare(data, starts, sizes, flat, columns, None if from_units else 7)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_UNIT, min_size=1, max_size=8),
    st.tuples(st.integers(0, 16), st.integers(0, 16)),
    st.tuples(st.integers(T0 - 2, T0 + 22), st.integers(T0 - 2, T0 + 22)),
    st.booleans(),
)
def test_bounds_keep_what_the_read_path_keeps(
    specs: list[dict[str, Any]], q: tuple[int, int], t: tuple[int, int], timed: bool
) -> None:
    data, starts, sizes, flat = build(specs)
    bounds = (q[0], q[1], *(t if timed else (0, LONG_MAX)))
    compare(data, starts, sizes, flat, ["queueOffset", "storeTimestamp", "tags"], 7, bounds)


def test_negative_store_times_stay_in_without_a_time_bound() -> None:
    data, starts, sizes, flat = build([{
        "props": b"TAGS\x01A\x02", "born": (b"\1\2\3\4", 1), "store": (b"\1\2\3\4", 2),
        "v2": False, "topic": "T", "body": b"x", "zip": None, "dt": -T0 - 9, "reconsume": 0,
        "flag": 0,
    }])  # fmt: skip
    verdicts, batch = compare(data, starts, sizes, flat, ["storeTimestamp"])
    assert verdicts == [KEPT] and batch is not None
    assert batch.column(0).cast(pa.int64()).to_pylist() == [-9000]


def test_a_body_that_does_not_decompress_is_named() -> None:
    spec = {
        "props": b"", "born": (b"\1\2\3\4", 1), "store": (b"\1\2\3\4", 2), "v2": False,
        "topic": "T", "body": b"plain", "zip": "ZLIB", "dt": 0, "reconsume": 0, "flag": 0,
    }  # fmt: skip
    data, starts, sizes, flat = build([spec, {**spec, "zip": None}, spec])
    body_at = starts[2] + 84 + 4
    data[body_at] ^= 0xFF  # not zlib any more, with a CRC that matches
    body = data[body_at : body_at + i32(data, body_at - 4)]
    struct.pack_into(">i", data, starts[2] + 8, zlib.crc32(body) & 0x7FFFFFFF)
    with pytest.raises(CorruptStoreFileError, match="object X unit 2: body is not valid ZLIB"):
        decode_read(data, np.array(starts), np.array(sizes), np.array(flat), ["body"],
                    first_queue_offset=7, topic="T", broker="b", cluster="c",
                    where=lambda i: f"object X unit {i}")  # fmt: skip
    # without the body column the damaged body is never decompressed
    got = decode_read(data, np.array(starts), np.array(sizes), np.array(flat), ["tags"],
                      first_queue_offset=7, topic="T", broker="b", cluster="c")  # fmt: skip
    assert got.batch.num_rows == 3


def test_a_column_the_kernel_does_not_know_is_refused() -> None:
    data, starts, sizes, flat = build([])
    with pytest.raises(ValueError, match='column "nope" is not one the kernel decodes'):
        decode_read(data, np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64),
                    np.array(flat, dtype=np.int64), ["nope"], first_queue_offset=0, topic="T",
                    broker="b", cluster="c")  # fmt: skip


def _crc_fixed(data: bytearray, start: int) -> None:
    """Give the unit at ``start`` (IPv4 hosts) the CRC of the body it now holds."""
    n = i32(data, start + 84)
    struct.pack_into(
        ">i", data, start + 8, zlib.crc32(data[start + 88 : start + 88 + n]) & 0x7FFFFFFF
    )


def test_the_kernel_decompresses_and_leaves_python_what_does_not_decompress() -> None:
    body = b"a body " * 40
    base = {
        "props": b"", "born": (b"\1\2\3\4", 1), "store": (b"\1\2\3\4", 2), "v2": False,
        "topic": "T", "body": body, "dt": 0, "reconsume": 0, "flag": 0,
    }  # fmt: skip
    codecs = ["ZLIB", "LZ4", "ZSTD"]
    data, starts, sizes, flat = build([{**base, "zip": z} for z in codecs])
    columns = (data, np.array(starts), np.array(sizes), 7, np.array(flat), (0, 99, 0, LONG_MAX))
    _, _, built, left = kernel().decode_units(*columns, ["body"])
    assert np.frombuffer(left, dtype=np.int64).size == 0  # all three in the kernel
    assert bytes(built["body"][1]) == body * 3
    # a ZSTD frame cut short (CRC made to match): Python's decompressobj returns what it has
    cut = msgcodec.compress_body(b"z" * 300, "ZSTD")[:-4]
    data, starts, sizes, flat = build([{**base, "zip": "ZSTD"}, {**base, "zip": None}])
    unit = msgcodec.encode(
        topic="T", queue_id=3, queue_offset=9, physical_offset=BASE_FLAT + len(data), body=cut,
        properties=b"", born_timestamp=T0, store_timestamp=T0, born_host=b"\1\2\3\4\0\0\0\1",
        store_host=b"\1\2\3\4\0\0\0\2", sys_flag=msgcodec.compression_bits("ZSTD"),
    )  # fmt: skip
    starts.append(len(data))
    sizes.append(len(unit))
    flat.append(BASE_FLAT + len(data))
    data += unit
    _crc_fixed(data, starts[2])
    _, batch = compare(data, starts, sizes, flat, ["body", "queueOffset"])
    assert batch is not None and batch.column(0)[2].as_py() == msgcodec.decompress_body(cut, 0x201)
