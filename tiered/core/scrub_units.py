"""The unit and message checks of a scrub, on whole batches (numpy and the compiled kernel).

:func:`check_units_in_range` checks consumequeue units against the commitlog segments they point
into; :func:`check_messages` (``scrub --deep``) reads every unit of a queue's consumequeue and the
messages they point at, a batch per ranged read, and checks each message as a cold read does
(:func:`tiered.broker.unit_fields.check_units`: TOTALSIZE, magic, QUEUEOFFSET, PHYSICALOFFSET;
:func:`tiered.read.fetcher.crc_mismatches`: BODYCRC). Only a damaged batch is looked at unit by
unit, and then with numpy, to name the kind of each bad one; consecutive bad units of one kind
make one anomaly (its ``count``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.consumequeue import decode_units
from tiered.broker.unit_fields import as_uint8
from tiered.broker.unit_fields import check_units
from tiered.broker.unit_fields import gather_be
from tiered.core.scrub_report import Anomaly
from tiered.core.scrub_report import ScrubReport
from tiered.errors import SegmentNotFoundError
from tiered.providers.base import Provider
from tiered.read.fetcher import crc_mismatches

Int64s = npt.NDArray[np.int64]

UNITS_PER_READ = 65536
"""Consumequeue units one read of ``--deep`` takes (1.25 MiB)."""
BYTES_PER_READ = 16 << 20
"""Commitlog bytes one read of ``--deep`` takes at most (more only for one larger message)."""
_HEAD = msgcodec.PHYSICAL_OFFSET_POSITION + 8


class Seg(NamedTuple):
    """A recorded segment: ``size`` as recorded, ``usable`` the bytes both the record and the
    object hold (-1 when the object is missing), ``key`` its object."""

    base: int
    size: int
    usable: int
    key: str


Lost = Callable[[Seg], None]
"""Called when a listed object cannot be read any more (expiry may have removed it since)."""


@dataclass
class QueueFiles:
    """One queue's recorded segments, by base offset."""

    topic: str
    queue_id: int
    commitlog: list[Seg]
    consume_queue: list[Seg]


class _Commitlog:
    """The commitlog segments of a queue as arrays: bases, recorded ends, readable ends."""

    def __init__(self, segs: list[Seg]) -> None:
        self.segs = segs
        self.bases = np.array([s.base for s in segs], dtype=np.int64)
        self.ends = np.array([s.base + s.size for s in segs], dtype=np.int64)
        self.readable = np.array([s.base + max(s.usable, 0) for s in segs], dtype=np.int64)

    def locate(self, offs: Int64s) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """Per flat offset: the index of the last segment starting at or before it (0 when
        none), and whether it lies below the first segment (expired)."""
        idx = np.searchsorted(self.bases, offs, side="right") - 1
        return np.maximum(idx, 0), idx < 0


def runs(
    indexes: npt.NDArray[np.intp], keys: Int64s, groups: Int64s | None = None
) -> list[tuple[int, int]]:
    """``(first, length)`` of each run of ``indexes`` (sorted) whose ``keys`` (queue offsets)
    follow each other by one, in one group (``groups[i]``: the segment unit ``i`` is in)."""
    if not len(indexes):
        return []
    step = np.diff(keys[indexes]) != 1
    if groups is not None:
        step |= np.diff(groups[indexes]) != 0
    starts = np.concatenate(([0], np.flatnonzero(step) + 1))
    lengths = np.diff(np.concatenate((starts, [len(indexes)])))
    return [(int(indexes[s]), int(n)) for s, n in zip(starts, lengths, strict=True)]


def check_units_in_range(
    report: ScrubReport,
    q: QueueFiles,
    units: npt.NDArray[np.void],
    queue_offsets: Int64s,
    owners: Int64s,
    commitlog: _Commitlog | None = None,
) -> npt.NDArray[np.bool_]:
    """Report units that point past the end of their commitlog segment (or hold no size) as
    ``unit_out_of_range``, named by the consumequeue segment ``q.consume_queue[owners[i]]`` that
    holds unit ``i``; returns which units point inside bytes the commitlog objects hold (those
    whose messages can be read). Units below the first commitlog segment point at expired
    messages and are neither. One pass over the batch, whatever its size."""
    commitlog = commitlog or _Commitlog(q.commitlog)
    offs = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    report.units += len(offs)
    if not len(commitlog.segs):
        return np.zeros(len(offs), dtype=bool)
    idx, expired = commitlog.locate(offs)
    ends = offs + sizes
    bad = ~expired & ((sizes <= 0) | (ends > commitlog.ends[idx]))
    for i, n in runs(np.flatnonzero(bad), queue_offsets, owners):
        report.add(
            Anomaly(
                "unit_out_of_range",
                q.consume_queue[owners[i]].key,
                f"queue offset {int(queue_offsets[i])}: unit points at flat commitlog bytes "
                f"[{int(offs[i])}, {int(ends[i])}), past its segment's end "
                f"{int(commitlog.ends[idx[i]])}" + (f" ({n} units in a row)" if n > 1 else ""),
                q.topic,
                q.queue_id,
                "consume_queue",
                offset=int(offs[i]),
                queue_offset=int(queue_offsets[i]),
                expected=int(commitlog.ends[idx[i]]),
                found=int(ends[i]),
                count=n,
            )
        )
    readable: npt.NDArray[np.bool_] = ~expired & ~bad & (ends <= commitlog.readable[idx])
    return readable


def check_messages(provider: Provider, report: ScrubReport, q: QueueFiles, lost: Lost) -> None:
    """Every unit of the queue's consumequeue and the message it points at (see the module
    docstring); segments already reported missing or short are checked as far as they go."""
    commitlog = _Commitlog(q.commitlog)
    for owner, cq in enumerate(q.consume_queue):
        count = max(cq.usable, 0) // CQ_UNIT_SIZE
        first = cq.base // CQ_UNIT_SIZE
        for start in range(0, count, UNITS_PER_READ):
            n = min(UNITS_PER_READ, count - start)
            try:
                raw = provider.read(cq.key, start * CQ_UNIT_SIZE, n * CQ_UNIT_SIZE)
            except SegmentNotFoundError:
                lost(cq)
                break
            units = decode_units(raw[: len(raw) - len(raw) % CQ_UNIT_SIZE])
            qoffs = first + start + np.arange(len(units), dtype=np.int64)
            owners = np.full(len(units), owner, dtype=np.int64)
            readable = check_units_in_range(report, q, units, qoffs, owners, commitlog)
            if not readable.any():
                continue
            offs = units["offset"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            idx, _ = commitlog.locate(offs)
            for c in np.unique(idx[readable]):
                sel = np.flatnonzero(readable & (idx == c))
                _segment_messages(
                    provider, report, q, commitlog.segs[c], offs, sizes, qoffs, sel, lost
                )


def _segment_messages(
    provider: Provider,
    report: ScrubReport,
    q: QueueFiles,
    seg: Seg,
    offs: Int64s,
    sizes: Int64s,
    qoffs: Int64s,
    sel: npt.NDArray[np.intp],
    lost: Lost,
) -> None:
    """Check the messages of units ``sel`` (all in commitlog segment ``seg``), one ranged read
    per :data:`BYTES_PER_READ` of the segment."""
    sel = sel[np.argsort(offs[sel], kind="stable")]
    window = (offs[sel] - offs[sel[0]]) // BYTES_PER_READ
    for part in np.split(sel, np.flatnonzero(np.diff(window)) + 1):
        o, s, qo = offs[part], sizes[part], qoffs[part]
        lo, hi = int(o.min()), int((o + s).max())
        try:
            data = provider.read(seg.key, lo - seg.base, hi - lo)
        except SegmentNotFoundError:
            lost(seg)
            return
        report.messages += len(part)
        _verify(report, q, seg, data, o - lo, s, qo, o)


def _verify(
    report: ScrubReport,
    q: QueueFiles,
    seg: Seg,
    data: bytes,
    rel: Int64s,
    sizes: Int64s,
    qoffs: Int64s,
    offs: Int64s,
) -> None:
    """The kernel's checks of one batch; a batch that fails them is classified with numpy."""
    header_ok = np.ones(len(rel), dtype=bool)
    queue_ok = np.ones(len(rel), dtype=bool)
    if check_units(data, rel, sizes, qoffs, offs) < len(rel):
        buf = as_uint8(data)
        inside = (rel >= 0) & (rel + np.maximum(sizes, _HEAD) <= len(buf))
        pos = rel[inside]
        total = gather_be(buf, pos, 4)
        magic = gather_be(buf, pos + 4, 4)
        stored_q = gather_be(buf, pos + msgcodec.QUEUE_OFFSET_POSITION, 8)
        stored_p = gather_be(buf, pos + msgcodec.PHYSICAL_OFFSET_POSITION, 8)
        magic_ok = (magic == msgcodec.MAGIC_V1) | (magic == msgcodec.MAGIC_V2)
        header_ok[:] = False
        header_ok[inside] = (total == sizes[inside]) & magic_ok & (stored_p == offs[inside])
        queue_ok[inside] = stored_q == qoffs[inside]
    checked = np.flatnonzero(header_ok & queue_ok)
    crc_bad = checked[np.asarray(crc_mismatches(data, rel[checked]), dtype=np.intp)]
    found = {
        "message_header": np.flatnonzero(~header_ok),
        "queue_offset": np.flatnonzero(header_ok & ~queue_ok),
        "crc": np.sort(crc_bad),
    }
    what = {
        "message_header": "TOTALSIZE, magic or PHYSICALOFFSET disagrees with its unit",
        "queue_offset": "QUEUEOFFSET is not the unit's queue offset",
        "crc": "body does not match BODYCRC",
    }
    for kind, indexes in found.items():
        for i, n in runs(indexes, qoffs):
            more = f" ({n} messages in a row)" if n > 1 else ""
            report.add(
                Anomaly(
                    kind,
                    seg.key,
                    f"queue offset {int(qoffs[i])} at flat commitlog offset {int(offs[i])}: "
                    f"{what[kind]}{more}",
                    q.topic,
                    q.queue_id,
                    "commit_log",
                    offset=int(offs[i]),
                    queue_offset=int(qoffs[i]),
                    count=n,
                )
            )
