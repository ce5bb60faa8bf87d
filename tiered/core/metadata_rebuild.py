"""Rebuild lost local metadata: from the backend mirror, or by listing the backend's segments.

``recover`` (the CLI) first restores ``tieredStoreMetadata.json`` from its mirror
(:meth:`MetadataStore.recover_from_mirror`) and then merges in segments the listing shows beyond
the mirror's last segment of each file (:func:`merge_listing`). With ``--from-backend`` (the
mirror is gone too) every record is rebuilt from the listing (:func:`rebuild_from_backend`). The
normal start-up reconciliation then judges each file's last segment.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from tiered.broker import message as msgcodec
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.errors import ProviderError
from tiered.file.flat_append_file import SEGMENT_TYPES
from tiered.file.flat_append_file import real_size
from tiered.file.flat_append_file import retrying
from tiered.index.uploaded import rebuild_index_records
from tiered.metadata import LONG_MAX
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import MessageQueue
from tiered.metadata import MetadataStore
from tiered.metadata import now_ms
from tiered.metadata.models import STATUS_NEW
from tiered.metadata.models import STATUS_SEALED
from tiered.providers.base import Provider
from tiered.providers.layout import FileType
from tiered.providers.layout import SegmentAddress
from tiered.providers.layout import cluster_dir_name
from tiered.providers.layout import logical_path

log = logging.getLogger(__name__)

_HEADER = 96
Listing = dict[tuple[str, int], dict[FileType, list[int]]]


@dataclass
class RebuildReport:
    """What a rebuild restored."""

    source: str
    topics: int = 0
    queues: int = 0
    segments: int = 0
    added_from_listing: int = 0
    bytes: int = 0


def list_segments(provider: Provider, cluster: str, broker: str) -> Listing:
    """Every commitlog and consumequeue segment base of the broker, by queue and type."""
    found: Listing = defaultdict(lambda: defaultdict(list))
    for key in provider.list(f"{cluster_dir_name(cluster)}/{broker}/"):
        address = SegmentAddress.parse(key)
        if address is None or address.cluster != cluster or address.broker != broker:
            continue
        if address.file_type is FileType.INDEX:
            continue
        found[(address.topic, address.queue_id)][address.file_type].append(address.base_offset)
    for by_type in found.values():
        for bases in by_type.values():
            bases.sort()
    return found


class _Reader:
    """Small reads of segment objects of one queue (timestamps for rebuilt records)."""

    def __init__(self, provider: Provider, cluster: str, broker: str, topic: str, qid: int):
        self.provider = provider
        self.address = (cluster, broker, topic, qid)

    def key(self, file_type: FileType, base: int) -> str:
        return SegmentAddress(*self.address, file_type, base).key

    def read(self, file_type: FileType, base: int, position: int, length: int) -> bytes:
        key = self.key(file_type, base)
        try:
            return retrying(lambda: self.provider.read(key, position, length))
        except ProviderError:
            return b""

    def store_time(self, cl_bases: list[int], flat_offset: int) -> int:
        base = max((b for b in cl_bases if b <= flat_offset), default=None)
        if base is None:
            return LONG_MAX
        head = self.read(FileType.COMMIT_LOG, base, flat_offset - base, _HEADER)
        if len(head) < msgcodec.BORN_HOST_POSITION + 20:
            return LONG_MAX
        return msgcodec.store_timestamp_of(head)

    def unit_offset(self, base: int, position: int) -> int | None:
        raw = self.read(FileType.CONSUME_QUEUE, base, position, CQ_UNIT_SIZE)
        return int.from_bytes(raw[:8], "big", signed=True) if len(raw) == CQ_UNIT_SIZE else None


def _records(
    reader: _Reader,
    path: str,
    by_type: dict[FileType, list[int]],
    all_cl_bases: list[int],
    now: int,
) -> list[FileSegmentMetadata]:
    """Records for the segments ``by_type`` (``all_cl_bases``: every commitlog base, to find
    the message a unit points at).

    A segment's size is its object's size, capped for all but the last segment of a file at the
    next segment's base (bytes past a record are never part of the file). Begin/end timestamps
    are read from the messages: a consumequeue segment's first and last units' messages; a
    commitlog segment's first message, and the next segment's first message as its end -- an
    upper bound, so expiry keeps rather than deletes. Each file's last consumequeue segment is
    recorded empty: reconciliation then checks every unit in it as it checks unrecorded units
    after a crash, keeps the valid prefix and sets the timestamps of what it kept."""
    cl_bases = by_type.get(FileType.COMMIT_LOG, [])
    out: list[FileSegmentMetadata] = []
    sizes: dict[tuple[FileType, int], int] = {}
    for file_type in (FileType.COMMIT_LOG, FileType.CONSUME_QUEUE):
        bases = by_type.get(file_type, [])
        for i, base in enumerate(bases):
            size = real_size(reader.provider, reader.key(file_type, base))
            if i + 1 < len(bases):
                size = min(size, bases[i + 1] - base)
            if file_type is FileType.CONSUME_QUEUE:
                size -= size % CQ_UNIT_SIZE
            sizes[(file_type, base)] = size
    cq_bases = by_type.get(FileType.CONSUME_QUEUE, [])
    for i, base in enumerate(cq_bases):
        size = sizes[(FileType.CONSUME_QUEUE, base)]
        begin = end = LONG_MAX
        if i == len(cq_bases) - 1:
            size = 0  # unverified: reconciliation checks every unit of the last segment
        elif size:
            first = reader.unit_offset(base, 0)
            last = reader.unit_offset(base, size - CQ_UNIT_SIZE)
            begin = reader.store_time(all_cl_bases, first) if first is not None else LONG_MAX
            end = reader.store_time(all_cl_bases, last) if last is not None else LONG_MAX
        out.append(_record(path, FileType.CONSUME_QUEUE, base, size, begin, end, i, cq_bases, now))
    cl_begins = [
        reader.store_time(cl_bases, b) if sizes[(FileType.COMMIT_LOG, b)] else LONG_MAX
        for b in cl_bases
    ]
    for i, base in enumerate(cl_bases):
        # the next segment's first message bounds this one's newest; the last segment's end
        # starts at its first message and is raised by reconciliation from the units it keeps
        end = cl_begins[i + 1] if i + 1 < len(cl_bases) else cl_begins[i]
        size = sizes[(FileType.COMMIT_LOG, base)]
        out.append(
            _record(path, FileType.COMMIT_LOG, base, size, cl_begins[i], end, i, cl_bases, now)
        )
    return out


def _record(
    path: str,
    file_type: FileType,
    base: int,
    size: int,
    begin: int,
    end: int,
    index: int,
    bases: list[int],
    now: int,
) -> FileSegmentMetadata:
    last = index == len(bases) - 1
    return FileSegmentMetadata(
        path=path,
        type=SEGMENT_TYPES[file_type],
        base_offset=base,
        status=STATUS_NEW if last else STATUS_SEALED,
        size=size,
        create_timestamp=now,
        begin_timestamp=begin,
        end_timestamp=max(end, begin) if LONG_MAX not in (end, begin) else end,
        seal_timestamp=0 if last else now,
    )


def rebuild_from_backend(
    provider: Provider, metadata: MetadataStore, cluster: str, broker: str
) -> RebuildReport:
    """Fill an empty, loaded ``metadata`` from the backend listing; persists once.

    The queues are the ``{broker}/{topic}/{queueId}`` directories holding segments; topic ids
    are handed out again (0, 1, ... by topic name); the uploaded index files (INDEX segments)
    are recorded from their headers, as far as they chain from base 0
    (:func:`tiered.index.uploaded.rebuild_index_records`)."""
    report = RebuildReport("backend")
    listing = list_segments(provider, cluster, broker)
    now = now_ms()
    with metadata.batch():
        for topic, qid in sorted(listing):
            metadata.add_topic(topic)
            metadata.add_queue(MessageQueue(broker_name=broker, queue_id=qid, topic=topic))
            reader = _Reader(provider, cluster, broker, topic, qid)
            by_type = listing[(topic, qid)]
            cl_bases = by_type.get(FileType.COMMIT_LOG, [])
            path = logical_path(broker, topic, qid)
            for record in _records(reader, path, by_type, cl_bases, now):
                metadata.update_segment(record)
                report.segments += 1
                report.bytes += record.size
        report.segments += rebuild_index_records(provider, metadata, cluster, broker)
    report.topics = len({t for t, _ in listing})
    report.queues = len(listing)
    return report


def merge_listing(provider: Provider, metadata: MetadataStore, cluster: str, broker: str) -> int:
    """Add records for segments the listing shows beyond each file's last recorded segment
    (a mirror one persist behind); returns how many were added."""
    listing = list_segments(provider, cluster, broker)
    added = 0
    now = now_ms()
    with metadata.batch():
        for (topic, qid), by_type in sorted(listing.items()):
            path = logical_path(broker, topic, qid)
            todo: dict[FileType, list[int]] = {}
            for file_type, bases in by_type.items():
                known = metadata.segments(SEGMENT_TYPES[file_type], path)
                last = known[-1].base_offset if known else -1
                beyond = [b for b in bases if b > last]
                if beyond:
                    todo[file_type] = ([last] if known else []) + beyond
            if not todo:
                continue
            metadata.add_topic(topic)
            metadata.add_queue(MessageQueue(broker_name=broker, queue_id=qid, topic=topic))
            reader = _Reader(provider, cluster, broker, topic, qid)
            cl_bases = by_type.get(FileType.COMMIT_LOG, [])
            for record in _records(reader, path, todo, cl_bases, now):
                old = metadata.get_segment(record.type, path, record.base_offset)
                if old is None:
                    metadata.update_segment(record)
                    added += 1
                    continue
                # the formerly last segment: sealed now, its size capped at the next base
                end = old.end_timestamp
                if record.end_timestamp != LONG_MAX:
                    end = (
                        record.end_timestamp if end == LONG_MAX else max(end, record.end_timestamp)
                    )
                update = {"size": record.size, "status": STATUS_SEALED, "end_timestamp": end}
                metadata.update_segment(old.model_copy(update=update))
    if added:
        log.warning("added %d segments found in the backend beyond the mirrored metadata", added)
    return added
