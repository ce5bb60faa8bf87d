"""An independent check of a tier against the broker store (tests, benchmarks, operators).

It deliberately shares no code with the offload path (:mod:`tiered.file`, the dispatcher): the
metadata file is parsed with the metadata parser, every segment object is read whole with plain
provider reads, and the broker's files with :mod:`tiered.broker`. For every local queue it checks
that each queue offset of the expected range is in the flat consumequeue exactly once, that its
unit has the local size and tags code and points at flat commitlog bytes equal to the broker's
message except bytes 28..35, and that those hold the unit's flat offset; and that every flat
commitlog segment decodes message by message from its start to its recorded size.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import numpy as np

from tiered.broker import message as msgcodec
from tiered.broker.commitlog import CommitLog
from tiered.broker.consumequeue import CQ_UNIT_DTYPE
from tiered.broker.consumequeue import ConsumeQueue
from tiered.broker.consumequeue import list_queues
from tiered.config import TieredConfig
from tiered.errors import CorruptStoreFileError
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataDocument
from tiered.metadata import read_metadata
from tiered.providers.base import Provider
from tiered.providers.layout import FileType
from tiered.providers.layout import logical_path
from tiered.providers.layout import segment_key

_MAX_PROBLEMS = 20


@dataclass
class TierCheck:
    """The verdict: per queue the checked offset range, and every problem found."""

    ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    tier_offsets: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def messages(self) -> int:
        """Messages checked."""
        return sum(b - a for a, b in self.ranges.values())

    def assert_ok(self, messages: int | None = None, *, context: object = "") -> TierCheck:
        """Assert no problem was found (and that ``messages`` were checked); return ``self``.

        Raises:
            AssertionError: with ``context`` (e.g. the crash point of a sweep), naming the first
                problems or both message counts.
        """
        assert not self.problems, f"{context} {len(self.problems)} problem(s): {self.problems[:5]}"
        if messages is not None:
            assert self.messages == messages, f"{context} checked {self.messages}, not {messages}"
        return self


def read_document(cfg: TieredConfig) -> MetadataDocument:
    """The metadata file as written (an empty document when there is none)."""
    return read_metadata(cfg.tiered_data_dir)[0]


_SEGMENT_FILES = {
    FileSegmentType.COMMIT_LOG: FileType.COMMIT_LOG,
    FileSegmentType.CONSUME_QUEUE: FileType.CONSUME_QUEUE,
}


def persisted_records(cfg: TieredConfig) -> Iterator[tuple[str, FileSegmentMetadata]]:
    """Every commitlog and consumequeue segment record of the metadata file as written, with the
    key of its object (``DefaultCluster``'s layout, as the sample configurations use)."""
    doc = read_document(cfg)
    for kind, file_type in _SEGMENT_FILES.items():
        for path, segments in doc.segment_table(kind).items():
            broker, topic, qid = path.split("/")
            for base, record in segments.items():
                key = segment_key("DefaultCluster", broker, topic, int(qid), file_type, base)
                yield key, record


def _walk(key: str, data: bytes, base: int) -> list[str]:
    """A flat commitlog segment must decode message by message from its start to its recorded
    size, each message's bytes 28..35 holding its own flat offset (no torn or stray bytes)."""
    pos = 0
    while pos < len(data):
        try:
            message = msgcodec.decode(data, pos, where=key)
        except CorruptStoreFileError as e:
            return [f"{key}: the segment does not walk at byte {pos} of {len(data)}: {e}"]
        if message.physical_offset != base + pos:
            return [f"{key}: the message at byte {pos} says flat offset {message.physical_offset}"]
        pos += message.total_size
    return []


class _FlatQueue:
    """One queue's tier content, read whole."""

    def __init__(
        self, cfg: TieredConfig, provider: Provider, doc: MetadataDocument, topic: str, qid: int
    ):
        cluster, broker = cfg.broker_cluster_name, cfg.broker_name
        path = logical_path(broker, topic, qid)
        self.units: dict[int, tuple[int, int, int]] = {}
        self.duplicates: list[int] = []
        self.problems: list[str] = []
        cq = doc.segment_table(FileSegmentType.CONSUME_QUEUE).get(path, {})
        for base in sorted(cq):
            size = cq[base].size
            key = segment_key(cluster, broker, topic, qid, FileType.CONSUME_QUEUE, base)
            raw = provider.read(key, 0, size) if size else b""
            if len(raw) != size:
                self.problems.append(f"{key}: read {len(raw)} of {size} recorded bytes")
            arr = np.frombuffer(raw[: len(raw) - len(raw) % 20], dtype=CQ_UNIT_DTYPE)
            for i, (off, sz, tags) in enumerate(arr.tolist()):
                q = base // 20 + i
                if q in self.units:
                    self.duplicates.append(q)
                self.units[q] = (off, sz, tags)
        cl = doc.segment_table(FileSegmentType.COMMIT_LOG).get(path, {})
        self.segments = [(base, cl[base].size) for base in sorted(cl)]
        self.data: dict[int, bytes] = {}
        for base, size in self.segments:
            key = segment_key(cluster, broker, topic, qid, FileType.COMMIT_LOG, base)
            self.data[base] = provider.read(key, 0, size) if size else b""
            self.problems += _walk(key, self.data[base], base)

    def message(self, offset: int, size: int) -> bytes:
        for base, length in self.segments:
            if base <= offset < base + length:
                return self.data[base][offset - base : offset - base + size]
        return b""


def tier_queue(
    cfg: TieredConfig,
    provider: Provider,
    topic: str,
    queue_id: int,
    doc: MetadataDocument | None = None,
) -> dict[int, tuple[int, bytes]]:
    """Queue offset -> (flat offset, stored bytes) of every message the tier holds of one queue,
    read whole through the metadata (``doc``, else the file as written) and plain provider reads.

    Raises:
        AssertionError: the queue's segments do not walk, or hold an offset twice.
    """
    flat = _FlatQueue(cfg, provider, read_document(cfg) if doc is None else doc, topic, queue_id)
    assert not flat.problems and not flat.duplicates, (flat.problems, flat.duplicates[:5])
    return {q: (off, flat.message(off, size)) for q, (off, size, _) in sorted(flat.units.items())}


def check_tier(
    cfg: TieredConfig,
    provider: Provider,
    *,
    start: dict[tuple[str, int], int] | None = None,
    topics: set[str] | None = None,
) -> TierCheck:
    """Check every local queue (of ``topics``) against the tier; see the module docstring.

    A queue's range starts at ``start[queue]`` -- default: the tier's first unit, which must then
    not be above the local min offset -- and ends at the local max offset; the tier must hold
    nothing at or beyond the local max.
    """
    doc = read_document(cfg)
    log = CommitLog(cfg.commitlog_dirs, cfg.mapped_file_size_commit_log_bytes)
    report = TierCheck()
    for topic, qid in list_queues(cfg.consume_queue_dir):
        if topics is not None and topic not in topics:
            continue
        cq = ConsumeQueue.for_queue(
            cfg.consume_queue_dir, topic, qid, file_size=cfg.effective_cq_file_size_bytes
        )
        lmin, lmax = cq.min_offset(log.min_offset), cq.max_offset()
        flat = _FlatQueue(cfg, provider, doc, topic, qid)
        where = f"{topic}/{qid}"
        report.tier_offsets[(topic, qid)] = set(flat.units)
        report.problems += flat.problems
        if flat.duplicates:
            report.problems.append(f"{where}: offsets twice in the tier: {flat.duplicates[:5]}")
        given = (start or {}).get((topic, qid))
        first = given if given is not None else min(flat.units, default=lmax)
        if given is None and first > lmin:
            report.problems.append(f"{where}: the tier starts at {first}, above local min {lmin}")
        beyond = sorted(q for q in flat.units if q >= lmax)
        if beyond:
            report.problems.append(f"{where}: tier offsets at/after local max {lmax}: {beyond[:5]}")
        local = cq.read_units(first, lmax - first) if lmax > first else np.empty(0, CQ_UNIT_DTYPE)
        for i, (phys, size, tags) in enumerate(local.tolist()):
            q = first + i
            unit = flat.units.get(q)
            if unit is None:
                report.problems.append(f"{where}: queue offset {q} is missing from the tier")
            elif (unit[1], unit[2]) != (size, tags):
                report.problems.append(f"{where} {q}: unit {unit} vs local ({size}, {tags})")
            else:
                mine, theirs = flat.message(unit[0], size), log.read(phys, size)
                if len(mine) != size or mine[:28] + mine[36:] != theirs[:28] + theirs[36:]:
                    report.problems.append(f"{where} {q}: flat bytes differ from the broker's")
                elif int.from_bytes(mine[28:36], "big", signed=True) != unit[0]:
                    report.problems.append(f"{where} {q}: bytes 28..35 do not hold {unit[0]}")
            if len(report.problems) > _MAX_PROBLEMS:
                return report
        report.ranges[(topic, qid)] = (first, lmax)
    return report


def store_fingerprint(root: Path) -> dict[str, tuple[str, int, int]]:
    """sha256, size and mtime (ns) of every file under a directory (read-only checks)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            st = p.stat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns)
    return out
