"""Message units to Arrow: the rows of the ``rocketmq_tiered`` table, decoded a batch at a time.

The table's columns and types. The reader decodes with the compiled kernel
(:mod:`tiered.jobs.tier_decode`); :func:`decode_batch`, written with numpy and Arrow compute, is
the reference its tests hold it to.

The units of one read lie in one buffer; every column is built from the whole batch with numpy
gathers and Arrow compute kernels (properties split on ``\\x02`` then ``\\x01``, ``KEYS`` split on
spaces, hosts decoded once per distinct address). Python touches single messages only to
decompress a compressed body (one codec call each) and, for a unit whose properties are not UTF-8,
to decode them the way :func:`tiered.broker.message.decode_properties` does.

Columns are named as RocketMQ's ``MessageExt`` spells them; a column the query's schema leaves out
is never built (no body is decompressed when ``body`` is not asked for).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from tiered.broker import message as msgcodec
from tiered.broker.unit_fields import as_uint8
from tiered.broker.unit_fields import gather_be

Int64s = npt.NDArray[np.int64]

TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
"""Spark's ``timestamp`` as Arrow carries it (microseconds, UTC)."""

COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("topic", "string"),
    ("queueId", "int"),
    ("queueOffset", "bigint"),
    ("commitLogOffset", "bigint"),
    ("storeTimestamp", "timestamp"),
    ("bornTimestamp", "timestamp"),
    ("bornHost", "string"),
    ("storeHost", "string"),
    ("msgId", "string"),
    ("uniqKey", "string"),
    ("keys", "array<string>"),
    ("tags", "string"),
    ("properties", "map<string,string>"),
    ("body", "binary"),
    ("sysFlag", "int"),
    ("flag", "int"),
    ("reconsumeTimes", "int"),
    ("bodyCrc", "int"),
    ("storeSize", "int"),
    ("broker", "string"),
    ("cluster", "string"),
)
"""The table's columns in order, with their Spark SQL types."""

SCHEMA_DDL: Final = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
"""The full schema as a Spark DDL string."""

_ARROW: Final[dict[str, pa.DataType]] = {
    "string": pa.string(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "timestamp": TIMESTAMP,
    "array<string>": pa.list_(pa.field("element", pa.string())),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
    "binary": pa.binary(),
}

_PROPERTY_COLUMNS: Final = frozenset({"msgId", "uniqKey", "keys", "tags", "properties"})
_HOST_V6_EXTRA: Final = 12
_HEX: Final = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def arrow_type(column: str) -> pa.DataType:
    """The Arrow type Spark expects for ``column`` of the full schema."""
    return _ARROW[dict(COLUMNS)[column]]


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    """The Arrow schema of a batch with ``columns`` (names of :data:`COLUMNS`)."""
    return pa.schema([pa.field(c, arrow_type(c)) for c in columns])


def constant_strings(value: str, n: int) -> pa.Array:
    """``value`` ``n`` times, as a string array."""
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def _views(data: pa.Buffer, starts: Int64s, lengths: Int64s, kind: pa.DataType) -> pa.Array:
    """The spans ``[starts[i], starts[i] + lengths[i])`` of ``data`` as a ``kind`` (binary)
    array: Arrow views into ``data`` built with numpy, then one C++ cast packs them (no per-byte
    index, no Python per value)."""
    n = len(starts)
    if len(data) >= 2**31:
        raise ValueError(f"a read of {len(data)} bytes: read less than 2 GiB at once")
    buf = np.frombuffer(data, dtype=np.uint8)
    views = np.zeros((n, 16), dtype=np.uint8)  # Arrow's view layout, little-endian
    views[:, 0:4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
    inline = lengths <= 12
    short = np.flatnonzero(inline)
    if short.size:  # up to 12 bytes live in the view itself, zero-padded
        idx = np.minimum(starts[short, None] + np.arange(12), len(buf) - 1)
        head = np.take(buf, idx)
        head[np.arange(12)[None, :] >= lengths[short, None]] = 0
        views[short, 4:16] = head
    far = np.flatnonzero(~inline)
    if far.size:  # a 4-byte prefix, buffer 0, offset
        views[far, 4:8] = np.take(buf, starts[far, None] + np.arange(4))
        views[far, 12:16] = starts[far].astype("<i4").view(np.uint8).reshape(-1, 4)
    arr = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), data])
    return arr.cast(kind)


def _hosts(buf: npt.NDArray[np.uint8], at: Int64s, v6: npt.NDArray[np.bool_]) -> pa.Array:
    """``ip:port`` strings of the host fields at ``at`` (20 bytes where ``v6``, else 8): each
    distinct address formatted once, ports by Arrow."""
    names: list[str] = []
    index = np.zeros(len(at), dtype=np.int32)
    port = np.zeros(len(at), dtype=np.int64)
    for width, rows in ((4, np.flatnonzero(~v6)), (16, np.flatnonzero(v6))):
        if not rows.size:
            continue
        raw = np.ascontiguousarray(np.take(buf, at[rows, None] + np.arange(width)))
        voids = raw.view(np.dtype((np.void, width))).reshape(-1)
        uniq, inverse = np.unique(voids, return_inverse=True)
        index[rows] = len(names) + inverse.reshape(-1)
        names += [msgcodec.decode_host(bytes(u) + b"\0\0\0\0").rpartition(":")[0] for u in uniq]
        port[rows] = gather_be(buf, at[rows] + width, 4)
    hosts = pa.array(names, type=pa.string()).take(pa.array(index))
    ports = pc.cast(pa.array(port, type=pa.int32()), pa.string())
    return pc.binary_join_element_wise(hosts, ports, ":")


def _offset_msg_ids(
    buf: npt.NDArray[np.uint8], store_at: Int64s, v6: npt.NDArray[np.bool_], phys: Int64s
) -> list[str]:
    """``MessageDecoder.createMessageId``: store host bytes + physical offset, uppercase hex."""
    out = [""] * len(store_at)
    for width, rows in ((8, np.flatnonzero(~v6)), (20, np.flatnonzero(v6))):
        if not rows.size:
            continue
        host = np.take(buf, store_at[rows, None] + np.arange(width))
        off = phys[rows].astype(">i8").view(np.uint8).reshape(-1, 8)
        raw = np.concatenate([host, off], axis=1)
        hexed = np.ascontiguousarray(np.stack([_HEX[raw >> 4], _HEX[raw & 15]], axis=2))
        blob, w = hexed.tobytes().decode("ascii"), 2 * (width + 8)
        for i, r in enumerate(rows.tolist()):
            out[r] = blob[i * w : (i + 1) * w]
    return out


_PAIR: Final = r"(?s)^(?P<name>[^\x01]+)\x01(?P<value>.+)$"


def _property_text(data: pa.Buffer, at: Int64s, lengths: Int64s) -> pa.Array:
    """The properties of every unit as strings; a unit whose properties are not UTF-8 is decoded
    with replacement characters, as ``fetch`` decodes it."""
    raw = _views(data, at, lengths, pa.binary())
    try:
        return raw.cast(pa.string())  # validates UTF-8
    except pa.ArrowInvalid:  # rare: one by one, as msgcodec.decode_properties does
        return pa.array([v.decode("utf-8", "replace") for v in raw.to_pylist()], type=pa.string())


def _properties(text: pa.Array) -> pa.MapArray:
    """Java ``string2messageProperties`` over a batch: items split on ``\x02``, each split at its
    first ``\x01``; an item without a name or a value is dropped."""
    n = len(text)
    items = pc.split_pattern(text, "\x02")
    parents = pc.list_parent_indices(items).to_numpy()
    pairs = pc.extract_regex(pc.list_flatten(items), _PAIR)
    keep = pairs.is_valid()
    counts = np.bincount(parents[keep.to_numpy(zero_copy_only=False)], minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    kept = pairs.filter(keep)
    return pa.MapArray.from_arrays(
        pa.array(offsets),
        kept.field("name"),
        kept.field("value"),
        type=_ARROW["map<string,string>"],
    )


def _keys(props: pa.MapArray) -> pa.Array:
    """``KEYS`` split on single spaces (Java ``split(" ")``), empty tokens dropped."""
    n = len(props)
    text = pc.fill_null(pc.map_lookup(props, "KEYS", "last"), "")
    tokens = pc.split_pattern(text, " ")
    parents = pc.list_parent_indices(tokens).to_numpy()
    flat = pc.list_flatten(tokens)
    keep = pc.greater(pc.utf8_length(flat), 0)
    counts = np.bincount(parents[keep.to_numpy(zero_copy_only=False)], minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets), flat.filter(keep), type=_ARROW["array<string>"]
    )


def _bodies(
    data: pa.Buffer, at: Int64s, lengths: Int64s, sys_flag: Int64s, where: Callable[[int], str]
) -> pa.Array:
    """The bodies as the producer sent them: stored bytes packed by one cast, compressed ones
    decompressed (one codec call each)."""
    stored = _views(data, at, lengths, pa.binary())
    compressed = np.flatnonzero(sys_flag & msgcodec.COMPRESSED_FLAG)
    if not compressed.size:
        return stored
    return decompressed(stored, compressed, sys_flag[compressed], where)


def decompressed(
    stored: pa.Array,
    rows: npt.NDArray[Any],
    sys_flags: npt.NDArray[Any],
    where: Callable[[int], str],
) -> pa.Array:
    """``stored`` bodies with those of ``rows`` (compressed, as their ``sys_flags`` say)
    decompressed, one codec call each; ``where(row)`` names a row for an error."""
    plain = []
    for i, flag in zip(rows.tolist(), sys_flags.tolist(), strict=True):
        try:
            plain.append(msgcodec.decompress_body(stored[i].as_py(), flag))
        except Exception as e:  # CorruptStoreFileError or an unknown compression type
            raise type(e)(f"{where(i)}: {e}") from e
    mask = np.zeros(len(stored), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(stored, pa.array(mask), pa.array(plain, type=pa.binary()))


def decode_batch(
    data: bytes | bytearray | memoryview,
    starts: Int64s,
    sizes: Int64s,
    columns: Sequence[str],
    *,
    topic: str,
    broker: str,
    cluster: str,
    where: Callable[[int], str] | None = None,
) -> pa.RecordBatch:
    """The units at ``starts`` (``sizes`` bytes each) of ``data`` as a batch with ``columns``.

    The units must have passed the read path's checks (TOTALSIZE, magic, field lengths:
    :func:`tiered.broker.unit_fields.property_spans`); ``where(i)`` names unit ``i`` for a
    decompression error (object and offset).
    """
    n = len(starts)
    buf = as_uint8(data)
    whole = pa.py_buffer(data)
    starts = np.asarray(starts, dtype=np.int64)
    want = set(columns)
    sys_flag = gather_be(buf, starts + msgcodec.SYSFLAG_POSITION, 4)
    born_v6 = (sys_flag & msgcodec.BORNHOST_V6_FLAG) != 0
    store_v6 = (sys_flag & msgcodec.STOREHOST_V6_FLAG) != 0
    born_extra = np.where(born_v6, _HOST_V6_EXTRA, 0)
    store_ts_at = starts + msgcodec.BORN_HOST_POSITION + 8 + born_extra
    store_host_at = store_ts_at + 8
    tail_at = store_host_at + 8 + np.where(store_v6, _HOST_V6_EXTRA, 0)
    out: dict[str, pa.Array] = {}

    def ints(pos: Int64s, width: int, kind: pa.DataType) -> pa.Array:
        return pa.array(gather_be(buf, pos, width), type=kind)

    def times(pos: Int64s) -> pa.Array:
        return pa.array(gather_be(buf, pos, 8) * 1000, type=TIMESTAMP)

    if "topic" in want:
        out["topic"] = constant_strings(topic, n)
    if "broker" in want:
        out["broker"] = constant_strings(broker, n)
    if "cluster" in want:
        out["cluster"] = constant_strings(cluster, n)
    if "queueId" in want:
        out["queueId"] = ints(starts + 12, 4, pa.int32())
    if "flag" in want:
        out["flag"] = ints(starts + 16, 4, pa.int32())
    if "queueOffset" in want:
        out["queueOffset"] = ints(starts + msgcodec.QUEUE_OFFSET_POSITION, 8, pa.int64())
    phys = gather_be(buf, starts + msgcodec.PHYSICAL_OFFSET_POSITION, 8)
    if "commitLogOffset" in want:
        out["commitLogOffset"] = pa.array(phys, type=pa.int64())
    if "sysFlag" in want:
        out["sysFlag"] = pa.array(sys_flag, type=pa.int32())
    if "bodyCrc" in want:
        out["bodyCrc"] = ints(starts + 8, 4, pa.int32())
    if "storeSize" in want:
        out["storeSize"] = ints(starts, 4, pa.int32())
    if "bornTimestamp" in want:
        out["bornTimestamp"] = times(starts + 40)
    if "storeTimestamp" in want:
        out["storeTimestamp"] = times(store_ts_at)
    if "bornHost" in want:
        out["bornHost"] = _hosts(buf, starts + msgcodec.BORN_HOST_POSITION, born_v6)
    if "storeHost" in want:
        out["storeHost"] = _hosts(buf, store_host_at, store_v6)
    if "reconsumeTimes" in want:
        out["reconsumeTimes"] = ints(tail_at, 4, pa.int32())
    body_len_at = tail_at + 12
    if "body" in want:
        body_len = gather_be(buf, body_len_at, 4)
        name = where or (lambda i: f"unit at byte {int(starts[i])}")
        out["body"] = _bodies(whole, body_len_at + 4, body_len, sys_flag, name)
    if want & _PROPERTY_COLUMNS:
        at, length = _property_spans(buf, starts, gather_be(buf, starts, 4), body_len_at)
        props = _properties(_property_text(whole, at, length))
        uniq = pc.map_lookup(props, msgcodec.PROPERTY_UNIQ_KEY, "last")
        if "properties" in want:
            out["properties"] = props
        if "keys" in want:
            out["keys"] = _keys(props)
        if "tags" in want:
            out["tags"] = pc.map_lookup(props, msgcodec.PROPERTY_TAGS, "last")
        if "uniqKey" in want:
            out["uniqKey"] = uniq
        if "msgId" in want:
            mask = uniq.is_null()
            missing = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
            if missing.size:  # no UNIQ_KEY: the offset message id, as MessageExt.getMsgId
                ids = _offset_msg_ids(buf, store_host_at[missing], store_v6[missing], phys[missing])
                uniq = pc.replace_with_mask(uniq, mask, pa.array(ids, type=pa.string()))
            out["msgId"] = uniq
    return pa.RecordBatch.from_arrays([out[c] for c in columns], schema=arrow_schema(columns))


def _property_spans(
    buf: npt.NDArray[np.uint8], starts: Int64s, size: Int64s, body_len_at: Int64s
) -> tuple[Int64s, Int64s]:
    """Where each unit's properties are (the unit's checks have passed: lengths add up)."""
    body_len = gather_be(buf, body_len_at, 4)
    topic_at = body_len_at + 4 + body_len
    v2 = gather_be(buf, starts + 4, 4) == msgcodec.MAGIC_V2
    topic_len = np.where(v2, gather_be(buf, topic_at, 2), gather_be(buf, topic_at, 1))
    props_len_at = topic_at + np.where(v2, 2, 1) + topic_len
    length = (starts + size) - (props_len_at + 2)
    return props_len_at + 2, length
