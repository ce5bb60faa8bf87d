"""``status``: per queue, local vs tiered offsets, lag, gaps, last upload; the sidecar's role.

Read-only and lock-free, so it works while ``run`` is running: the metadata file is parsed
directly (falling back to ``.bak``; nothing is moved or rewritten), the broker store is read
through :mod:`tiered.broker`, and the dispatcher's state file gives gaps and upload times; whether
uploads are paused comes from the pause file (:mod:`tiered.offload.pause`).
POP dead letters per group and topic come from the replay port's ``config/replayPopState.json``.
The key index is summarised from the local index files' headers, ``progress.json`` (how far each
queue is indexed) and the metadata's INDEX segments.
The tiered min is the first consumequeue segment's first offset (after expiry removed commitlog
segments, the first *readable* offset can be higher).
Every queue's local bounds come from one call of the kernel
(:func:`~tiered.broker.cq_bounds.start_many_bounds`), which reads while the metadata is parsed.
The running sidecar's own ``/v1/status`` reads its memory instead of those files
(:class:`StatusSources`): what they are written from, without parsing them per request.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from pathlib import Path
from typing import Any
from typing import Final

from tiered.broker.configjson import load_topics
from tiered.broker.consumequeue import CQ_UNIT_SIZE
from tiered.config import TieredConfig
from tiered.core.data_dir_lock import LOCK_NAME
from tiered.errors import TieredStoreError
from tiered.index.format import END_MAGIC_CODE
from tiered.index.format import HEADER_SIZE
from tiered.index.format import IndexHeader
from tiered.index.index_store_file import FILE_DIRECTORY_NAME
from tiered.index.index_store_file import local_index_files
from tiered.index.progress import IndexProgress
from tiered.metadata import FileSegmentMetadata
from tiered.metadata import FileSegmentType
from tiered.metadata import MetadataDocument
from tiered.metadata import read_metadata
from tiered.offload.dispatch_state import QueueState
from tiered.offload.dispatch_state import StateFile
from tiered.offload.dispatch_state import StateSnapshot
from tiered.offload.pause import PauseFile
from tiered.offload.pause import PauseState
from tiered.providers.layout import index_logical_path
from tiered.providers.layout import logical_path
from tiered.remoting.pop_state import PopState
from tiered.source.local_source import LocalSource
from tiered.source.no_local_store import REPLICA_MARKER
from tiered.source.no_local_store import NoLocalStore
from tiered.source.topic_filter import TopicFilter

_LAG_CHUNK = 65536


@dataclass
class QueueStatus:
    """One queue's row."""

    topic: str
    queue_id: int
    local_min: int = -1
    local_max: int = -1
    tiered_min: int = -1
    tiered_commit: int = -1
    lag_messages: int = 0
    lag_bytes: int = 0
    tiered_bytes: int = 0
    segments: int = 0
    gaps: list[list[int]] = field(default_factory=list)
    gap_messages: int = 0
    last_upload_ms: int = 0
    error: str = ""
    offloaded: bool = True
    indexed_offset: int = -1
    index_lag: int = 0


@dataclass
class IndexFileStatus:
    """One local index file, from its header (as of its last flush)."""

    name: str
    status: str
    items: int
    begin_ms: int
    end_ms: int


@dataclass
class IndexStatusReport:
    """The key index: local files waiting, uploaded files, how far the queues are indexed."""

    enabled: bool
    local_files: list[IndexFileStatus] = field(default_factory=list)
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    uploaded_begin_ms: int = 0
    uploaded_end_ms: int = 0
    lag_messages: int = 0
    error: str = ""


@dataclass
class BrokerTopic:
    """One topic of the broker's ``config/topics.json``, and whether the sidecar offloads it."""

    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    offloaded: bool
    """False for system topics and topics the filter excludes."""
    queues_with_messages: int
    """Queues of the topic with a consumequeue in the store or a flat file in the tier."""


@dataclass
class PopDeadLetters:
    """A group's POP messages of one topic delivered ``retryMaxTimes`` + 1 times and never acked:
    the replay port records them in ``config/replayPopState.json`` (a read-only tier never
    writes the broker's ``%DLQ%`` topic) and counts them as consumed."""

    group: str
    topic: str
    count: int
    latest: list[list[int]]
    """The latest ``[queue id, offset]`` of them, oldest first (a bounded number)."""


@dataclass(frozen=True)
class StatusQuery:
    """Which queues ``status`` lists: those of topics matching ``topic`` (a glob; None: all)
    that ``readable`` allows (an account's topics), only those behind with ``lagging`` (most
    behind first), the ``limit`` rows from ``offset`` on (a page). The totals count every
    queue that matched, listed or not."""

    topic: str | None = None
    lagging: bool = False
    limit: int | None = None
    offset: int = 0
    readable: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class StatusSources:
    """Where :func:`collect_status` reads the sidecar's own state; each None reads the files (a
    process beside ``run``). The running sidecar's ``/v1/status`` passes its memory, which those
    files are written from: ``metadata``, the live document while it is held (the store's lock)
    and its source's name; ``states``, the dispatcher's queue states; ``indexed``, every queue's
    indexed offset."""

    metadata: Callable[[], AbstractContextManager[tuple[MetadataDocument, str]]] | None = None
    states: Callable[[], StateSnapshot] | None = None
    indexed: Callable[[], Mapping[tuple[str, int], int]] | None = None


@dataclass
class StatusReport:
    """The whole answer of ``status``."""

    cluster: str
    broker: str
    role: str
    daemon_pid: int | None
    daemon_running: bool
    state_updated_ms: int
    metadata: str
    queues: list[QueueStatus] = field(default_factory=list)
    index: IndexStatusReport = field(default_factory=lambda: IndexStatusReport(False))
    topics: list[BrokerTopic] = field(default_factory=list)
    """The broker's topics the query selects; on the first page only (``offset`` 0), so a client
    that pages through thousands of queues gets each topic once."""
    topics_source: str = ""
    """Where :attr:`topics` came from (``topics.json``, its ``.bak``), or why they are missing."""
    summary: dict[str, int] = field(default_factory=dict)
    """:meth:`totals` of every queue the query matched (set by :func:`collect_status`)."""
    offset: int = 0
    """The first matched row :attr:`queues` lists (a page's start)."""
    rows: int = -1
    """Rows the query selected before paging (-1: :attr:`queues` is all of them)."""
    uploads: PauseState = field(default_factory=PauseState)
    """Whether uploads are paused, since when, by whom (``rmq-tiered pause``)."""
    pop_dead_letters: list[PopDeadLetters] = field(default_factory=list)
    """POP dead letters per group and topic (of the topics the query selects)."""
    pop_state_error: str = ""
    """Why the POP state could not be read (empty when it was, or there is none)."""

    def totals(self) -> dict[str, int]:
        """Sums over every queue the query matched (over :attr:`queues` when not collected by
        :func:`collect_status`): ``queues`` matched, ``laggingQueues`` behind, ``listed``."""
        return self.summary or {**_sums(self.queues), "listed": len(self.queues)}

    @property
    def next_offset(self) -> int | None:
        """Where the next page starts, or None when this one lists the last matched row."""
        end = self.offset + len(self.queues)
        return end if end < self.rows else None

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form (camelCase keys)."""

        def camel(name: str) -> str:
            head, *rest = name.split("_")
            return head + "".join(w.title() for w in rest)

        return {
            "cluster": self.cluster,
            "broker": self.broker,
            "role": self.role,
            "daemon": {"pid": self.daemon_pid, "running": self.daemon_running},
            "uploads": self.uploads.to_json(),
            "stateUpdatedMs": self.state_updated_ms,
            "metadata": self.metadata,
            "totals": self.totals(),
            "page": {"offset": self.offset, "next": self.next_offset},
            "queues": [{_CAMEL[k]: v for k, v in vars(q).items()} for q in self.queues],
            "index": _camel_tree(asdict(self.index), camel),
            "topicsSource": self.topics_source,
            "topics": [{camel(k): v for k, v in asdict(t).items()} for t in self.topics],
            "popDeadLetters": [asdict(d) for d in self.pop_dead_letters],
            "popStateError": self.pop_state_error,
        }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


_CAMEL = {f.name: _camel(f.name) for f in fields(QueueStatus)}
"""A queue row's JSON keys (rows are many: no ``asdict`` deep copy, no renaming per row)."""


def _sums(rows: list[QueueStatus]) -> dict[str, int]:
    return {
        "queues": len(rows),
        "laggingQueues": sum(1 for q in rows if q.lag_messages > 0 or q.error),
        "lagMessages": sum(q.lag_messages for q in rows),
        "lagBytes": sum(q.lag_bytes for q in rows),
        "tieredBytes": sum(q.tiered_bytes for q in rows),
        "gapMessages": sum(q.gap_messages for q in rows),
        "indexLagMessages": sum(q.index_lag for q in rows),
    }


def _behind(row: QueueStatus) -> bool:
    return row.lag_messages > 0 or bool(row.error)


def _camel_tree(value: Any, camel: Any) -> Any:
    if isinstance(value, dict):
        return {camel(k): _camel_tree(v, camel) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_tree(v, camel) for v in value]
    return value


def daemon_of(data_dir: Path) -> tuple[int | None, bool]:
    """(pid, running) of the process holding the data-dir lock, without touching the lock.

    The holder is looked up in ``/proc/locks`` (an ``flock`` on the lock file's inode); where
    that file does not exist, the pid written in the lock file is probed with signal 0.
    """
    path = Path(data_dir) / LOCK_NAME
    try:
        text = path.read_text(encoding="ascii").strip()
        st = path.stat()
    except (FileNotFoundError, UnicodeDecodeError):
        return None, False
    written = int(text) if text.isdigit() else None
    try:
        locks = Path("/proc/locks").read_text(encoding="ascii")
    except OSError:
        locks = None
    if locks is not None:
        device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in locks.splitlines():
            fields = line.split()
            if "FLOCK" in fields and device in fields:
                pid = fields[fields.index(device) - 1]
                return (int(pid) if pid.isdigit() else written), True
        return written, False
    if written is None:
        return None, False
    try:
        os.kill(written, 0)
    except ProcessLookupError:
        return written, False
    except PermissionError:
        pass
    return written, True


def collect_status(
    cfg: TieredConfig, query: StatusQuery | None = None, sources: StatusSources | None = None
) -> StatusReport:
    """What ``status`` shows of the queues ``query`` selects (see the module docstring), read
    from ``sources`` (default: the files)."""
    query = query or StatusQuery()
    sources = sources or StatusSources()
    data_dir = cfg.tiered_data_dir
    pid, running = daemon_of(data_dir)
    replica = (data_dir / REPLICA_MARKER).exists()  # rmq-tiered serve's data dir
    if replica:
        from tiered.core.replica import replica_config

        cfg = replica_config(cfg)
    snapshot = (
        sources.states() if sources.states else StateFile(cfg.tiered_data_dir).load(owner=False)
    )
    local = NoLocalStore(cfg) if replica else LocalSource(cfg)
    filt = TopicFilter.from_config(cfg)
    everything = local.queues()
    listed = [k for k in everything if _selects(query, k[0])]
    # the kernel reads the local queues (without the GIL) while the metadata is parsed; the
    # dispatcher's last local max of a queue is where its max is read from
    hints = [_last_max(snapshot.queues.get(k)) for k in listed]
    local_bounds = local.start_many_bounds(listed, hints)
    uploaded: list[FileSegmentMetadata] = []
    metadata = sources.metadata() if sources.metadata else _metadata_files(data_dir)
    with metadata as (doc, source):
        keys = {k for k in listed if filt.allows(k[0])}
        for topic, by_id in doc.queue_metadata_table.items():
            if _selects(query, topic):
                keys.update(
                    (topic, qid)
                    for qid, m in by_id.items()
                    if m.queue.broker_name == cfg.broker_name
                )
        ordered = sorted(keys)
        paths = [logical_path(cfg.broker_name, topic, qid) for topic, qid in ordered]
        cq_table = doc.segment_table(FileSegmentType.CONSUME_QUEUE)
        cl_table = doc.segment_table(FileSegmentType.COMMIT_LOG)
        # each queue's segments by base, copied (the live tables change once the lock is given
        # back; a record's fields are read after, each as it is then)
        tiers = [(dict(cq_table.get(p, {})), dict(cl_table.get(p, {}))) for p in paths]
        if cfg.message_index_enable and cfg.uploads:
            table = doc.segment_table(FileSegmentType.INDEX)
            uploaded = list(table.get(index_logical_path(cfg.broker_name), {}).values())
    report = StatusReport(
        cluster=cfg.broker_cluster_name,
        broker=cfg.broker_name,
        role="replica" if replica else cfg.role,
        daemon_pid=pid,
        daemon_running=running,
        state_updated_ms=snapshot.updated_ms,
        metadata=source,
        uploads=PauseFile(cfg.tiered_data_dir).read(),
    )
    rows = [QueueStatus(topic, qid, offloaded=filt.allows(topic)) for topic, qid in ordered]
    for row, (cq, cl) in zip(rows, tiers, strict=True):
        _tiered(row, cq, cl)
    found = dict(zip(listed, local_bounds(), strict=True))
    hinted = dict(zip(listed, hints, strict=True))
    for row, (topic, qid) in zip(rows, ordered, strict=True):
        # a queue with no consumequeue directory when the store was listed: none (-1, -1)
        _local(row, local, found.get((topic, qid), _NO_QUEUE), hinted.get((topic, qid)))
        state = snapshot.queues.get((topic, qid))
        if state is not None:
            if state.gaps:
                row.gaps = [[g.start, g.end, g.detected_ms] for g in state.gaps]
                row.gap_messages = sum(g.messages for g in state.gaps)
            row.last_upload_ms = state.last_upload_ms
            row.error = row.error or state.error
        report.queues.append(row)
    if cfg.message_index_enable and cfg.uploads:
        report.index = _index(cfg, uploaded, report.queues, sources.indexed)
    if replica:
        report.topics_source = (
            "none: a read replica (rmq-tiered serve) has no broker store; every read is from "
            "the tier (tieredStorageLevel=FORCE)"
        )
    elif query.offset > 0:  # (a page after the first: the topics were on the first)
        report.topics_source = "on the first page (offset 0)"
    else:
        _topics(cfg, report, filt, set(everything) | keys, query)
    report.pop_dead_letters, report.pop_state_error = _pop_dead_letters(cfg.tiered_data_dir)
    report.pop_dead_letters = [d for d in report.pop_dead_letters if _selects(query, d.topic)]
    if query.readable is not None:
        readable = query.readable
        report.topics = [t for t in report.topics if readable(t.topic)]
        report.pop_dead_letters = [d for d in report.pop_dead_letters if readable(d.topic)]
    rows = report.queues
    if query.lagging:
        rows = sorted((q for q in rows if _behind(q)), key=lambda q: -q.lag_messages)
    end = None if query.limit is None else query.offset + query.limit
    report.summary = {**_sums(report.queues), "listed": len(rows[query.offset : end])}
    report.queues, report.offset, report.rows = rows[query.offset : end], query.offset, len(rows)
    return report


_NO_QUEUE: Final = (-1, -1, -1)


def _pop_dead_letters(data_dir: Path) -> tuple[list[PopDeadLetters], str]:
    """The dead letters of the POP state the replay port persists (read as a reader beside
    ``run``: a damaged file is left as it is), and why it could not be read."""
    state = PopState(Path(data_dir) / "config")
    try:
        state.load(owner=False)
    except OSError as e:
        return [], f"{state.path}: {e}"
    return [
        PopDeadLetters(group, topic, count, [[q, o] for q, o in latest])
        for group, topic, count, latest in state.dead_letter_table()
    ], ""


def _selects(query: StatusQuery, topic: str) -> bool:
    """Whether the queues of ``topic`` are among those ``query`` asks for."""
    if query.topic is not None and not fnmatch.fnmatchcase(topic, query.topic):
        return False
    return query.readable is None or query.readable(topic)


def _last_max(state: QueueState | None) -> int | None:
    """The local max offset the dispatcher last saw of a queue, if any."""
    return state.local_max if state is not None and state.local_max > 0 else None


@contextlib.contextmanager
def _metadata_files(data_dir: Path) -> Iterator[tuple[MetadataDocument, str]]:
    """The metadata as its files hold it (:func:`~tiered.metadata.read_metadata`)."""
    yield read_metadata(data_dir)


def _topics(
    cfg: TieredConfig,
    report: StatusReport,
    filt: TopicFilter,
    queues: set[tuple[str, int]],
    query: StatusQuery,
) -> None:
    """The broker's topics from ``{storePathRootDir}/config/topics.json`` (``.bak`` as the
    broker falls back) that ``query``'s glob selects; a missing or unreadable file is
    reported, not raised."""
    path = cfg.store_path_root_dir / "config" / "topics.json"
    try:
        table = load_topics(path)
    except TieredStoreError as e:
        report.topics_source = f"unavailable: {e}"
        return
    report.topics_source = str(path)
    counts: dict[str, int] = {}
    for topic, _ in queues:
        counts[topic] = counts.get(topic, 0) + 1
    for name, t in sorted(table.topics.items()):
        if query.topic is not None and not fnmatch.fnmatchcase(name, query.topic):
            continue
        offloaded, count = filt.allows(name), counts.get(name, 0)
        row = BrokerTopic(name, t.read_queue_nums, t.write_queue_nums, t.perm, offloaded, count)
        report.topics.append(row)


def _index(
    cfg: TieredConfig,
    uploaded: list[FileSegmentMetadata],
    queues: list[QueueStatus],
    indexed: Callable[[], Mapping[tuple[str, int], int]] | None,
) -> IndexStatusReport:
    """The key index's state, read-only: headers of the local files, the ``uploaded`` INDEX
    segments, how far each queue is indexed (``indexed``, default ``progress.json``)."""
    report = IndexStatusReport(True)
    directory = Path(cfg.tiered_data_dir) / FILE_DIRECTORY_NAME
    for path in local_index_files(directory):
        try:
            with path.open("rb") as f:
                header = IndexHeader.parse(f.read(HEADER_SIZE).ljust(HEADER_SIZE, b"\0"))
        except OSError as e:
            report.error = f"{path}: {e.strerror or e}"
            continue
        sealed = header.magic == END_MAGIC_CODE
        report.local_files.append(
            IndexFileStatus(
                path.name,
                "SEALED" if sealed else "UNSEALED",
                header.item_count,
                header.begin_timestamp,
                header.end_timestamp,
            )
        )
    report.uploaded_files = len(uploaded)
    report.uploaded_bytes = sum(s.size for s in uploaded)
    if uploaded:
        report.uploaded_begin_ms = min(s.begin_timestamp for s in uploaded)
        report.uploaded_end_ms = max(s.end_timestamp for s in uploaded)
    offsets: Mapping[tuple[str, int], int]
    if indexed is None:
        progress = IndexProgress(directory)
        progress.load(owner=False)
        offsets = progress.items()
    else:
        offsets = indexed()
    for row in queues:
        at = offsets.get((row.topic, row.queue_id))
        if at is None or row.tiered_commit < 0:
            continue
        row.indexed_offset = at
        row.index_lag = max(row.tiered_commit - max(at, row.tiered_min), 0)
    report.lag_messages = sum(q.index_lag for q in queues)
    return report


def _tiered(
    row: QueueStatus, cq: dict[int, FileSegmentMetadata], cl: dict[int, FileSegmentMetadata]
) -> None:
    """The tier's side of ``row`` from its consumequeue and commitlog segments (by base)."""
    row.segments = len(cq) + len(cl)
    row.tiered_bytes = sum(s.size for s in cq.values()) + sum(s.size for s in cl.values())
    if cq:
        bases = sorted(cq)
        row.tiered_min = bases[0] // CQ_UNIT_SIZE
        row.tiered_commit = (bases[-1] + cq[bases[-1]].size) // CQ_UNIT_SIZE


def _local(
    row: QueueStatus,
    local: LocalSource,
    bounds: tuple[int, int, int] | None,
    hint: int | None,
) -> None:
    """The local side of ``row``: its bounds (``bounds``: as :meth:`LocalSource.many_bounds`
    found them from ``hint``, None to ask :meth:`LocalSource.bounds`), the lag and its bytes
    (the kernel's bytes from the hint when the lag starts there, else read)."""
    tail = -1
    try:
        if bounds is None:
            commit = row.tiered_commit if row.tiered_commit > 0 else None
            row.local_min, row.local_max = local.bounds(row.topic, row.queue_id, commit)
        else:
            row.local_min, row.local_max, tail = bounds
    except (TieredStoreError, OSError) as e:
        row.error = f"local store: {e}"
        return
    start = max(row.tiered_commit, row.local_min) if row.tiered_commit >= 0 else row.local_min
    if not row.offloaded or start >= row.local_max:
        return
    row.lag_messages = row.local_max - start
    if tail >= 0 and start == hint:
        row.lag_bytes = tail
        return
    q = start
    with contextlib.suppress(TieredStoreError, OSError):
        while q < row.local_max:
            units = local.read_units(row.topic, row.queue_id, q, min(_LAG_CHUNK, row.local_max - q))
            if not len(units):
                break
            row.lag_bytes += int(units["size"].astype("int64").sum())
            q += len(units)
