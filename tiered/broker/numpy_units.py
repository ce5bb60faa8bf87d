"""The reference implementations, with numpy, of the unit checks the compiled kernel does in one
loop (:mod:`tiered.broker.unit_fields`): every function reads one header field of all units with
a few array passes. The sidecar runs the kernel; the tests hold it to these."""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.unit_fields import _LANES
from tiered.broker.unit_fields import _STORE_TS_V4
from tiered.broker.unit_fields import _V6_EXTRA
from tiered.broker.unit_fields import as_uint8
from tiered.broker.unit_fields import gather_be

_BODY_LEN_V4 = msgcodec.BORN_HOST_POSITION + 8 + 8 + 8 + 4 + 8

Int64s = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview


def reference_store_timestamps(data: Buffer, starts: Int64s) -> Int64s:
    """The store timestamp of each unit (IPv6 born hosts honoured, unlike Java's fixed byte 56)."""
    if not len(starts):
        return np.zeros(0, dtype=np.int64)
    buf = as_uint8(data)
    sys_flag = gather_be(buf, starts + msgcodec.SYSFLAG_POSITION, 4)
    v6 = (sys_flag & msgcodec.BORNHOST_V6_FLAG) != 0
    return gather_be(buf, starts + _STORE_TS_V4 + np.where(v6, _V6_EXTRA, 0), 8)


def reference_rewrite_physical_offsets(data: bytearray, starts: Int64s, offsets: Int64s) -> None:
    """Write ``offsets[i]`` big-endian into bytes 28..35 of the unit at ``starts[i]``, in place."""
    if not len(starts):
        return
    buf = as_uint8(data)
    index = (starts + msgcodec.PHYSICAL_OFFSET_POSITION)[:, None] + _LANES[8]
    np.put(buf, index, np.asarray(offsets, dtype=">i8").view(np.uint8))


def reference_check_units(
    data: Buffer,
    starts: Int64s,
    sizes: Int64s,
    queue_offsets: Int64s,
    physical_offsets: Int64s | None = None,
) -> int:
    """Index of the first unit whose header disagrees (TOTALSIZE, magic, queue offset and, when
    given, physical offset), or ``len(starts)`` when all agree."""
    n = len(starts)
    if not n:
        return 0
    if int(starts[-1] + sizes[-1]) > len(data) or int(sizes.min()) < msgcodec.MIN_UNIT_SIZE:
        ok = (starts + sizes <= len(data)) & (sizes >= msgcodec.MIN_UNIT_SIZE)
        n = int(np.argmin(ok)) if not ok.all() else n
        starts, sizes, queue_offsets = starts[:n], sizes[:n], queue_offsets[:n]
        if physical_offsets is not None:
            physical_offsets = physical_offsets[:n]
        if not n:
            return 0
    buf = as_uint8(data)
    good = gather_be(buf, starts, 4) == sizes
    magic = gather_be(buf, starts + 4, 4)
    good &= (magic == msgcodec.MAGIC_V1) | (magic == msgcodec.MAGIC_V2)
    good &= gather_be(buf, starts + msgcodec.QUEUE_OFFSET_POSITION, 8) == queue_offsets
    if physical_offsets is not None:
        good &= gather_be(buf, starts + msgcodec.PHYSICAL_OFFSET_POSITION, 8) == physical_offsets
    bad = np.flatnonzero(~good)
    return int(bad[0]) if bad.size else n


def reference_crc_mismatches(data: bytes | bytearray | memoryview, starts: Int64s) -> list[int]:
    """Indexes of units whose body does not match BODYCRC (hosts located from each sysflag); a
    unit whose body is not inside ``data`` (its length field outside it, a negative length, or
    a body past its end: a damaged sysflag or length) does not match, as in the kernel."""
    if not len(starts):
        return []
    buf = as_uint8(data)
    size = len(buf)
    inside = (starts >= 0) & (starts <= size - msgcodec.SYSFLAG_POSITION - 4)  # no overflow
    if not inside.any():
        return list(range(len(starts)))
    at = np.where(inside, starts, 0)  # gathers stay inside the buffer; outside units fail below
    flags = gather_be(buf, at + msgcodec.SYSFLAG_POSITION, 4)
    extra = np.where(flags & msgcodec.BORNHOST_V6_FLAG, 12, 0)
    extra += np.where(flags & msgcodec.STOREHOST_V6_FLAG, 12, 0)
    len_at = at + _BODY_LEN_V4 + extra
    inside &= len_at + 4 <= size
    len_at = np.where(inside, len_at, 0)
    body_lens = gather_be(buf, len_at, 4)  # signed
    stored = gather_be(buf, at + 8, 4)
    view = memoryview(data)
    bad = []
    fields = zip(
        inside.tolist(), (len_at + 4).tolist(), body_lens.tolist(), stored.tolist(), strict=True
    )
    for i, (ok, a, n, crc) in enumerate(fields):
        if not ok or n < 0 or a + n > size or zlib.crc32(view[a : a + n]) & 0x7FFFFFFF != crc:
            bad.append(i)
    return bad
