"""``MetadataStore``: ``{tieredDataDir}/config/tieredStoreMetadata.json``, atomic, mirrored.

The file is upstream's (spec §7; :mod:`tiered.metadata.models` parses and writes it). While it is
smaller than ``journal_min_bytes`` (``tieredMetadataJournalMinBytes``), every persist replaces it
atomically with the previous version kept as ``.bak`` (:mod:`tiered.metadata.atomic`). From that
size on, a persist appends only what changed to the journal beside it (:mod:`.journal`), and the
file (the *snapshot*, written in parts) is rewritten when the journal has grown as large as it,
when a persist changes most of its records, and at :meth:`MetadataStore.compact` (the sidecar's
stop): a round that moved 100 of 16,000 queues writes 100 queues' records. Readers
(:func:`read_metadata`, :meth:`load`) replay the journal onto the snapshot it names.

The backend mirror (:func:`mirror_key_for`, spaced out during a dispatch pass:
:meth:`MetadataStore.mirror_spaced`) gets the snapshot when it is written and the journal's frames
as chunk objects beside it in between; :meth:`MetadataStore.recover_from_mirror` rebuilds a lost
local copy from both (:func:`read_mirror`).

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
from tiered.errors import SegmentNotFoundError
from tiered.providers.base import Provider
from tiered.providers.layout import check_key

from .atomic import AtomicFile
from .journal import Changes
from .journal import Journal
from .journal import JournalRead
from .journal import SnapshotDigest
from .journal import chunk_key
from .journal import chunk_prefix
from .journal import delta_parts
from .journal import encode_frame
from .journal import file_snapshot_id
from .journal import snapshot_id
from .metadata_read import FILE_NAME
from .metadata_read import apply_frames
from .metadata_read import mirror_key_for
from .metadata_read import parse_raw
from .metadata_read import read_document
from .metadata_read import read_metadata
from .metadata_read import read_mirror
from .metadata_read import read_raw
from .models import FileSegmentMetadata
from .models import FileSegmentType
from .models import MessageQueue
from .models import MetadataDocument
from .models import QueueMetadata
from .models import TopicMetadata
from .models import dump_metadata_parts
from .orphans import OrphanLog

__all__ = [
    "FILE_NAME",
    "HOUR_MS",
    "JOURNAL_MIN_BYTES",
    "LoadReport",
    "MetadataStore",
    "mirror_key_for",
    "now_ms",
    "read_metadata",
    "read_mirror",
]

log = logging.getLogger(__name__)


HOUR_MS = 3_600_000
"""One hour in milliseconds: reserve times are hours, timestamps epoch milliseconds."""
JOURNAL_MIN_BYTES = 262_144
"""``tieredMetadataJournalMinBytes``' default: a snapshot from this size on is journaled."""
COMPACT_MIN_BYTES = 1 << 20
"""A journal is compacted once it is as large as its snapshot, and at least this large."""
ANCHOR = "snapshot"
"""The empty chunk object a mirror put of a snapshot leaves under its id (readers list it)."""


def now_ms() -> int:
    """Epoch milliseconds, like Java's ``System.currentTimeMillis()``."""
    return time.time_ns() // 1_000_000


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
        journal_min_bytes: int = JOURNAL_MIN_BYTES,
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
        self.journal = Journal(self.path.parent)
        self.journal_min_bytes = journal_min_bytes
        """A snapshot from this size on is journaled (-1: never, 0: always)."""
        self._changes = Changes()
        self._snapshot_bytes = 0
        self._mirror_snapshot: str | None = None
        """The id of the newest snapshot written (the local file), until a mirror put of it."""
        self._mirror_frames: list[bytes] = []
        """Journal frames after the mirrored snapshot not yet put (as one chunk)."""
        self._mirror_first = 0
        """The sequence number of ``_mirror_frames[0]``."""
        self._mirror_id = ""
        """The id of the snapshot the mirror's chunks extend."""
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
        every change (never loaded, it never persists, moves or mirrors anything). Raises
        MetadataError when a file exists but neither it nor ``.bak`` parses."""
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
            self.journal.drop_stale_temp()
            problems: list[str] = []
            main_damaged = False
            main_raw = read_raw(self.path)
            bak_raw = read_raw(self.bak_path)
            doc = parse_raw(self.path, main_raw, problems)
            used: Literal["main", "bak", "empty"] = "main"
            if doc is None:
                main_damaged = main_raw is not None
                doc = parse_raw(self.bak_path, bak_raw, problems)
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
            read = self.journal.read()
            base = main_raw if used == "main" else bak_raw if used == "bak" else None
            kept, onto_bak = self._replay(doc, read, base, main_raw, bak_raw, problems)
            moved: list[Path] = []
            if main_damaged:
                moved.append(AtomicFile.move_aside(self.path, self._clock()))
            if problems and used == "bak":
                log.warning("%s; loaded %s%s", "; ".join(problems), self.bak_path,
                            f", damaged file moved to {moved[0]}" if moved else "")  # fmt: skip
            self._doc, self._loaded, self._dirty = doc, True, False
            self._changes.clear()
            self._snapshot_bytes = len(base) if base is not None else 0
            if kept is not None and not onto_bak:
                self.journal.adopt(kept)  # appends go on where the last run left off
                if kept.frames or not self._mirror_holds(base or b""):
                    self._mirror_from(snapshot_id(base or b""), kept.frames)
            elif onto_bak:  # the journal extends the damaged file: a snapshot of what was read
                self._write_snapshot()
        self.orphans.keys()  # read (or set aside, if damaged) the orphan log at start
        return LoadReport(used=used, moved_aside=moved, problems=problems)

    def _replay(
        self,
        doc: MetadataDocument,
        read: JournalRead,
        base: bytes | None,
        main_raw: bytes | None,
        bak_raw: bytes | None,
        problems: list[str],
    ) -> tuple[JournalRead | None, bool]:
        """Replay the journal onto ``doc`` when it extends ``base`` (the file loaded); returns
        the journal as far as it was replayed (None: it was not used) and whether it was
        replayed onto ``.bak`` because the main file it extends is damaged. A journal extending
        ``.bak`` was left by a compaction that wrote the file and stopped: the file holds all of
        it. Any other journal extends a file no longer here and is set aside."""
        if read.snapshot is None:
            if read.file_bytes:
                moved = self.journal.set_aside(self._clock())
                log.warning("%s has no whole header; set aside as %s", self.journal.path, moved)
            return None, False
        exact = base is not None and read.snapshot == snapshot_id(base)
        onto_bak = base is not None and base is bak_raw
        if exact or onto_bak:
            frames = apply_frames(doc, read.frames, str(self.journal.path))
            if not exact:
                problems.append(
                    f"replayed {len(frames)} journal changes onto {self.bak_path} (the file they "
                    "extend is damaged): changes recorded in it before its last compaction may "
                    "be missing; check with `rmq-tiered scrub`"
                )
            unused = sum(8 + len(f) for f in read.frames[len(frames) :])
            kept = JournalRead(read.snapshot, frames, read.good_bytes - unused, read.file_bytes)
            if kept.torn:
                log.warning("%s: replayed %d changes; the rest (%d bytes) was cut short by a crash "
                            "or is damaged and is dropped", self.journal.path, len(frames),
                            kept.file_bytes - kept.good_bytes)  # fmt: skip
            return kept, onto_bak
        bak_id = snapshot_id(bak_raw) if bak_raw is not None else None
        if read.snapshot == bak_id and base is main_raw:
            log.info("%s: the last compaction wrote the snapshot and stopped; dropping the "
                     "journal it had merged", self.journal.path)  # fmt: skip
            self.journal.remove()
            return None, False
        moved = self.journal.set_aside(self._clock())
        log.warning("%s extends a tieredStoreMetadata.json that is no longer here (replaced by "
                    "`recover`, by hand or by the Java plugin): set aside as %s, not replayed",
                    self.journal.path, moved)  # fmt: skip
        return None, False

    def persist(self) -> None:
        """Record the changes: append them to the journal, or (no journal, or one due for
        compaction) write the file atomically keeping the previous one as ``.bak``; then mirror.

        Raises:
            MetadataError: the store was never loaded.
            OSError: the local write failed (what was recorded before is still in place; a
                journal whose append failed is closed, and the next persist writes the file).
            ProviderError: the mirror put failed; the local file *was* persisted. The failure
                is logged and counted, and the next persist (or batch end) mirrors again.
        """
        with self._lock:
            self._check_loaded()
            if (
                self.journal.open
                and self.journal.size < max(self._snapshot_bytes, COMPACT_MIN_BYTES)
                and not self._changes.cover_most_of(self._doc)
            ):
                self._append_changes()
            else:
                self._write_snapshot()
            if self._mirror_due():
                self._put_mirror()

    def compact(self) -> bool:
        """Write the file whole when the journal holds changes (so it alone says everything:
        for the Java plugin, a copy, or a faster start); returns whether it wrote.

        Raises:
            MetadataError: the store was never loaded.
            OSError: the write failed (the file and its journal are still in place).
            ProviderError: the mirror put that follows failed (retried at the next persist).
        """
        with self._lock:
            self._check_loaded()
            if not self.journal.open or (not self.journal.frames and not self._changes):
                return False
            self._write_snapshot()
            self._put_mirror()
        return True

    def _append_changes(self) -> None:
        frame = encode_frame(*delta_parts(self._doc, self._changes))
        try:
            self.journal.append(frame)
        except OSError:
            self.journal.close()  # maybe torn: the next persist writes the whole file
            self._failed()
            raise
        self._changes.clear()
        self._persisted(len(frame))
        metrics.METADATA_WRITTEN.labels("journal").inc(len(frame))
        if self.mirror is not None:
            self._mirror_frames.append(frame)
            self._mirror_stale = True

    def _write_snapshot(self) -> None:
        digest = SnapshotDigest()  # written in parts: never the whole text in memory
        try:
            self._file.write(digest.through(dump_metadata_parts(self._doc)))
        except OSError:
            self._failed()
            raise
        self._changes.clear()
        self._snapshot_bytes = size = digest.length
        self._persisted(size)
        metrics.METADATA_WRITTEN.labels("snapshot").inc(size)
        try:
            if 0 <= self.journal_min_bytes <= size:
                self.journal.start(digest.id)
            else:
                self.journal.remove()
        except OSError as e:  # the file holds everything: the next persist writes it again
            self.journal.close()
            log.warning("cannot start the metadata journal %s (%s): the next persist rewrites "
                        "the whole file", self.journal.path, e)  # fmt: skip
        self._mirror_from(digest.id, [])

    def _failed(self) -> None:
        self.persist_failures += 1
        metrics.METADATA_PERSIST.labels("failed").inc()

    def _persisted(self, nbytes: int) -> None:
        self._dirty = False
        self.persist_count += 1
        metrics.METADATA_PERSIST.labels("ok").inc()
        metrics.METADATA_LAST_PERSIST.set_to_current_time()
        self.last_persist_bytes = nbytes

    def _mirror_from(self, snapshot: str, frames: list[bytes]) -> None:
        """The mirror is to get snapshot ``snapshot`` (the local file), then ``frames``."""
        if self.mirror is None:
            return
        self._mirror_snapshot = snapshot
        self._mirror_frames = list(frames)
        self._mirror_first = 0
        self._mirror_stale = True

    def _put_mirror(self) -> None:
        """Put what the mirror lacks: the newest snapshot (then its anchor, then the chunks of
        older snapshots are deleted), and the journal frames since as one chunk."""
        if self.mirror is None or self.mirror_key is None or not self._mirror_stale:
            return
        self._mirrored_at = time.monotonic()
        try:
            if self._mirror_snapshot is not None:
                self._put_snapshot()
                if self.journal.open:
                    self._put_anchor()
            if self._mirror_frames:
                key = chunk_key(self.mirror_key, self._mirror_id, self._mirror_first)
                self.mirror.put(key, b"".join(self._mirror_frames), overwrite=True)
                self._mirror_first += len(self._mirror_frames)
                self._mirror_frames = []
        except ProviderError as e:
            self.mirror_failures += 1
            metrics.METADATA_MIRROR.labels("failed").inc()
            log.warning("metadata persisted locally but its mirror %r on %s failed (%s); retried "
                        "at the next persist", self.mirror_key, self.mirror.name, e,
                        extra={"objectKey": self.mirror_key})  # fmt: skip
            raise
        self.mirror_count += 1
        metrics.METADATA_MIRROR.labels("ok").inc()
        metrics.METADATA_LAST_MIRROR.set_to_current_time()
        self._mirror_stale = False

    def _put_snapshot(self) -> None:
        """Put the local file, read in pieces, as the mirror's snapshot; a file that is not the
        snapshot last written (changed by hand) is written again from the document first."""
        assert self.mirror is not None and self.mirror_key is not None
        for _ in range(2):
            sid = self._mirror_snapshot
            assert sid is not None
            with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as file:
                if file_snapshot_id(file) == sid and file.seek(0) == 0:
                    self.mirror.put(self.mirror_key, file, overwrite=True)
                    self._mirror_id, self._mirror_snapshot = sid, None
                    return
            log.warning("%s is not the snapshot %s the sidecar wrote last (changed or removed by "
                        "hand?): writing it again from memory", self.path, sid)  # fmt: skip
            self._write_snapshot()
        raise MetadataError(f"{self.path} changes as it is written: is another process writing it?")

    def _mirror_holds(self, snapshot: bytes) -> bool:
        """Whether the mirror holds ``snapshot`` whole (its anchor exists), so a start after a
        clean stop neither puts it again nor keeps it for a put; sets the mirror's id."""
        if self.mirror is None or self.mirror_key is None or not snapshot:
            return False
        sid = snapshot_id(snapshot)
        try:
            held = self.mirror.exists(f"{chunk_prefix(self.mirror_key)}{sid}/{ANCHOR}")
        except ProviderError:
            return False
        if held:
            self._mirror_id, self._mirror_first = sid, 0
        return held

    def _put_anchor(self) -> None:
        """Mark the new snapshot in the chunk listing and delete older snapshots' chunks (a
        delete that fails is retried after the next snapshot)."""
        assert self.mirror is not None and self.mirror_key is not None
        prefix = chunk_prefix(self.mirror_key)
        self.mirror.put(f"{prefix}{self._mirror_id}/{ANCHOR}", b"", overwrite=True)
        for key in list(self.mirror.list(prefix)):
            if not key.startswith(f"{prefix}{self._mirror_id}/"):
                try:
                    self.mirror.delete(key)
                except (ProviderError, SegmentNotFoundError) as e:
                    log.info("cannot delete the old metadata chunk %r yet: %s", key, e)

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
                    self._put_mirror()

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
                        self._put_mirror()

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

    def get_topic(self, topic: str, *, copy: bool = True) -> TopicMetadata | None:
        """The topic's record, or ``None``; ``copy=False``: the store's own, only to read."""
        with self._lock:
            meta = self._doc.topic_metadata_table.get(topic)
            return meta.model_copy() if copy and meta is not None else meta

    def add_topic(self, topic: str, reserve_time: int = -1, *, copy: bool = True) -> TopicMetadata:
        """The topic's record (as get_topic's ``copy``), with ``topic_id = ++serial`` if new."""
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
                self._changes.topics.add(topic)
                self._changed()
            return meta.model_copy() if copy else meta

    def update_topic(self, meta: TopicMetadata) -> None:
        """Insert or replace the topic's record, stamping ``update_timestamp``."""
        with self._lock:
            self._check_loaded()
            stored = meta.model_copy(update={"update_timestamp": self._clock()})
            self._doc.topic_metadata_table[meta.topic] = stored
            # an id handed out elsewhere is never handed out again
            self._doc.topic_serial_number = max(self._doc.topic_serial_number, meta.topic_id)
            self._changes.topics.add(meta.topic)
            self._changed()

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's record only (its queues and segments stay, as upstream)."""
        with self._lock:
            self._check_loaded()
            if self._doc.topic_metadata_table.pop(topic, None) is not None:
                self._changes.topics.add(topic)
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

    def add_queue(self, queue: MessageQueue, *, copy: bool = True) -> QueueMetadata:
        """The queue's record (as get_topic's ``copy``), created (offsets -1) if new."""
        with self._lock:
            self._check_loaded()
            by_id = self._doc.queue_metadata_table.setdefault(queue.topic, {})
            meta = by_id.get(queue.queue_id)
            if meta is None:
                meta = QueueMetadata(queue=queue, update_timestamp=self._clock())
                by_id[queue.queue_id] = meta
                self._changes.queues.add((queue.topic, queue.queue_id))
                self._changed()
            return meta.model_copy() if copy else meta

    def update_queue(self, meta: QueueMetadata) -> None:
        """Insert or replace the queue's record, stamping ``update_timestamp``."""
        with self._lock:
            self._check_loaded()
            stored = meta.model_copy(update={"update_timestamp": self._clock()})
            self._doc.queue_metadata_table.setdefault(meta.queue.topic, {})[meta.queue.queue_id] = (
                stored
            )
            self._changes.queues.add((meta.queue.topic, meta.queue.queue_id))
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
            self._changes.queues.add((topic, queue_id))
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
        ``create_timestamp`` is kept. The caller does not change ``meta`` afterwards (a new
        record is kept as it is)."""
        self.update_segments([meta])

    def update_segments(self, records: list[FileSegmentMetadata]) -> None:
        """:meth:`update_segment` of every record, under one lock and with at most one persist
        (a dispatch round hands over a record or two per queue it moved). An existing record
        takes the given values in place: a round's thousands of fresh records then die young,
        and the collector's oldest generation does not grow by them each round (a full
        collection of every queue's records every round or two)."""
        if not records:
            return
        with self._lock:
            self._check_loaded()
            changes = self._changes.segments
            for given in records:
                by_base = self._doc.segment_table(given.type).setdefault(given.path, {})
                old = by_base.get(given.base_offset)
                if old is None:
                    by_base[given.base_offset] = given
                else:  # (path, type and base offset are the keys; create_timestamp is kept)
                    old.status, old.size = given.status, given.size
                    old.begin_timestamp, old.end_timestamp = (
                        given.begin_timestamp,
                        given.end_timestamp,
                    )
                    old.seal_timestamp = given.seal_timestamp
                changes.add((given.type, given.path, given.base_offset))
            self._changed()

    def segments(
        self,
        type: FileSegmentType,
        path: str,
        *,
        copy: bool = True,
    ) -> list[FileSegmentMetadata]:
        """The flat file's segment records, by base offset; with ``copy=False`` the store's own
        records, for a caller that only reads them (a restart reads every queue's)."""
        with self._lock:
            by_base = self._doc.segment_table(type).get(path, {})
            if not copy:
                return [by_base[base] for base in sorted(by_base)]
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
            self._changes.segments.add((type, path, base_offset))
            self._changed()

    def delete_segments(
        self,
        type: FileSegmentType,
        path: str,
    ) -> None:
        """Remove every segment record of the flat file."""
        with self._lock:
            self._check_loaded()
            by_base = self._doc.segment_table(type).pop(path, None)
            if by_base is not None:
                self._changes.segments.update((type, path, base) for base in by_base)
                self._changed()

    @contextlib.contextmanager
    def reading(self) -> Iterator[MetadataDocument]:
        """The live document, unchanged while held (the store's lock): for a caller that only
        reads it, briefly (the running sidecar's ``/v1/status``)."""
        with self._lock:
            yield self._doc

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
        journal_min_bytes: int = JOURNAL_MIN_BYTES,
    ) -> MetadataStore:
        """Rebuild the local file from the backend mirror (its snapshot and the journal chunks
        extending it, :func:`read_mirror`) and return the loaded store.

        A valid local file is replaced only with ``force`` (it is then kept as ``.bak``); a
        damaged one is moved aside first, never deleted; a local journal is set aside.

        Raises:
            MetadataError: there is no mirror object, it does not parse, or a valid local file
                exists and ``force`` is false.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """
        doc, _, _ = read_mirror(mirror, mirror_key)
        store = cls(
            data_dir,
            mirror=mirror,
            mirror_key=mirror_key,
            clock=clock,
            journal_min_bytes=journal_min_bytes,
        )
        with store._lock:
            if store.path.exists():
                if read_document(store.path, []) is None:
                    moved = AtomicFile.move_aside(store.path, clock())
                    log.warning("moved the damaged %s to %s before recovery", store.path, moved)
                elif not force:
                    raise MetadataError(
                        f"{store.path} exists and is valid; pass force=True (--force) to replace "
                        "it with the backend mirror (the current file is then kept as .bak)"
                    )
            if store.journal.path.exists():
                moved = store.journal.set_aside(clock())
                log.warning("set the local journal aside as %s before recovery", moved)
            store._file.write(dump_metadata_parts(doc))
            store.load()
        return store
