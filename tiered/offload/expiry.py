"""Expiry: delete whole segments older than the topic's reserve time, oldest first (spec §10.1).

For each queue, under its lock, the consumequeue first and the commitlog second: while the first
segment's newest message (its end timestamp) is older than ``now - reserve hours`` -- or unset --
its record is removed (and persisted) and then its object is deleted. A failure ends the queue's
run (logged, counted in ``expiry_failures_total{file_type}``); the next run retries. Reserve hours
of a topic: the first matching ``tieredStoreFileReservedTimeOverrides`` pattern, else the topic's
metadata ``reserveTime`` when above 0, else ``tieredStoreFileReservedTime``
(:meth:`~tiered.config.TieredConfig.reserved_time_hours_for`).

Unlike upstream, the writable last segment is never deleted while it holds the queue's position:
an expired last segment is first sealed and a new empty one started at the same offset, so an
idle queue keeps its place (upstream deletes everything and re-initialises the queue near "now").

Each run then sets the queue's expiry lag (``expiry_behind_segments``/``_bytes{file_type}``): its
segments past the reserve time still in the tier -- recorded ones the run did not delete, and
objects whose delete failed (the orphan log; their size as recorded, else asked of the backend).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from dataclasses import field

from tiered import metrics
from tiered.config import TieredConfig
from tiered.errors import TieredStoreError
from tiered.file.flat_append_file import SEGMENT_TYPES
from tiered.file.flat_append_file import FlatAppendFile
from tiered.file.flat_append_file import Segment
from tiered.file.flat_append_file import retrying
from tiered.file.flat_file_store import FlatFileStore
from tiered.metadata import HOUR_MS
from tiered.metadata import LONG_MAX
from tiered.metadata import MetadataStore
from tiered.process.logs import error_fields
from tiered.process.logs import traceback_if_debug
from tiered.providers.base import Provider
from tiered.providers.layout import SegmentAddress

log = logging.getLogger(__name__)


@dataclass
class ExpiryReport:
    """What one :func:`expire` run deleted."""

    segments: int = 0
    bytes: int = 0
    failures: int = 0
    orphans_deleted: int = 0
    """Objects of earlier runs whose delete had failed (or was interrupted), deleted now."""
    behind: dict[tuple[str, int, str], tuple[int, int]] = field(default_factory=dict)
    """The expiry lag after the run: (topic, queue id, file type) -> (segments, bytes), 0s
    included."""

    @property
    def behind_segments(self) -> int:
        """Segments past their reserve time still in the tier, over every queue."""
        return sum(s for s, _ in self.behind.values())

    @property
    def behind_bytes(self) -> int:
        """Their bytes."""
        return sum(b for _, b in self.behind.values())


class _Lag:
    """What the expiry lag gauges hold, and the sizes of expired objects whose delete may
    fail (pruned to the orphan log after each run)."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.shown: set[tuple[str, int, str]] = set()


_lag = _Lag()


def sweep_orphans(metadata: MetadataStore, provider: Provider) -> int:
    """Delete the objects :attr:`MetadataStore.orphans` still lists whose records are gone."""

    def recorded(key: str) -> bool:
        address = SegmentAddress.parse(key)
        return address is not None and (
            metadata.get_segment(
                SEGMENT_TYPES[address.file_type], address.logical_path, address.base_offset
            )
            is not None
        )

    deleted = metadata.orphans.sweep(lambda key: retrying(lambda: provider.delete(key)), recorded)
    if deleted:
        log.info("deleted %d expired objects left behind by earlier failures", deleted)
    return deleted


def reserve_hours(cfg: TieredConfig, metadata: MetadataStore, topic: str) -> int:
    """How long ``topic``'s tiered data is kept, in hours (see the module docstring)."""
    meta = metadata.get_topic(topic)
    return cfg.reserved_time_hours_for(topic, -1 if meta is None else meta.reserve_time)


def expired(f: FlatAppendFile, before: int) -> list[Segment]:
    """``f``'s leading segments with bytes whose end timestamp is unset or below ``before``:
    those :func:`expire_file` deletes."""
    out: list[Segment] = []
    for seg in f.segments:
        end = seg.end_timestamp
        if end != LONG_MAX and end >= before:
            break
        if seg.size:
            out.append(seg)
    return out


def expire_file(f: FlatAppendFile, before: int) -> tuple[int, int]:
    """Delete ``f``'s leading segments whose end timestamp is unset or below ``before``;
    returns (segments, bytes) deleted."""
    count = nbytes = 0
    while f.segments:
        first = f.segments[0]
        end = first.end_timestamp
        if end != LONG_MAX and end >= before:
            break
        if len(f.segments) == 1:
            if first.size == 0 or f.pending_size:
                break  # empty: it only holds the position; busy: the next run deletes it
            f.roll()  # keep the position in a new empty segment, then delete the old one
            continue
        f.delete_first()
        count += 1
        nbytes += first.size
        metrics.EXPIRED_SEGMENTS.labels(f.file_type.label).inc()
    return count, nbytes


def expire(cfg: TieredConfig, store: FlatFileStore, now: int) -> ExpiryReport:
    """One expiry run over every queue (a no-op with tieredStoreDeleteFileEnable=false)."""
    report = ExpiryReport()
    if not cfg.tiered_store_delete_file_enable:
        return report
    report.orphans_deleted = sweep_orphans(store.metadata, store.provider)
    for flat in store.files():
        before = now - reserve_hours(cfg, store.metadata, flat.topic) * HOUR_MS
        with flat.lock:
            part: FlatAppendFile = flat.consume_queue
            for each in (flat.consume_queue, flat.commitlog):  # sizes of deletes that may fail
                _lag.sizes.update((each.key(s.base), s.size) for s in expired(each, before))
            try:
                for part in (flat.consume_queue, flat.commitlog):
                    n, b = expire_file(part, before)
                    report.segments += n
                    report.bytes += b
                    if n and part is flat.commitlog:
                        flat.commitlog.forget_first_queue_offset()
            except (TieredStoreError, OSError) as e:
                report.failures += 1
                metrics.EXPIRY_FAILURES.labels(part.file_type.label).inc()
                fields = error_fields(e, topic=flat.topic, queue_id=flat.queue_id)
                log.warning(
                    "%s: expiry failed (object %s), retried at the next run: %s",
                    flat.path,
                    fields.get("objectKey", "-"),
                    e,
                    extra=fields,
                    exc_info=traceback_if_debug(log, e),
                )
                continue
            finally:
                for each in (flat.consume_queue, flat.commitlog):
                    left = expired(each, before)
                    lag = (len(left), sum(s.size for s in left))
                    report.behind[(flat.topic, flat.queue_id, each.file_type.label)] = lag
            size = metrics.QUEUE_STORAGE_SIZE
            size.set_path(flat.path, flat.commitlog.committed_bytes, "commit_log")
            size.set_path(flat.path, flat.consume_queue.committed_bytes, "consume_queue")
            oldest = flat.min_timestamp()
            if oldest > 0:
                metrics.QUEUE_RESERVE_TIME.set(flat.topic, flat.queue_id, max(now - oldest, 0))
    _add_orphans(report, store)
    _show(report)
    if report.segments:
        log.info("expiry deleted %d segments (%d bytes)", report.segments, report.bytes)
    return report


def _add_orphans(report: ExpiryReport, store: FlatFileStore) -> None:
    """Count the queues' objects left in the orphan log into ``report.behind``."""
    keys = store.metadata.orphans.keys()
    for key in keys:
        address = SegmentAddress.parse(key)
        if address is None or address.file_type.label not in ("commit_log", "consume_queue"):
            continue
        size = _lag.sizes.get(key)
        if size is None:
            try:
                size = _lag.sizes[key] = store.provider.size(key)
            except (TieredStoreError, OSError):
                size = 0  # not known now: counted as a segment
        where = (address.topic, address.queue_id, address.file_type.label)
        segments, nbytes = report.behind.get(where, (0, 0))
        report.behind[where] = (segments + 1, nbytes + size)
    left = set(keys)
    _lag.sizes = {k: v for k, v in _lag.sizes.items() if k in left}


def _show(report: ExpiryReport) -> None:
    """Set the expiry lag gauges from ``report.behind`` (and 0 where they showed lag before)."""
    shown = {k for k, (segments, _) in report.behind.items() if segments}
    for topic, qid, file_type in _lag.shown - report.behind.keys():
        report.behind[(topic, qid, file_type)] = (0, 0)
    for (topic, qid, file_type), (segments, nbytes) in report.behind.items():
        metrics.QUEUE_EXPIRY_BEHIND.set(topic, qid, segments, file_type)
        metrics.QUEUE_EXPIRY_BEHIND_BYTES.set(topic, qid, nbytes, file_type)
    _lag.shown = shown
