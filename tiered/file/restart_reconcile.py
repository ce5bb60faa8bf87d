"""Restart reconciliation: make a queue's last segments agree with what the backend really holds.

A dispatch round uploads a batch's commitlog bytes, then its consumequeue units, then records the
new sizes in metadata, and a crash can stop it between any two steps: at start the backend may
hold more than the metadata says (never less, unless the backend itself lost data), and only the
**last** segment of each file can differ (a roll is recorded before anything is written to the
new segment). Unrecorded bytes are kept only as far as they are whole and agree; the rest is cut,
so every queue offset is in the flat consumequeue exactly once and resuming from its commit
offset re-reads exactly what is missing. See docs/design/crash-consistency.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.consumequeue import decode_units
from tiered.broker.unit_fields import check_units
from tiered.broker.unit_fields import store_timestamps
from tiered.errors import ProviderError
from tiered.metadata import LONG_MAX

from .flat_append_file import retrying
from .flat_commitlog import FlatCommitLogFile
from .flat_message_file import FlatMessageFile

log = logging.getLogger(__name__)

Units = npt.NDArray[np.void]
LocalUnits = Callable[[int, int], Units | None]
"""``(queue offset, count)`` -> the local consumequeue's units from there (fewer, or ``None``,
where the broker no longer has them)."""

_CHUNK_UNITS = 4096


@dataclass
class ReconcileReport:
    """What reconciliation found for one queue (byte counts are of the last segments)."""

    path: str
    commitlog_recorded: int = 0
    commitlog_real: int = 0
    consume_queue_recorded: int = 0
    consume_queue_real: int = 0
    kept_units: int = 0
    cut_bytes: int = 0
    orphan_bytes: int = 0  # commitlog bytes no unit points at: cut (or the segment emptied)
    emptied_commitlog: bool = False
    lost_bytes: int = 0

    @property
    def changed(self) -> bool:
        """Whether the backend disagreed with the metadata."""
        return (
            self.commitlog_recorded != self.commitlog_real
            or self.consume_queue_recorded != self.consume_queue_real
        )


def reconcile(flat: FlatMessageFile, local: LocalUnits | None = None) -> ReconcileReport:
    """Reconcile ``flat``'s last segments with the backend (see the module docstring).

    Commitlog bytes beyond the record are kept as far as a kept unit points into them; the rest
    is cut at the end of the last referenced message, so every segment decodes message by
    message from its start to its recorded size (upstream's ``splitMessageBuffer``, a scanner, a
    rebuild of the consumequeue from the commitlog all rely on it). The provider contract has no
    truncate, so a cut *moves past* the bad bytes: the record keeps the valid size, the segment
    is sealed, and a new one starts at the valid end (segment records, not object sizes, say
    what a segment holds, so the bytes beyond are never read). When the valid end is the
    segment's own start, the object is deleted and the segment starts over."""
    with flat.lock:
        report = ReconcileReport(flat.path)
        cl, cq = flat.commitlog, flat.consume_queue
        if cl.empty:
            return report
        cl_last = cl.segments[-1]
        report.commitlog_recorded = cl_last.size
        report.commitlog_real = cl.backend_size()
        report.lost_bytes += max(cl_last.size - report.commitlog_real, 0)
        cl.set_last_size(report.commitlog_real)
        cl_end = cl_last.base + report.commitlog_real
        referenced_end = -1
        if not cq.empty:
            referenced_end = _reconcile_consume_queue(flat, cl_end, local, report)
        if (
            report.commitlog_recorded == 0
            and report.commitlog_real > 0
            and (referenced_end <= cl_last.base)
        ):
            report.orphan_bytes = report.commitlog_real
            report.emptied_commitlog = True
            cl.reset_last()
        elif 0 <= referenced_end < cl_end:
            # bytes no unit points at: a torn or re-sent batch. Cut them (seal at the last
            # referenced message, go on in a new segment) so every segment walks message by
            # message from its start; the batch is sent again from the consumequeue's end.
            keep = max(referenced_end - cl_last.base, 0)
            report.orphan_bytes = cl_end - cl_last.base - keep
            if keep == 0:
                report.emptied_commitlog = True
                cl.reset_last()
            else:
                cl.set_last_size(keep)
                with flat.metadata.batch():
                    flat.flush_metadata()
                cl.roll()
        cl.forget_first_queue_offset()
        with flat.metadata.batch():
            flat.flush_metadata()
        if report.changed or report.lost_bytes:
            log.warning(
                "%s: reconciled with the backend: commitlog %d -> %d bytes (%d cut), "
                "consumequeue %d -> %d bytes (%d cut), %d unrecorded units kept%s",
                flat.path,
                report.commitlog_recorded,
                report.commitlog_real,
                report.orphan_bytes,
                report.consume_queue_recorded,
                report.consume_queue_real,
                report.cut_bytes,
                report.kept_units,
                f", {report.lost_bytes} recorded bytes MISSING in the backend"
                if report.lost_bytes
                else "",
            )
        return report


def _reconcile_consume_queue(
    flat: FlatMessageFile, cl_end: int, local: LocalUnits | None, report: ReconcileReport
) -> int:
    """Settle the last consumequeue segment; returns the end of the last unit's message.

    Units beyond the record are kept only as whole 20-byte units that each point at a whole
    message in the flat commitlog (right TOTALSIZE and magic, the unit's queue offset, its own
    flat offset in bytes 28..35) and agree with the local consumequeue (same size and tags code)
    where the broker still has it; the first unit that fails, and everything after it, is cut."""
    cq = flat.consume_queue
    seg = cq.segments[-1]
    recorded, real = seg.size, cq.backend_size()
    report.consume_queue_recorded, report.consume_queue_real = recorded, real
    report.lost_bytes += max(recorded - real, 0)
    valid = min(recorded, real)
    valid -= valid % CQ_UNIT_SIZE
    if report.commitlog_real < report.commitlog_recorded:
        # the backend lost recorded commitlog bytes: keep only units whose messages remain
        valid = _units_within(flat, seg.base, valid, cl_end) if valid else 0
    elif real - valid >= CQ_UNIT_SIZE:
        count = (real - valid) // CQ_UNIT_SIZE
        kept, begin, end = _valid_extra_units(flat, seg.base + valid, count, cl_end, local)
        report.kept_units = kept
        valid += kept * CQ_UNIT_SIZE
        if kept:  # the kept units' messages widen both last segments' time ranges
            cq.extend_last_timestamps(begin, end)
            flat.commitlog.extend_last_timestamps(begin, end)
    if valid < real:
        report.cut_bytes = real - valid
        if valid == 0:
            cq.reset_last()
        else:
            cq.set_last_size(valid)
            cq.roll()
    else:
        cq.set_last_size(valid)
    return _last_unit_end(flat)


def _read_units(flat: FlatMessageFile, byte_offset: int, count: int) -> Units:
    cq = flat.consume_queue
    seg = cq.segments[-1]
    key = cq.key(seg.base)
    raw = retrying(lambda: cq.provider.read(key, byte_offset - seg.base, count * CQ_UNIT_SIZE))
    whole = len(raw) - len(raw) % CQ_UNIT_SIZE
    return decode_units(raw[:whole])


def _valid_extra_units(
    flat: FlatMessageFile, byte_offset: int, count: int, cl_end: int, local: LocalUnits | None
) -> tuple[int, int, int]:
    """How many of ``count`` unrecorded units from ``byte_offset`` are whole and agree, and the
    oldest and newest store time of their messages (LONG_MAX when none)."""
    kept, begin, end = 0, LONG_MAX, -1
    while kept < count:
        n = min(_CHUNK_UNITS, count - kept)
        at = byte_offset + kept * CQ_UNIT_SIZE
        units = _read_units(flat, at, n)
        good, stamps = _check_chunk(flat.commitlog, units, at // CQ_UNIT_SIZE, cl_end, local)
        kept += good
        if good:
            begin, end = min(begin, int(stamps.min())), max(end, int(stamps.max()))
        if good < n:
            break
    return kept, begin, end if end >= 0 else LONG_MAX


def _check_chunk(
    cl: FlatCommitLogFile, units: Units, q0: int, cl_end: int, local: LocalUnits | None
) -> tuple[int, npt.NDArray[np.int64]]:
    n = len(units)
    none = np.zeros(0, dtype=np.int64)
    if not n:
        return 0, none
    offs = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    tags = units["tags_code"].astype(np.int64)
    ok = (sizes > 0) & (offs >= cl.min_offset) & (offs + sizes <= cl_end)
    ok[1:] &= offs[1:] >= offs[:-1] + sizes[:-1]
    k = int(np.argmin(ok)) if not ok.all() else n
    if k == 0:
        return 0, none
    span = int(offs[k - 1] + sizes[k - 1] - offs[0])
    data = cl.read(int(offs[0]), span)
    starts = offs[:k] - offs[0]
    queue_offsets = q0 + np.arange(k, dtype=np.int64)
    k = check_units(data, starts, sizes[:k], queue_offsets, offs[:k])
    if local is not None and k:
        mine = local(q0, k)
        if mine is not None and len(mine):
            m = min(len(mine), k)
            agree = (mine["size"][:m].astype(np.int64) == sizes[:m]) & (
                mine["tags_code"][:m].astype(np.int64) == tags[:m]
            )
            if not agree.all():
                k = int(np.argmin(agree))
    return k, store_timestamps(data, starts[:k])


def _units_within(flat: FlatMessageFile, base: int, size: int, cl_end: int) -> int:
    """The longest prefix (bytes) of the segment's units whose messages end by ``cl_end``."""
    lo, hi = 0, size // CQ_UNIT_SIZE  # units [0, lo) are fine; answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        unit = _read_units(flat, base + mid * CQ_UNIT_SIZE, 1)
        if len(unit) and int(unit["offset"][0]) + int(unit["size"][0]) <= cl_end:
            lo = mid + 1
        else:
            hi = mid
    return lo * CQ_UNIT_SIZE


def _last_unit_end(flat: FlatMessageFile) -> int:
    """The flat commitlog offset just past the message of the last committed unit (-1: none)."""
    cq = flat.consume_queue
    q = cq.commit_queue_offset - 1
    if q < cq.min_queue_offset or q < 0:
        return -1
    try:
        unit = cq.read_units(q, 1)
    except ProviderError:
        return -1
    if not len(unit):
        return -1
    return int(unit["offset"][0]) + int(unit["size"][0])
