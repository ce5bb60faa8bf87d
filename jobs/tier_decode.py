"""A read's units to an Arrow batch of the ``rocketmq_tiered`` table, in the compiled kernel.

One kernel call (``tiered._kernel.decode_units``, without the interpreter lock) checks every unit
as the read path does (header against its consumequeue unit, field lengths, body CRC), keeps the
ones inside the partition's bounds and builds their columns as Arrow buffers, which are wrapped
here without a copy. Properties are split as Java's ``string2messageProperties`` splits them,
exactly as :func:`tiered.jobs.tier_batch.decode_batch` (the reference the tests hold this to)
does; compressed bodies are decompressed there too (zlib, LZ4, ZSTD). Python touches a single
message only for a body the kernel could not decompress (an unknown codec, or bytes that do not
decompress whole): Python's codecs then decompress it or raise, as ``fetch`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
from tiered.jobs.tier_batch import arrow_schema
from tiered.jobs.tier_batch import arrow_type
from tiered.jobs.tier_batch import constant_strings
from tiered.jobs.tier_batch import decompressed

from tiered.metadata import LONG_MAX
from tiered.process.native import kernel

Int64s = npt.NDArray[np.int64]

KEPT: Final = 0
"""A unit's verdict: decoded into the batch."""
BAD_HEADER: Final = 1
"""Its header disagrees with its consumequeue unit (TOTALSIZE, magic, queue or flat offset)."""
BAD_LENGTHS: Final = 2
"""Its field lengths do not add up to TOTALSIZE."""
BAD_CRC: Final = 3
"""Its body does not match BODYCRC."""
OUTSIDE: Final = 4
"""Sound, outside the bounds (queue offsets, store times): left out."""

_CONSTANT: Final = ("topic", "broker", "cluster")


@dataclass(frozen=True)
class Decoded:
    """The verdict and queue offset of every unit, and the batch of the ones kept."""

    verdicts: npt.NDArray[np.uint8]
    queue_offsets: Int64s
    batch: pa.RecordBatch

    @property
    def damaged(self) -> npt.NDArray[np.intp]:
        """Indexes of the units that failed a check."""
        return np.flatnonzero((self.verdicts != KEPT) & (self.verdicts != OUTSIDE))


def _strings(kind: pa.DataType, parts: tuple[Any, ...]) -> pa.Array:
    offsets, data, valid, nulls = parts
    rows = len(offsets) // 4 - 1
    bitmap = None if valid is None or not nulls else pa.py_buffer(valid)
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, rows, buffers, null_count=nulls)


def _column(name: str, parts: tuple[Any, ...], rows: int) -> pa.Array:
    kind = arrow_type(name)
    if name == "keys":
        offsets, items = parts
        values = _strings(kind.value_type, items)
        return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(offsets)], children=[values])
    if name == "properties":
        offsets, keys, values = parts
        entries = pa.StructArray.from_arrays(
            [_strings(pa.string(), keys), _strings(pa.string(), values)],
            fields=[kind.key_field, kind.item_field],
        )
        return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(offsets)], children=[entries])
    if len(parts) == 1:
        return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(parts[0])])
    return _strings(kind, parts)


def decode_read(
    data: bytes | bytearray | memoryview,
    starts: Int64s,
    sizes: Int64s,
    flat: Int64s,
    columns: Sequence[str],
    *,
    first_queue_offset: int | None,
    bounds: tuple[int, int, int, int] = (0, LONG_MAX, 0, LONG_MAX),
    topic: str,
    broker: str,
    cluster: str,
    where: Callable[[int], str] | None = None,
) -> Decoded:
    """Check the units at ``starts`` (``sizes`` bytes each) of ``data`` and decode the sound ones
    inside ``bounds`` into a batch with ``columns``.

    Unit ``i`` is expected at flat offset ``flat[i]`` and at queue offset ``first_queue_offset +
    i`` (``None``: at the one it holds, a key lookup's units); a start at a legacy coda is moved
    past it. ``bounds`` are ``(q_lo, q_hi, t_lo, t_hi)``, half-open, store times in epoch ms (a
    time bound applies when ``t_lo > 0`` or ``t_hi < LONG_MAX``); a damaged unit is left out,
    whatever the bounds, with its verdict. ``where(i)`` names unit ``i`` for a decompression
    error (object and offset).

    Raises:
        CorruptStoreFileError: a compressed body that does not decompress (named by ``where``).
    """
    q_lo, q_hi, t_lo, t_hi = bounds
    if not (t_lo > 0 or t_hi < LONG_MAX):  # no time bound: negative store times stay in
        t_lo, t_hi = -(2**63), 2**63 - 1
    want = [c for c in columns if c not in _CONSTANT]
    body = "body" in want
    asked = [*want, "sysFlag"] if body and "sysFlag" not in want else want
    verdicts, queue_offsets, built, compressed = kernel().decode_units(
        data,
        np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(sizes, dtype=np.int64),
        -1 if first_queue_offset is None else first_queue_offset,
        np.ascontiguousarray(flat, dtype=np.int64),
        (q_lo, q_hi, t_lo, t_hi),
        asked,
    )
    verdict = np.frombuffer(verdicts, dtype=np.uint8)
    rows = int(np.count_nonzero(verdict == KEPT))
    out = {name: _column(name, parts, rows) for name, parts in built.items()}
    for name, value in zip(_CONSTANT, (topic, broker, cluster), strict=True):
        if name in columns:
            out[name] = constant_strings(value, rows)
    packed = np.frombuffer(compressed, dtype=np.int64)
    if body and packed.size:
        flags = np.frombuffer(built["sysFlag"][0], dtype=np.int32)
        kept = np.flatnonzero(verdict == KEPT)
        said = where or (lambda i: f"unit {i} of the read")
        out["body"] = decompressed(out["body"], packed, flags[packed], lambda r: said(kept[r]))
    batch = pa.RecordBatch.from_arrays([out[c] for c in columns], schema=arrow_schema(columns))
    return Decoded(verdict, np.frombuffer(queue_offsets, dtype=np.int64), batch)
