"""The tier as a table, without Spark: which brokers, which segments, and reading one partition.

Planning (the driver, once): :func:`load_sources` finds the brokers and their metadata documents,
and :func:`plan` cuts them into partitions pruned before any object is read. Reading (an executor,
per partition): :class:`~tiered.jobs.tier_read.PartitionReader` reads a partition's units with
few ranged reads, checks every unit as the read path does, and yields Arrow batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import Final

import numpy as np
import numpy.typing as npt
from tiered.jobs.tier_batch import COLUMNS
from tiered.providers import Provider
from tiered.providers.layout import INDEX_TOPIC
from tiered.providers.layout import FileType
from tiered.providers.layout import cluster_dir_name
from tiered.providers.layout import logical_path
from tiered.providers.layout import segment_key
from tiered.providers.registry import from_config

from tiered.broker.consumequeue import CQ_UNIT_DTYPE
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.broker.javautil import to_i32
from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.errors import ConfigError
from tiered.errors import MetadataError
from tiered.index.compacted_file import CompactedIndexFile
from tiered.index.format import KeyQuery
from tiered.index.progress import backend_key as progress_key
from tiered.index.progress import decode_rows
from tiered.metadata import LONG_MAX
from tiered.metadata import mirror_key_for
from tiered.metadata.metadata_store import read_mirror
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import MetadataDocument
from tiered.metadata.models import parse_metadata

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]

FORMAT_NAME: Final = "rocketmq_tiered"
DEFAULT_READ_BYTES: Final = 64 << 20
DEFAULT_SPLIT_BYTES: Final = 256 << 20
_MAX_INDEX_HITS: Final = 1 << 20

SOURCE_OPTIONS: Final = {
    "config": "comma-separated properties files of the sidecar(s) (tiered.conf)",
    "brokers": "comma-separated broker names, or * for every broker under the cluster",
    "metadata": "a tieredStoreMetadata.json to plan from instead of the backend's mirror",
    "topic": "read only this topic (comma-separated for several)",
    "queueId": "read only these queue ids (comma-separated)",
    "since": "only messages stored at or after (ISO 8601 or epoch ms)",
    "until": "only messages stored before (ISO 8601 or epoch ms)",
    "key": "only messages with this key (KEYS token or UNIQ_KEY); uses the key index",
    "onCorrupt": "fail (default) or skip a message that fails its checks",
    "readBytes": f"bytes per ranged commitlog read (default {DEFAULT_READ_BYTES})",
    "splitBytes": f"a task reads consecutive segments up to this many ({DEFAULT_SPLIT_BYTES})",
    "statsDir": "a directory (local or shared) where each task writes what it read, as JSON",
    "pushdown": "false for a session without spark.sql.python.filterPushdown.enabled",
}
"""The options this source reads besides configuration keys, with what they mean."""


# --- options --------------------------------------------------------------------------------------


class Options(dict[str, str]):
    """Options by name, any case (Spark hands them over lower-cased)."""

    def __init__(self, options: Mapping[str, str] | None = None):
        super().__init__({k.lower(): str(v) for k, v in (options or {}).items()})

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


def parse_time(value: str, option: str) -> int:
    """Epoch milliseconds of ``value`` (digits: epoch ms; else ISO 8601, UTC unless it says).

    Raises:
        ConfigError: neither form; names the option and the value.
    """
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as e:
        raise ConfigError(
            f"option {option}={value!r} is not a time: give epoch milliseconds or ISO 8601 "
            "(2026-03-01 or 2026-03-01T12:00:00+01:00)"
        ) from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@dataclass(frozen=True)
class Bounds:
    """What the query keeps, as far as the source can prune: sets are ``None`` for "any"; offsets
    and times are half-open ``[lo, hi)`` (times in epoch ms)."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    brokers: frozenset[str] | None = None
    clusters: frozenset[str] | None = None
    q_lo: int = 0
    q_hi: int = LONG_MAX
    t_lo: int = 0
    t_hi: int = LONG_MAX
    keys: frozenset[str] | None = None  # KEYS token or UNIQ_KEY equal to one of these
    uniq_keys: frozenset[str] | None = None  # UNIQ_KEY equal to one of these

    def narrow(self, **limits: Any) -> Bounds:
        """These bounds and ``limits`` together (sets intersect, ranges tighten)."""
        out: dict[str, Any] = {}
        for name, value in limits.items():
            mine = getattr(self, name)
            if name.endswith("_lo"):
                out[name] = max(mine, value)
            elif name.endswith("_hi"):
                out[name] = min(mine, value)
            else:
                out[name] = frozenset(value) if mine is None else mine & frozenset(value)
        return replace(self, **out)

    @property
    def empty(self) -> bool:
        """Whether nothing can match."""
        sets = (self.topics, self.queue_ids, self.brokers, self.clusters, self.keys, self.uniq_keys)
        ranges = self.q_lo >= self.q_hi or self.t_lo >= self.t_hi
        return ranges or any(s is not None and not s for s in sets)

    @classmethod
    def from_options(cls, given: Mapping[str, str]) -> Bounds:
        """The bounds the ``topic``, ``queueId``, ``since``, ``until`` and ``key`` options set."""
        options = Options(given)
        b = cls()
        if topics := _csv(options.get("topic")):
            b = b.narrow(topics=topics)
        if qids := _csv(options.get("queueId")):
            try:
                b = b.narrow(queue_ids=[int(q) for q in qids])
            except ValueError as e:
                raise ConfigError(
                    f"option queueId={options['queueId']!r}: give queue ids as integers"
                ) from e
        if "since" in options:
            b = b.narrow(t_lo=parse_time(options["since"], "since"))
        if "until" in options:
            b = b.narrow(t_hi=parse_time(options["until"], "until"))
        if key := options.get("key"):
            b = b.narrow(keys=[key])
        return b


# --- sources and metadata -------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One broker's tier: its configuration (for the provider) and metadata document."""

    cfg: TieredConfig
    cluster: str
    broker: str
    document: MetadataDocument | None

    def provider(self, *, read_ahead: bool = True) -> Provider:
        """A new provider for this broker's backend (the caller closes it). Without
        ``read_ahead`` an object store does not prefetch past what is asked: a task asks for
        whole windows itself, and the next window may be another task's."""
        if read_ahead:
            return from_config(self.cfg)
        return from_config(self.cfg.model_copy(update={"object_store_read_ahead_size_bytes": 0}))

    @property
    def doc(self) -> MetadataDocument:
        """The metadata document (planning only: executors get sources without it)."""
        if self.document is None:
            raise MetadataError(f"broker {self.broker}: its metadata was dropped after planning")
        return self.document

    def without_document(self) -> Source:
        """This source without its metadata (what executors need once partitions are cut)."""
        return replace(self, document=None)


_OWN_OPTIONS: Final = frozenset(k.lower() for k in SOURCE_OPTIONS) | {"path", "pushdown"}


def source_config(given: Mapping[str, str]) -> TieredConfig:
    """The configuration the options give: ``config`` files, then every option that is a
    configuration key (``tieredBackendServiceProvider``, ``objectStoreBucket``, ...).

    Raises:
        ConfigError: a file is unreadable, or an option is neither this source's nor a
            configuration key (named, with the fix).
    """
    options = Options(given)
    overrides = {k: v for k, v in options.items() if k not in _OWN_OPTIONS}
    lowered = {k.lower(): k for k in TieredConfig.model_keys()}
    fixed = {lowered.get(k.lower(), k): v for k, v in overrides.items()}
    try:
        return load_config(_csv(options.get("config")), env={}, overrides=fixed)
    except ConfigError as e:
        what = str(e).replace("override: ", "option: ")
        known = ", ".join(sorted(SOURCE_OPTIONS))
        raise ConfigError(
            f"{what} (options of format {FORMAT_NAME!r}: {known}, or configuration keys)"
        ) from e


def _metadata_from_backend(provider: Provider, cluster: str, broker: str) -> MetadataDocument:
    key = mirror_key_for(cluster, broker)
    if not provider.exists(key):
        raise MetadataError(
            f"broker {broker!r} of cluster {cluster!r} has no metadata mirror at {key} in the "
            "backend: check brokerName/brokerClusterName, or pass option metadata=<path of its "
            "tieredStoreMetadata.json> (a tier RocketMQ's own plugin wrote has no mirror)"
        )
    return read_mirror(provider, key)[0]  # the snapshot and the journal chunks extending it


def _brokers_under(provider: Provider, cluster: str) -> list[str]:
    prefix = f"{cluster_dir_name(cluster)}/"
    found = set()
    for key in provider.list(prefix):
        parts = key[len(prefix) :].split("/")
        if len(parts) == 3 and parts[1:] == ["config", "tieredStoreMetadata.json"]:
            found.add(parts[0])
    return sorted(found)


def load_sources(given: Mapping[str, str]) -> list[Source]:
    """The brokers the options name, each with its metadata document (read once, here).

    The options hold a configuration file and/or configuration keys; brokers are named, or
    every broker under the cluster's prefix (``*``). The document is the sidecar's mirror in the
    backend, or the file given by ``metadata``.

    Raises:
        ConfigError: bad options. MetadataError: a broker has no readable metadata.
    """
    options = Options(given)
    cfg = source_config(options)
    cluster = cfg.broker_cluster_name
    names = _csv(options.get("brokers")) or [cfg.broker_name]
    local = options.get("metadata")
    with from_config(cfg) as provider:
        if names == ["*"]:
            names = _brokers_under(provider, cluster)
            if not names:
                raise MetadataError(
                    f"no broker of cluster {cluster!r} has a metadata mirror under "
                    f"{cluster_dir_name(cluster)}/ in the backend: check brokerClusterName and "
                    "the backend settings"
                )
        if local and len(names) > 1:
            raise ConfigError(
                f"option metadata={local!r} is one broker's file but brokers={names}: read the "
                "brokers one by one, or drop metadata to use their mirrors"
            )
        sources = []
        for broker in names:
            if local:
                path = Path(local)
                try:
                    text = path.read_text(encoding="utf-8")
                except OSError as e:
                    raise MetadataError(f"option metadata={local!r}: cannot read it: {e}") from e
                document = parse_metadata(text, source=str(path))
            else:
                document = _metadata_from_backend(provider, cluster, broker)
            bcfg = cfg.model_copy(update={"broker_name": broker})
            sources.append(Source(bcfg, cluster, broker, document))
    return sources


# --- partitions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seg:
    """One segment as the metadata records it."""

    base: int
    size: int
    begin: int
    end: int


@dataclass(frozen=True)
class QueueTier:
    """One queue's flat files: where they are and their segments (oldest first)."""

    source: int  # index into the reader's sources
    cluster: str
    broker: str
    topic: str
    queue_id: int
    commitlog: tuple[Seg, ...]
    consume_queue: tuple[Seg, ...]

    def key(self, kind: FileType, base: int) -> str:
        """The object key of a segment."""
        return segment_key(self.cluster, self.broker, self.topic, self.queue_id, kind, base)

    @property
    def cq_end(self) -> int:
        """One past the last queue offset the consumequeue holds."""
        last = self.consume_queue[-1] if self.consume_queue else None
        return (last.base + last.size) // CQ_UNIT_SIZE if last else 0

    @property
    def cq_start(self) -> int:
        """The first queue offset the consumequeue holds."""
        return self.consume_queue[0].base // CQ_UNIT_SIZE if self.consume_queue else 0


@dataclass(frozen=True)
class Partition:
    """Read consecutive commitlog segments of a queue (one task reads up to ``splitBytes``; a
    larger segment is cut into ``pieces`` byte ranges, this being ``piece``), or, with ``hits``,
    exactly the units at those flat offsets (a key lookup)."""

    queue: QueueTier
    segments: tuple[int, ...]
    bounds: Bounds
    piece: int = 0
    pieces: int = 1
    hits: tuple[tuple[int, int], ...] = ()

    @property
    def name(self) -> str:
        q = self.queue
        first, last = (self.segments[0], self.segments[-1]) if self.segments else (-1, -1)
        span = f"segment {first}" if first == last else f"segments {first}-{last}"
        what = f"{len(self.hits)} key hits" if self.hits else span
        part = f" piece {self.piece + 1}/{self.pieces}" if self.pieces > 1 else ""
        return f"{q.broker}/{q.topic}/{q.queue_id} {what}{part}"


def _segments(document: MetadataDocument, kind: FileSegmentType, path: str) -> tuple[Seg, ...]:
    table = document.segment_table(kind).get(path, {})
    return tuple(
        Seg(base, rec.size, rec.begin_timestamp, rec.end_timestamp)
        for base, rec in sorted(table.items())
        if rec.size > 0
    )


def queues_of(sources: Sequence[Source], bounds: Bounds) -> list[QueueTier]:
    """Every queue the sources' metadata holds that the bounds allow."""
    out = []
    for i, src in enumerate(sources):
        if bounds.brokers is not None and src.broker not in bounds.brokers:
            continue
        if bounds.clusters is not None and src.cluster not in bounds.clusters:
            continue
        for topic, queues in sorted(src.doc.queue_metadata_table.items()):
            if bounds.topics is not None and topic not in bounds.topics:
                continue
            for qid in sorted(queues):
                if bounds.queue_ids is not None and qid not in bounds.queue_ids:
                    continue
                path = logical_path(src.broker, topic, qid)
                cl = _segments(src.doc, FileSegmentType.COMMIT_LOG, path)
                cq = _segments(src.doc, FileSegmentType.CONSUME_QUEUE, path)
                if cl and cq:
                    out.append(QueueTier(i, src.cluster, src.broker, topic, qid, cl, cq))
    return out


def _overlaps(seg: Seg, bounds: Bounds) -> bool:
    if LONG_MAX in (seg.begin, seg.end):
        return True  # no times recorded: cannot prune
    return seg.end >= bounds.t_lo and seg.begin < bounds.t_hi


def plan(
    sources: Sequence[Source], bounds: Bounds, *, split_bytes: int = DEFAULT_SPLIT_BYTES
) -> list[Partition]:
    """The partitions of a scan: runs of consecutive flat commitlog segments of a queue up to
    ``split_bytes`` (pieces of a larger segment), pruned by ``bounds``.

    Without a read: brokers, topics, queues, and segments by their store times. With small
    reads on the driver: a key bound is looked up in the uploaded key index where it covers a
    queue, and a queue-offset bound reads the two consumequeue units at its ends to keep only
    the commitlog segments between them.
    """
    if bounds.empty:
        return []
    queues = queues_of(sources, bounds)
    providers: dict[int, Provider] = {}

    def provider(i: int) -> Provider:
        if i not in providers:
            providers[i] = sources[i].provider()
        return providers[i]

    try:
        covered: dict[tuple[int, str, int], int] = {}
        parts: list[Partition] = []
        wanted = bounds.keys if bounds.keys is not None else bounds.uniq_keys
        if wanted is not None:
            lookups, covered = _key_lookups(sources, queues, bounds, wanted, provider)
            parts += lookups
        for q in queues:
            b = bounds
            done = covered.get((q.source, q.topic, q.queue_id))
            if done is not None:
                b = bounds.narrow(q_lo=done)
            flat = _flat_range(provider(q.source), q, b)
            if flat is None:
                continue
            kept = [
                i
                for i, seg in enumerate(q.commitlog)
                if _overlaps(seg, b) and seg.base + seg.size > flat[0] and seg.base < flat[1]
            ]
            parts += _runs(q, kept, b, split_bytes)
        return parts
    finally:
        for p in providers.values():
            p.close()


def cq_units(
    read: Callable[[str, int, int], bytes], q: QueueTier, start: int, count: int
) -> npt.NDArray[Any]:
    """Units ``[start, start + count)`` of ``q``'s consumequeue (fewer at its end or at a gap),
    one ranged ``read(key, position, length)`` per segment touched."""
    parts: list[bytes] = []
    lo, hi = start * CQ_UNIT_SIZE, (start + count) * CQ_UNIT_SIZE
    for seg in q.consume_queue:
        a, b = max(lo, seg.base), min(hi, seg.base + seg.size)
        if a >= b:
            continue
        if a != lo + sum(len(p) for p in parts):
            break  # a gap: stop at it
        parts.append(read(q.key(FileType.CONSUME_QUEUE, seg.base), a - seg.base, b - a))
    raw = b"".join(parts)
    return np.frombuffer(raw[: len(raw) - len(raw) % CQ_UNIT_SIZE], dtype=CQ_UNIT_DTYPE)


def _runs(q: QueueTier, kept: list[int], b: Bounds, split_bytes: int) -> list[Partition]:
    """Partitions over the ``kept`` segments of ``q``: runs of consecutive ones of up to
    ``split_bytes`` (a task per run, not per segment: a task costs Spark a Python worker's
    round trip), and pieces of a segment larger than that."""
    out: list[Partition] = []
    run: list[int] = []
    size = 0
    for i in kept:
        seg = q.commitlog[i]
        if run and (i != run[-1] + 1 or size + seg.size > split_bytes):
            out.append(Partition(q, tuple(run), b))
            run, size = [], 0
        if seg.size > split_bytes:
            pieces = -(-seg.size // split_bytes)
            out += [Partition(q, (i,), b, k, pieces) for k in range(pieces)]
            continue
        run.append(i)
        size += seg.size
    if run:
        out.append(Partition(q, tuple(run), b))
    return out


def _flat_range(provider: Provider, q: QueueTier, b: Bounds) -> tuple[int, int] | None:
    """The flat commitlog bytes that hold the queue offsets ``b`` allows (``None``: none)."""
    lo, hi = max(b.q_lo, q.cq_start), min(b.q_hi, q.cq_end)
    if lo >= hi:
        return None
    if (lo, hi) == (q.cq_start, q.cq_end):
        return 0, LONG_MAX
    first, last = cq_units(provider.read, q, lo, 1), cq_units(provider.read, q, hi - 1, 1)
    if not len(first) or not len(last):
        return 0, LONG_MAX  # a gap in the consumequeue: let the segments tell
    return int(first["offset"][0]), int(last["offset"][0]) + int(last["size"][0])


def _key_lookups(
    sources: Sequence[Source],
    queues: Sequence[QueueTier],
    bounds: Bounds,
    wanted: frozenset[str],
    provider_for: Callable[[int], Provider],
) -> tuple[list[Partition], dict[tuple[int, str, int], int]]:
    """Look the keys up in each broker's uploaded key index; return a partition per queue with
    hits, and per queue the queue offset up to which the index covers it (from the index's
    progress copy; a queue without one is scanned)."""
    parts: list[Partition] = []
    covered: dict[tuple[int, str, int], int] = {}
    by_source: dict[int, list[QueueTier]] = {}
    for q in queues:
        by_source.setdefault(q.source, []).append(q)
    for i, qs in by_source.items():
        src = sources[i]
        provider = provider_for(i)
        progress = _index_progress(provider, src)
        if not progress:
            continue
        records = src.doc.segment_table(FileSegmentType.INDEX).get(
            logical_path(src.broker, INDEX_TOPIC, 0), {}
        )
        files = [
            CompactedIndexFile(
                provider,
                segment_key(src.cluster, src.broker, INDEX_TOPIC, 0, FileType.INDEX, base),
                size=rec.size,
                begin_timestamp=rec.begin_timestamp,
                end_timestamp=rec.end_timestamp,
                slots=src.cfg.tiered_store_index_file_max_hash_slot_num,
            )
            for base, rec in sorted(records.items())
            if rec.size > 0
        ]
        hits: dict[tuple[str, int], set[tuple[int, int]]] = {}
        for topic in sorted({q.topic for q in qs}):
            meta = src.doc.topic_metadata_table.get(topic)
            if meta is None:
                continue
            topic_id = to_i32(meta.topic_id)
            for key in sorted(wanted):
                query = KeyQuery(
                    topic, key, bounds.t_lo, min(bounds.t_hi, LONG_MAX), _MAX_INDEX_HITS,
                    topic_id,
                )  # fmt: skip
                for f in files:
                    if max(f.begin_timestamp, f.end_timestamp) < bounds.t_lo:
                        continue
                    for item in f.query(query):
                        hits.setdefault((topic, item.queue_id), set()).add((item.offset, item.size))
        for q in qs:
            done = progress.get((q.topic, q.queue_id))
            if done is None:
                continue
            covered[(i, q.topic, q.queue_id)] = done
            found = sorted(hits.get((q.topic, q.queue_id), ()))
            if found:  # what a later scan of the queue reads is not taken twice
                parts.append(Partition(q, (), bounds.narrow(q_hi=done), hits=tuple(found)))
    return parts, covered


def _index_progress(provider: Provider, src: Source) -> dict[tuple[str, int], int]:
    """Per queue, the queue offset below which the uploaded key index holds every key (the
    index's progress copy); empty when there is none (RocketMQ's plugin writes none)."""
    key = progress_key(src.cluster, src.broker)
    try:
        if not provider.exists(key):
            return {}
        rows = decode_rows(provider.read(key, 0, provider.size(key)))
    except (ValueError, TypeError) as e:
        log.warning("key index progress %s unusable (%s): the key lookup scans", key, e)
        return {}
    return {(str(t), int(q)): int(o) for t, q, o in rows}


ALL_COLUMNS: Final = [name for name, _ in COLUMNS]
