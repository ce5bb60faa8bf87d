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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tiered import metrics
from tiered.config import TieredConfig
from tiered.errors import TieredStoreError
from tiered.file.flat_append_file import SEGMENT_TYPES
from tiered.file.flat_append_file import FlatAppendFile
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
            size = metrics.QUEUE_STORAGE_SIZE
            size.set_path(flat.path, flat.commitlog.committed_bytes, "commit_log")
            size.set_path(flat.path, flat.consume_queue.committed_bytes, "consume_queue")
            oldest = flat.min_timestamp()
            if oldest > 0:
                metrics.QUEUE_RESERVE_TIME.set(flat.topic, flat.queue_id, max(now - oldest, 0))
    if report.segments:
        log.info("expiry deleted %d segments (%d bytes)", report.segments, report.bytes)
    return report
