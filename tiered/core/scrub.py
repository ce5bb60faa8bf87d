"""``scrub``: check the tier against its metadata, read-only, safe beside a running ``run``.

For one broker (or the topics a glob selects): one listing of its prefix with sizes
(:meth:`~tiered.providers.base.Provider.list_sizes`: a request per page of objects, not one per
object), and the metadata read as ``status`` reads it, as a non-owner -- once before the listing
(what must be there: data is written before its record) and once after (what may have been
recorded or expired meanwhile). Then for every queue's commitlog and consumequeue and for the
key index's files:

- each recorded segment with bytes has its object, at least its recorded size (``missing``,
  ``size_mismatch``); every object in a segment directory has a record (``orphan``; one that
  expiry logged for deletion is a ``pending_delete`` note);
- segments follow each other without gap or overlap (``offset_gap``, ``offset_overlap``); a
  consumequeue gap the dispatcher recorded (the broker deleted messages before they were
  offloaded) is a ``recorded_gap`` note;
- the first and last unit of each consumequeue segment point inside their commitlog segment
  (``unit_out_of_range``); every unit with ``deep``, which also reads every message and checks it
  as a cold read does (:mod:`.scrub_units`);
- each uploaded index file's header is a compacted file's and agrees with its record.

Keys outside segment directories (the metadata mirror, the index progress copy, index staging)
are not segments and never orphans; chunk objects of unsealed segments are the provider's
business (its listing shows the segment once). Nothing is written: no lock, no metadata write,
only listings and reads.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import numpy as np

from tiered import metrics
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.consumequeue import decode_units
from tiered.config import TieredConfig
from tiered.core.scrub_report import Anomaly
from tiered.core.scrub_report import ScrubReport
from tiered.core.scrub_units import QueueFiles
from tiered.core.scrub_units import Seg
from tiered.core.scrub_units import check_messages
from tiered.core.scrub_units import check_units_in_range
from tiered.errors import IndexFileError
from tiered.errors import SegmentNotFoundError
from tiered.file.flat_append_file import SEGMENT_TYPES
from tiered.index.compacted_file import check_compacted
from tiered.index.format import HEADER_SIZE
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import MetadataDocument
from tiered.metadata import now_ms
from tiered.metadata import read_metadata
from tiered.metadata.orphans import OrphanLog
from tiered.offload.dispatch_state import QueueState
from tiered.offload.dispatch_state import StateFile
from tiered.providers.base import Provider
from tiered.providers.layout import INDEX_TOPIC
from tiered.providers.layout import FileType
from tiered.providers.layout import SegmentAddress
from tiered.providers.layout import check_component
from tiered.providers.layout import cluster_dir_name
from tiered.providers.layout import offset_to_file_name

log = logging.getLogger(__name__)

_GLOB_CHARS = frozenset("*?[")
_QUEUE_FILES = (FileType.COMMIT_LOG, FileType.CONSUME_QUEUE)
_SMALL_CQ = 64 << 10
"""A consumequeue segment up to this size is read whole for its first and last unit."""
LOGGED = 20
"""Anomalies a background scrub logs one by one at most (the gauge counts them all)."""

QueueKey = tuple[str, str]
"""(topic, queue id as its directory names it)."""


@dataclass
class _Listed:
    """What the listing shows of one queue directory: segment objects by type and base offset,
    and other objects in its segment directories (orphans by their very name)."""

    segments: dict[FileType, dict[int, tuple[str, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    strays: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class _Where:
    """The queue and file an anomaly is about."""

    topic: str
    queue_id: int | None
    file_type: str

    def at(
        self,
        kind: str,
        key: str,
        detail: str,
        offset: int | None = None,
        expected: int | None = None,
        found: int | None = None,
    ) -> Anomaly:
        """An anomaly of this queue and file."""
        return Anomaly(
            kind, key, detail, self.topic, self.queue_id, self.file_type,
            offset=offset, expected=expected, found=found,
        )  # fmt: skip


def scrub(
    cfg: TieredConfig, provider: Provider, *, deep: bool = False, topic: str | None = None
) -> ScrubReport:
    """Scrub the tier of ``cfg``'s broker (the topics matching the glob ``topic``; the key
    index's files only when no glob is given, or it is ``rmq_sys_INDEX``).

    Raises:
        MetadataError: the metadata file and its ``.bak`` are both unreadable.
        InvalidKeyError: ``topic`` names no possible topic.
        ProviderError: the backend failed (the scrub did not finish).
    """
    return _Scrub(cfg, provider, deep, topic).run()


def scrub_and_publish(cfg: TieredConfig, provider: Provider) -> ScrubReport:
    """A background scrub (``tieredScrubIntervalMs``, without ``deep``): set
    ``rocketmq_tiered_store_scrub_anomalies{kind}`` for every kind and log what it found (one
    WARNING line per anomaly, at most :data:`LOGGED`).

    Raises:
        TieredStoreError: as :func:`scrub` (the gauge keeps the last finished scrub's counts).
    """
    report = scrub(cfg, provider)
    for kind, count in report.counts().items():
        metrics.child(metrics.SCRUB_ANOMALIES, kind).set(count)
    for a in report.anomalies[:LOGGED]:
        log.warning("scrub: %s %s: %s", a.kind, a.key, a.detail, extra={"objectKey": a.key})
    (log.warning if report.anomalies else log.info)("%s", report.summary())
    return report


class _Scrub:
    """One scrub run; see the module docstring."""

    def __init__(self, cfg: TieredConfig, provider: Provider, deep: bool, topic: str | None):
        self.cfg = cfg
        self.provider = provider
        self.deep = deep
        self.glob = topic
        self.cluster_dir = cluster_dir_name(cfg.broker_cluster_name)
        self.broker = cfg.broker_name
        self.report = ScrubReport(cfg.broker_cluster_name, cfg.broker_name, deep, topic, now_ms())
        self.before = MetadataDocument()
        self.after = MetadataDocument()
        self.pending: set[str] = set()
        self.gaps: list[tuple[_Where, str, int, int]] = []
        """Consumequeue gaps found, judged at the end against the dispatcher's record."""

    def selected(self, topic: str) -> bool:
        """Whether the run covers ``topic`` (the index pseudo topic only when named or all)."""
        if self.glob is None:
            return True
        if topic == INDEX_TOPIC:
            return self.glob == INDEX_TOPIC
        return fnmatch.fnmatchcase(topic, self.glob)

    def run(self) -> ScrubReport:
        started = time.monotonic()
        data_dir = self.cfg.tiered_data_dir
        orphans = OrphanLog(data_dir / "config")
        # the order matters beside a running sidecar: data is written before its record, a key
        # is logged before its record is removed and unlogged after its object is deleted
        self.pending = set(orphans.peek())
        self.before, self.report.metadata = read_metadata(data_dir)
        listed = self._list()
        self.after, _ = read_metadata(data_dir)
        self.pending |= set(orphans.peek())
        queues = set(listed) | self._recorded_queues()
        for topic, queue in sorted(queues):
            self._queue(topic, queue, listed.get((topic, queue), _Listed()))
        self._judge_gaps(StateFile(data_dir).load(owner=False).queues)
        self.report.sorted()
        self.report.seconds = time.monotonic() - started
        return self.report

    # --- listing and records ----------------------------------------------------------------------

    def _prefix(self) -> str:
        root = f"{self.cluster_dir}/{self.broker}/"
        if self.glob is not None and not _GLOB_CHARS & set(self.glob):
            return root + check_component(self.glob, "topic") + "/"
        return root

    def _list(self) -> dict[QueueKey, _Listed]:
        """The listing of the run's prefix, by queue directory."""
        found: dict[QueueKey, _Listed] = defaultdict(_Listed)
        for key, size in self.provider.list_sizes(self._prefix()):
            parts = key.split("/")
            if len(parts) != 6 or parts[4] not in FileType.__members__:
                continue  # not in a segment directory: the mirror, progress, staging
            if not self.selected(parts[2]):
                continue
            listed = found[(parts[2], parts[3])]
            address = SegmentAddress.parse(key)
            if address is None or address.cluster != self.cfg.broker_cluster_name:
                listed.strays.append((key, size))
            else:
                listed.segments[address.file_type][address.base_offset] = (key, size)
        return found

    def _recorded_queues(self) -> set[QueueKey]:
        found: set[QueueKey] = set()
        for doc in (self.before, self.after):
            for file_type in FileType:
                for path in doc.segment_table(SEGMENT_TYPES[file_type]):
                    broker, _, rest = path.partition("/")
                    topic, _, queue = rest.partition("/")
                    if broker == self.broker and self.selected(topic):
                        found.add((topic, queue))
        return found

    def _records(
        self, file_type: FileType, path: str
    ) -> tuple[list[FileSegmentMetadata], set[int]]:
        """The records of one file that held both before and after the listing (by base), and
        the bases recorded in either."""
        kind = SEGMENT_TYPES[file_type]
        before = self.before.segment_table(kind).get(path, {})
        after = self.after.segment_table(kind).get(path, {})
        kept = [before[b] for b in sorted(before) if b in after]
        return kept, set(before) | set(after)

    def _still_recorded(self, file_type: FileType, path: str, base: int) -> bool:
        doc, _ = read_metadata(self.cfg.tiered_data_dir)
        return base in doc.segment_table(SEGMENT_TYPES[file_type]).get(path, {})

    # --- one queue --------------------------------------------------------------------------------

    def _queue(self, topic: str, queue: str, listed: _Listed) -> None:
        path = f"{self.broker}/{topic}/{queue}"
        qid = int(queue) if queue.isdigit() else None
        files = (FileType.INDEX,) if topic == INDEX_TOPIC else _QUEUE_FILES
        segs: dict[FileType, list[Seg]] = {}
        for file_type in files:
            records, recorded = self._records(file_type, path)
            objects = listed.segments.get(file_type, {})
            segs[file_type] = self._file(path, topic, qid, file_type, records, recorded, objects)
        for key, size in listed.strays:
            self._unrecorded(key, size, topic, qid, key.split("/")[4])
        if topic == INDEX_TOPIC:
            self._index_headers(segs[FileType.INDEX])
            return
        self.report.queues += 1
        if qid is None:
            return
        q = QueueFiles(topic, qid, segs[FileType.COMMIT_LOG], segs[FileType.CONSUME_QUEUE])
        if self.deep:
            check_messages(self.provider, self.report, q, self._lost(q))
        else:
            self._first_and_last_units(q)

    def _file(
        self,
        path: str,
        topic: str,
        qid: int | None,
        file_type: FileType,
        records: list[FileSegmentMetadata],
        recorded: set[int],
        objects: dict[int, tuple[str, int]],
    ) -> list[Seg]:
        """Records against objects, then the offsets from segment to segment; returns the
        records as :class:`Seg` (usable -1 where the object is missing)."""
        label = file_type.label
        unit = CQ_UNIT_SIZE if file_type is FileType.CONSUME_QUEUE else 1
        segs: list[Seg] = []
        directory = f"{self.cluster_dir}/{path}/{file_type.value}/"
        for r in records:
            key, size = objects.get(r.base_offset, ("", -1))
            key = key or directory + offset_to_file_name(r.base_offset)
            self.report.segments += 1
            segs.append(Seg(r.base_offset, r.size, min(size, r.size), key))
            where = _Where(topic, qid, label)
            if size < 0 and r.size > 0:
                what = f"recorded segment of {r.size} bytes at base {r.base_offset} has no object"
                self.report.add(where.at("missing", key, what, r.base_offset, r.size))
            elif 0 <= size < r.size:
                what = f"object holds {size} bytes, its record {r.size}: recorded bytes are lost"
                self.report.add(where.at("size_mismatch", key, what, r.base_offset, r.size, size))
        for prev, seg in itertools.pairwise(segs):
            self._joint(topic, qid, label, unit, prev, seg)
        for base, (key, size) in sorted(objects.items()):
            if base not in recorded:
                self._unrecorded(key, size, topic, qid, file_type.value, counted=False)
            self.report.objects += 1
            self.report.object_bytes += size
        return segs

    def _joint(
        self, topic: str, qid: int | None, label: str, unit: int, prev: Seg, seg: Seg
    ) -> None:
        """Whether ``seg`` starts where ``prev`` ends (offsets in the file's unit)."""
        end = prev.base + prev.size
        if seg.base == end:
            return
        a, b = end // unit, seg.base // unit
        where = _Where(topic, qid, label)
        if seg.base < end:
            what = f"segment starts at {b}, inside the previous one, which ends at {a}"
            self.report.add(where.at("offset_overlap", seg.key, what, b, a, b))
            return
        if unit == CQ_UNIT_SIZE and qid is not None:
            self.gaps.append((where, seg.key, a, b))  # the dispatcher may have recorded it
            return
        what = f"offsets [{a}, {b}) are in no segment"
        self.report.add(where.at("offset_gap", seg.key, what, a, a, b))

    def _judge_gaps(self, states: dict[tuple[str, int], QueueState]) -> None:
        """The consumequeue gaps found: notes where the dispatcher recorded them (its state file
        read after the whole scrub: a gap is recorded at the end of the round that made it),
        damage where not."""
        for where, key, a, b in self.gaps:
            state = states.get((where.topic, where.queue_id or 0))
            gaps = state.gaps if state is not None else []
            if any(g.start <= a and b <= g.end for g in gaps):
                what = f"offsets [{a}, {b}): the broker deleted them before they were offloaded"
                self.report.add(where.at("recorded_gap", key, what, a, a, b))
            else:
                what = f"offsets [{a}, {b}) are in no segment, and no gap was recorded there"
                self.report.add(where.at("offset_gap", key, what, a, a, b))

    def _unrecorded(
        self, key: str, size: int, topic: str, qid: int | None, kind: str, counted: bool = True
    ) -> None:
        if counted:
            self.report.objects += 1
            self.report.object_bytes += size
        where = _Where(topic, qid, kind.lower())
        if key in self.pending:
            what = "its record was removed by expiry; the deletion is logged and retried"
            self.report.add(where.at("pending_delete", key, what, found=size))
        else:
            what = f"{size} bytes that no record names"
            self.report.add(where.at("orphan", key, what, found=size))

    def _lost(self, q: QueueFiles) -> Callable[[Seg], None]:
        """What to do when a listed object of ``q`` is gone at its read: ``missing`` unless
        expiry removed its record meanwhile."""
        path = f"{self.broker}/{q.topic}/{q.queue_id}"

        def lost(seg: Seg) -> None:
            cq = any(s is seg for s in q.consume_queue)
            kind = FileType.CONSUME_QUEUE if cq else FileType.COMMIT_LOG
            if self._still_recorded(kind, path, seg.base):
                what = f"listed, then gone at its read (recorded size {seg.size})"
                self.report.add(
                    Anomaly("missing", seg.key, what, q.topic, q.queue_id, kind.label, seg.base)
                )

        return lost

    # --- units and index headers ------------------------------------------------------------------

    def _first_and_last_units(self, q: QueueFiles) -> None:
        """The first and last unit of each consumequeue segment (a small segment is read whole,
        a larger one with two 20-byte reads), checked in one batch for the queue."""
        lost = self._lost(q)
        pieces: list[bytes] = []
        qoffs: list[int] = []
        owners: list[int] = []
        for owner, cq in enumerate(q.consume_queue):
            usable = max(cq.usable, 0) - max(cq.usable, 0) % CQ_UNIT_SIZE
            if usable < CQ_UNIT_SIZE:
                continue
            last = usable - CQ_UNIT_SIZE
            try:
                if usable <= _SMALL_CQ:
                    raw = self.provider.read(cq.key, 0, usable)
                    head, tail = raw[:CQ_UNIT_SIZE], raw[last:]
                else:
                    head = self.provider.read(cq.key, 0, CQ_UNIT_SIZE)
                    tail = self.provider.read(cq.key, last, CQ_UNIT_SIZE)
            except SegmentNotFoundError:
                lost(cq)
                continue
            first = cq.base // CQ_UNIT_SIZE
            pieces += [head, tail] if last else [head]
            qoffs += [first, first + last // CQ_UNIT_SIZE] if last else [first]
            owners += [owner, owner] if last else [owner]
        if pieces:
            units = decode_units(b"".join(pieces))
            offsets = np.array(qoffs, dtype=np.int64)
            check_units_in_range(self.report, q, units, offsets, np.array(owners, np.int64))

    def _index_headers(self, segs: list[Seg]) -> None:
        """Each uploaded index file's header (only those whose object holds their record)."""
        slots = self.cfg.tiered_store_index_file_max_hash_slot_num
        path = f"{self.broker}/{INDEX_TOPIC}/0"
        records = self.before.segment_table(SEGMENT_TYPES[FileType.INDEX]).get(path, {})
        for seg in segs:
            if seg.size == 0 or seg.usable < seg.size:
                continue
            self.report.index_files += 1
            record = records[seg.base]
            problem = ""
            try:
                head = (
                    self.provider.read(seg.key, 0, HEADER_SIZE) if seg.size >= HEADER_SIZE else b""
                )
                if len(head) < HEADER_SIZE:
                    raise IndexFileError(f"{seg.size} bytes, shorter than a header")
                header = check_compacted(head, seg.size, slots)
            except SegmentNotFoundError:
                continue  # expiry removed it since the listing
            except IndexFileError as e:
                problem = str(e)
            else:
                if (header.begin_timestamp, header.end_timestamp) != (
                    record.begin_timestamp,
                    record.end_timestamp,
                ):
                    problem = (
                        f"header times [{header.begin_timestamp}, {header.end_timestamp}] are not "
                        f"the record's [{record.begin_timestamp}, {record.end_timestamp}]"
                    )
            if problem:
                self.report.add(
                    Anomaly("index_header", seg.key, problem, INDEX_TOPIC, 0, "index", seg.base)
                )
