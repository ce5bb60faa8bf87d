"""``MetadataStore``: ``{tieredDataDir}/config/tieredStoreMetadata.json``, atomic, mirrored.

The file is upstream's (spec §7; :mod:`tiered.metadata.models` parses and writes it). Every persist
replaces it atomically with the previous version kept as ``.bak`` (:mod:`tiered.metadata.atomic`),
then puts the same bytes to the backend mirror (:func:`mirror_key_for`, spaced out during a
dispatch pass: :meth:`MetadataStore.mirror_spaced`), from which
:meth:`MetadataStore.recover_from_mirror` rebuilds a lost local copy.

Write rule for callers: upload data before recording the metadata that points to it; remove
metadata (and let it persist) before deleting the data. Inside :meth:`MetadataStore.batch` a
change is durable only when the outermost batch ends or :meth:`MetadataStore.persist` is called,
so delete backend data only after one of those.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Literal

from tiered import metrics
from tiered.errors import MetadataError
from tiered.errors import ProviderError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentNotFoundError
from tiered.providers.base import Provider
from tiered.providers.layout import check_component
from tiered.providers.layout import check_key
from tiered.providers.layout import cluster_dir_name

from .atomic import AtomicFile
from .models import FileSegmentMetadata
from .models import FileSegmentType
from .models import MessageQueue
from .models import MetadataDocument
from .models import QueueMetadata
from .models import TopicMetadata
from .models import dump_metadata
from .models import parse_metadata
from .orphans import OrphanLog

__all__ = [
    "FILE_NAME",
    "HOUR_MS",
    "LoadReport",
    "MetadataStore",
    "mirror_key_for",
    "now_ms",
    "read_metadata",
]

log = logging.getLogger(__name__)

FILE_NAME = "tieredStoreMetadata.json"
"""The metadata file name, locally (below ``config/``) and in the backend mirror key."""

HOUR_MS = 3_600_000
"""One hour in milliseconds: reserve times are hours, timestamps epoch milliseconds."""


def now_ms() -> int:
    """Epoch milliseconds, like Java's ``System.currentTimeMillis()``."""
    return time.time_ns() // 1_000_000


def mirror_key_for(cluster: str, broker: str) -> str:
    """The backend key of a broker's metadata mirror.

    ``{md5(cluster)[:8]}_{cluster}/{broker}/config/tieredStoreMetadata.json``: beside the broker's
    segment tree, never inside a segment directory (those are ``{topic}/{queueId}/{TYPE}/``).

    Raises:
        InvalidKeyError: the cluster or broker name is not a safe key component.
    """
    check_component(broker, "broker name")
    return check_key(f"{cluster_dir_name(cluster)}/{broker}/config/{FILE_NAME}")


@dataclass(frozen=True)
class LoadReport:
    """What :meth:`MetadataStore.load` used and what it had to step over."""

    used: Literal["main", "bak", "empty"]
    moved_aside: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class MetadataStore:
    """Thread-safe. Every mutator marks the document dirty and, unless inside `batch()`, persists.

    Call :meth:`load` before anything else (a store that was never loaded refuses to persist,
    so it can never overwrite a file it has not read). Getters return copies; change a record
    through its ``update_*`` method. Counters (also exported, :mod:`tiered.metrics`):
    ``persist_count``, ``persist_failures``, ``mirror_count``, ``mirror_failures``,
    ``last_persist_bytes``.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        mirror: Provider | None = None,
        mirror_key: str | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if mirror is not None and mirror_key is None:
            raise MetadataError(
                f"a metadata mirror on provider {mirror.name!r} needs a mirror_key: "
                "pass mirror_key_for(cluster, broker)"
            )
        if mirror_key is not None:
            check_key(mirror_key)
        self._file = AtomicFile(Path(data_dir) / "config" / FILE_NAME)
        self.path: Path = self._file.path
        self.bak_path: Path = self._file.bak_path
        self.orphans = OrphanLog(self.path.parent)
        """Objects whose records are removed but which are not deleted yet (expiry)."""
        self.mirror = mirror
        self.mirror_key = mirror_key
        self._clock = clock
        self._lock = threading.RLock()
        self._doc = MetadataDocument()
        self._loaded = False
        self._dirty = False
        self._depth = 0
        self._mirror_stale = False
        self._mirror_every = 0.0
        self._mirrored_at = -float("inf")
        self._unmirrored: bytes | None = None
        self.persist_count = 0
        self.persist_failures = 0
        self.mirror_count = 0
        self.mirror_failures = 0
        self.last_persist_bytes = 0

    def __repr__(self) -> str:
        return f"MetadataStore({str(self.path)!r}, loaded={self._loaded}, dirty={self._dirty})"

    @classmethod
    def read_only(cls, data_dir: Path) -> MetadataStore:
        """A store over the metadata as its files hold now (:func:`read_metadata`) that refuses
        every change: it was never loaded, so it never persists, moves or mirrors anything.

        Raises:
            MetadataError: a file exists but neither it nor ``.bak`` parses.
        """
        store = cls(data_dir)
        store._doc = read_metadata(data_dir)[0]
        return store

    @property
    def loaded(self) -> bool:
        """Whether :meth:`load` has read the file (a read-only store never is)."""
        return self._loaded

    @property
    def dirty(self) -> bool:
        """Whether the document holds changes not yet persisted (only inside a batch)."""
        return self._dirty

    @property
    def topic_serial_number(self) -> int:
        """The last topic id handed out; -1 before the first topic."""
        with self._lock:
            return self._doc.topic_serial_number

    # --- load / persist ---------------------------------------------------------------------------

    def load(self) -> LoadReport:
        """Read the file (falling back to ``.bak``), replacing the in-memory document. A damaged
        file is moved aside to ``X.corrupt-<ms>`` (never deleted) and reported in the
        :class:`LoadReport`; when neither file is usable nothing is moved and the error says how
        to rebuild.

        Raises:
            MetadataError: the main file is damaged and ``.bak`` is missing or damaged too (or
                only a damaged ``.bak`` exists); both files are left in place.
        """
        with self._lock:
            self._file.drop_stale_temp()
            problems: list[str] = []
            main_damaged = False
            doc = _read_document(self.path, problems)
            used: Literal["main", "bak", "empty"] = "main"
            if doc is None:
                main_damaged = self.path.exists()
                doc = _read_document(self.bak_path, problems)
                used = "bak"
            if doc is None:
                if main_damaged or self.bak_path.exists():
                    raise MetadataError(
                        f"{'; '.join(problems)}; no usable tiered metadata (the damaged files "
                        "were left in place): restore it from the backend mirror with "
                        "`rmq-tiered recover` (keeps topic ids), or, if the mirror is gone too, "
                        "rebuild it from the segments with `rmq-tiered recover --from-backend`"
                    )
                doc, used = MetadataDocument(), "empty"
                problems = []  # a first start: nothing was there to lose
            moved: list[Path] = []
            if main_damaged:
                moved.append(AtomicFile.move_aside(self.path, self._clock()))
            if problems and used == "bak":
                log.warning(
                    "%s; loaded %s%s",
                    "; ".join(problems),
                    self.bak_path,
                    f", damaged file moved to {moved[0]}" if moved else "",
                )
            self._doc, self._loaded, self._dirty = doc, True, False
        self.orphans.keys()  # read (or set aside, if damaged) the orphan log at start
        return LoadReport(used=used, moved_aside=moved, problems=problems)

    def persist(self) -> None:
        """Write the document atomically, keep the previous file as ``.bak``, then mirror it.

        Raises:
            MetadataError: the store was never loaded.
            OSError: the local write failed (the previous file is still in place).
            ProviderError: the mirror put failed; the local file *was* persisted. The failure
                is logged and counted, and the next persist (or batch end) mirrors again.
        """
        with self._lock:
            self._check_loaded()
            data = dump_metadata(self._doc).encode("utf-8")
            try:
                self._file.write(data)
            except OSError:
                self.persist_failures += 1
                metrics.METADATA_PERSIST.labels("failed").inc()
                raise
            self._dirty = False
            self.persist_count += 1
            metrics.METADATA_PERSIST.labels("ok").inc()
            metrics.METADATA_LAST_PERSIST.set_to_current_time()
            self.last_persist_bytes = len(data)
            self._mirror_stale = self.mirror is not None
            # the newest persisted document, until a put of it succeeds (a failed put, or one
            # not due yet inside mirror_spaced, leaves it for the next chance)
            self._unmirrored = data if self._mirror_stale else None
            if not self._mirror_due():
                return
            self._put_mirror(data)

    def _put_mirror(self, data: bytes) -> None:
        if self.mirror is None or self.mirror_key is None:
            return
        self._mirrored_at = time.monotonic()
        try:
            self.mirror.put(self.mirror_key, data, overwrite=True)
        except ProviderError as e:
            self.mirror_failures += 1
            metrics.METADATA_MIRROR.labels("failed").inc()
            log.warning(
                "metadata persisted locally but its mirror %r on %s failed (%s); retried at the "
                "next persist",
                self.mirror_key,
                self.mirror.name,
                e,
                extra={"objectKey": self.mirror_key},
            )
            raise
        self.mirror_count += 1
        metrics.METADATA_MIRROR.labels("ok").inc()
        metrics.METADATA_LAST_MIRROR.set_to_current_time()
        self._mirror_stale = False
        self._unmirrored = None

    @contextlib.contextmanager
    def mirror_spaced(self, interval_s: float) -> Iterator[None]:
        """Within the block, a persist mirrors only if ``interval_s`` has passed since the last
        mirror put (the local file is written every time); the block's end puts the newest
        persisted document if its mirror is behind and the interval has passed. A mirror still
        behind after the block is put by the next persist or :meth:`batch` end outside one, or
        by the next block's once due (a dispatch pass is one block: a live tail's passes, one a
        second, put it every ``interval_s``, not every pass). The mirror then lags the local
        file by about the interval, which a recovery from it allows (it adds what a listing
        shows was uploaded later).

        Raises:
            ProviderError: that last put failed (logged and counted as any mirror failure; the
                next persist mirrors again).
        """
        with self._lock:
            previous, self._mirror_every = self._mirror_every, interval_s
        try:
            yield
        finally:
            with self._lock:
                due = self._mirror_due()
                self._mirror_every = previous
                if self._mirror_stale and due:
                    if self._unmirrored is not None:
                        self._put_mirror(self._unmirrored)
                    elif not self._dirty:
                        self._put_mirror(dump_metadata(self._doc).encode("utf-8"))

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Defer persisting until the outermost batch ends, then persist once if dirty.

        Nested batches are fine. The deferral is store-wide: changes made by other threads while
        a batch is open are persisted with it. A mirror that failed earlier is retried at the end
        even when nothing changed.
        """
        with self._lock:
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    if self._dirty:
                        self.persist()
                    elif self._mirror_stale and self._mirror_due():
                        self._put_mirror(dump_metadata(self._doc).encode("utf-8"))

    def _mirror_due(self) -> bool:
        return time.monotonic() - self._mirrored_at >= self._mirror_every

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise MetadataError(f"{self.path}: call load() before changing or persisting metadata")

    def _changed(self) -> None:
        self._dirty = True
        if self._depth == 0:
            self.persist()

    # --- topics -----------------------------------------------------------------------------------

    def get_topic(self, topic: str) -> TopicMetadata | None:
        """The topic's record, or ``None``."""
        with self._lock:
            meta = self._doc.topic_metadata_table.get(topic)
            return None if meta is None else meta.model_copy()

    def add_topic(self, topic: str, reserve_time: int = -1) -> TopicMetadata:
        """The topic's record, created with ``topic_id = ++topic_serial_number`` if new."""
        with self._lock:
            self._check_loaded()
            meta = self._doc.topic_metadata_table.get(topic)
            if meta is None:
                self._doc.topic_serial_number += 1
                meta = TopicMetadata(
                    topic_id=self._doc.topic_serial_number,
                    topic=topic,
                    reserve_time=reserve_time,
                    update_timestamp=self._clock(),
                )
                self._doc.topic_metadata_table[topic] = meta
                self._changed()
            return meta.model_copy()

    def update_topic(self, meta: TopicMetadata) -> None:
        """Insert or replace the topic's record, stamping ``update_timestamp``."""
        with self._lock:
            self._check_loaded()
            stored = meta.model_copy(update={"update_timestamp": self._clock()})
            self._doc.topic_metadata_table[meta.topic] = stored
            # an id handed out elsewhere is never handed out again
            self._doc.topic_serial_number = max(self._doc.topic_serial_number, meta.topic_id)
            self._changed()

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's record only (its queues and segments stay, as upstream)."""
        with self._lock:
            self._check_loaded()
            if self._doc.topic_metadata_table.pop(topic, None) is not None:
                self._changed()

    def longest_reserve_time(self) -> int:
        """The greatest topic ``reserveTime`` (hours; -1 when no topic sets one), without
        copying the records."""
        with self._lock:
            table = self._doc.topic_metadata_table
            return max((m.reserve_time for m in table.values()), default=-1)

    def topics(self) -> list[TopicMetadata]:
        """Every topic record, by topic id."""
        with self._lock:
            found = [m.model_copy() for m in self._doc.topic_metadata_table.values()]
        return sorted(found, key=lambda m: m.topic_id)

    # --- queues -----------------------------------------------------------------------------------

    def get_queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        """The queue's record, or ``None``."""
        with self._lock:
            meta = self._doc.queue_metadata_table.get(topic, {}).get(queue_id)
            return None if meta is None else meta.model_copy()

    def add_queue(self, queue: MessageQueue) -> QueueMetadata:
        """The queue's record, created (offsets -1) if new."""
        with self._lock:
            self._check_loaded()
            by_id = self._doc.queue_metadata_table.setdefault(queue.topic, {})
            meta = by_id.get(queue.queue_id)
            if meta is None:
                meta = QueueMetadata(queue=queue, update_timestamp=self._clock())
                by_id[queue.queue_id] = meta
                self._changed()
            return meta.model_copy()

    def update_queue(self, meta: QueueMetadata) -> None:
        """Insert or replace the queue's record, stamping ``update_timestamp``."""
        with self._lock:
            self._check_loaded()
            stored = meta.model_copy(update={"update_timestamp": self._clock()})
            self._doc.queue_metadata_table.setdefault(meta.queue.topic, {})[meta.queue.queue_id] = (
                stored
            )
            self._changed()

    def delete_queue(self, topic: str, queue_id: int) -> None:
        """Remove the queue's record (a topic left without queues is dropped from the table)."""
        with self._lock:
            self._check_loaded()
            by_id = self._doc.queue_metadata_table.get(topic)
            if by_id is None or by_id.pop(queue_id, None) is None:
                return
            if not by_id:
                del self._doc.queue_metadata_table[topic]
            self._changed()

    def queues(self, topic: str | None = None) -> list[QueueMetadata]:
        """Every queue record (of ``topic``, or of all topics), by topic then queue id."""
        with self._lock:
            if topic is None:
                tables = list(self._doc.queue_metadata_table.items())
            else:
                tables = [(topic, self._doc.queue_metadata_table.get(topic, {}))]
            found = [
                (name, qid, meta.model_copy())
                for name, by_id in tables
                for qid, meta in by_id.items()
            ]
        return [meta for _, _, meta in sorted(found, key=lambda x: (x[0], x[1]))]

    # --- segments ---------------------------------------------------------------------------------

    def get_segment(
        self,
        type: FileSegmentType,
        path: str,
        base_offset: int,
    ) -> FileSegmentMetadata | None:
        """The segment's record, or ``None``."""
        with self._lock:
            meta = self._doc.segment_table(type).get(path, {}).get(base_offset)
            return None if meta is None else meta.model_copy()

    def update_segment(self, meta: FileSegmentMetadata) -> None:
        """Insert or replace the record (table by ``meta.type``); an existing record's
        ``create_timestamp`` is kept."""
        with self._lock:
            self._check_loaded()
            by_base = self._doc.segment_table(meta.type).setdefault(meta.path, {})
            old = by_base.get(meta.base_offset)
            stored = meta.model_copy()
            if old is not None:
                stored.create_timestamp = old.create_timestamp
            by_base[meta.base_offset] = stored
            self._changed()

    def segments(
        self,
        type: FileSegmentType,
        path: str,
    ) -> list[FileSegmentMetadata]:
        """The flat file's segment records, by base offset."""
        with self._lock:
            by_base = self._doc.segment_table(type).get(path, {})
            return [by_base[base].model_copy() for base in sorted(by_base)]

    def delete_segment(
        self,
        type: FileSegmentType,
        path: str,
        base_offset: int,
    ) -> None:
        """Remove one segment record (a path left without segments is dropped)."""
        with self._lock:
            self._check_loaded()
            table = self._doc.segment_table(type)
            by_base = table.get(path)
            if by_base is None or by_base.pop(base_offset, None) is None:
                return
            if not by_base:
                del table[path]
            self._changed()

    def delete_segments(
        self,
        type: FileSegmentType,
        path: str,
    ) -> None:
        """Remove every segment record of the flat file."""
        with self._lock:
            self._check_loaded()
            if self._doc.segment_table(type).pop(path, None) is not None:
                self._changed()

    def document(self) -> MetadataDocument:
        """A deep copy of the whole document."""
        with self._lock:
            return self._doc.model_copy(deep=True)

    # --- recovery ---------------------------------------------------------------------------------

    @classmethod
    def recover_from_mirror(
        cls,
        data_dir: Path,
        mirror: Provider,
        mirror_key: str,
        *,
        force: bool = False,
        clock: Callable[[], int] = now_ms,
    ) -> MetadataStore:
        """Rebuild the local file from the backend mirror and return the loaded store.

        A valid local file is replaced only with ``force`` (it is then kept as ``.bak``); a
        damaged one is moved aside first, never deleted.

        Raises:
            MetadataError: there is no mirror object, it does not parse, or a valid local file
                exists and ``force`` is false.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """
        source = f"{mirror.name}:{mirror_key}"
        try:
            size = mirror.size(mirror_key)
            raw = mirror.read(mirror_key, 0, size) if size else b""
        except (SegmentNotFoundError, ReadPastEndError) as e:
            raise MetadataError(
                f"no metadata mirror {mirror_key!r} in the {mirror.name} backend: check "
                "brokerClusterName/brokerName, or rebuild from the segments themselves"
            ) from e
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetadataError(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})") from e
        doc = parse_metadata(text, source=source)
        store = cls(data_dir, mirror=mirror, mirror_key=mirror_key, clock=clock)
        with store._lock:
            if store.path.exists():
                if _read_document(store.path, []) is None:
                    moved = AtomicFile.move_aside(store.path, clock())
                    log.warning("moved the damaged %s to %s before recovery", store.path, moved)
                elif not force:
                    raise MetadataError(
                        f"{store.path} exists and is valid; pass force=True (--force) to replace "
                        "it with the backend mirror (the current file is then kept as .bak)"
                    )
            store._file.write(dump_metadata(doc).encode("utf-8"))
            store.load()
        return store


def _read_document(path: Path, problems: list[str]) -> MetadataDocument | None:
    """``path`` parsed, or None with the reason appended to ``problems``."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        problems.append(f"{path} is missing")
        return None
    try:
        return parse_metadata(raw.decode("utf-8"), source=str(path))
    except UnicodeDecodeError as e:
        problems.append(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})")
    except MetadataError as e:
        problems.append(str(e))
    return None


def read_metadata(data_dir: Path) -> tuple[MetadataDocument, str]:
    """The metadata as its files hold it, read without touching them -- the main file, else its
    ``.bak`` -- and which file it came from. For processes beside a running sidecar (``fetch``,
    ``query``, ``status``, ``explain``); :meth:`MetadataStore.load` is the owner's reader.

    Raises:
        MetadataError: a file exists but neither it nor ``.bak`` parses.
    """
    directory = Path(data_dir) / "config"
    problems: list[str] = []
    for name in (FILE_NAME, FILE_NAME + ".bak"):
        path = directory / name
        if not path.exists():
            continue
        doc = _read_document(path, problems)
        if doc is not None:
            return doc, str(path)
    if problems:
        raise MetadataError("; ".join(problems))
    return MetadataDocument(), "none (nothing offloaded yet)"
