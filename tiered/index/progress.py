"""How far each queue is indexed: ``{tieredDataDir}/tiered_index_file/progress.json``.

A batch uploaded just before a crash may never be told to the index service, so it keeps, per
queue, the queue offset below which every uploaded message is indexed (the *indexed offset*), and
indexes ``[indexed offset, commit offset)`` again from the tier at start and then periodically
(:mod:`tiered.index.catch_up`). The saved value may lag the index files -- the catch-up then puts
some items twice, which queries collapse -- but never leads them: nothing indexed is lost. A
durable copy (:meth:`IndexProgress.save`) and a fast one (:meth:`IndexProgress.save_fast`) keep
the lag small. Each copy is a snapshot plus a journal of the rows that changed
(:mod:`.progress_journal`): a save writes in proportion to the queues that moved since the last
one, not to every queue.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any
from typing import Final

from tiered.index.progress_journal import JournaledCopy
from tiered.index.progress_journal import Key
from tiered.index.progress_journal import Snapshot
from tiered.metadata import mirror_key_for

log = logging.getLogger(__name__)

PROGRESS_NAME: Final = "progress.json"
FAST_NAME: Final = "progress.fast.json"
FAST_SAVE_INTERVAL_S: Final = 0.02
"""The fast copy is written at most this often -- or, when a write takes longer (a snapshot of
many queues), at most 10 % of the time: the interval grows to 10 x the last write's duration."""
_VERSION: Final = 1
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
Rows = list[list[Any]]
"""``[[topic, queueId, indexed offset], ...]``: the files' and the backend copy's body."""


BACKEND_NAME: Final = "tieredIndexProgress.json"


def backend_key(cluster: str, broker: str) -> str:
    """The backend copy's key: beside the metadata mirror,
    ``{md5(cluster)[:8]}_{cluster}/{broker}/config/tieredIndexProgress.json``."""
    return f"{mirror_key_for(cluster, broker).rpartition('/')[0]}/{BACKEND_NAME}"


def encode_rows(rows: Rows) -> bytes:
    """The backend copy's bytes."""
    return json.dumps({"version": _VERSION, "queues": rows}, separators=(",", ":")).encode()


def decode_rows(data: bytes) -> Rows:
    """The rows of a backend copy.

    Raises:
        ValueError: not a progress document of this version (TypeError: wrong row shapes).
    """
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("version") != _VERSION:
        raise ValueError("not an index progress document of version 1")
    _parse(document)
    return list(document["queues"])


def boot_id() -> str:
    """The kernel's boot id ("" where there is none: the fast copy is then never trusted)."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return ""


class IndexProgress:
    """The indexed offset of each ``(topic, queue id)``; thread-safe."""

    def __init__(self, directory: Path) -> None:
        self._file = JournaledCopy(
            Path(directory) / PROGRESS_NAME,
            _VERSION,
            _parse_durable,
            "every queue is indexed again from the tier (keys already indexed are put twice, "
            "which queries collapse)",
            sync=True,
        )
        self._fast = JournaledCopy(
            Path(directory) / FAST_NAME,
            _VERSION,
            _parse_fast,
            "the durable progress.json is used (more keys are indexed twice)",
            sync=False,
        )
        self._offsets: dict[Key, int] = {}
        self._lock = threading.Lock()
        self._dirty = False
        self._fast_dirty = False
        self._changed: set[Key] = set()  # since the durable copy's last save
        self._fast_changed: set[Key] = set()  # since the fast copy's last save
        self._fast_saved = 0.0
        self._fast_interval = FAST_SAVE_INTERVAL_S
        self._boot = boot_id()
        self.moved = threading.Event()
        """Set when the offsets move and the fast copy does not hold them yet (a saver thread
        waits for it instead of waking every interval); cleared by the write that saves them."""

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self, *, owner: bool = True) -> bool:
        """Read the saved offsets -- the fast copy when it was written in this boot, else the
        durable one; False (and empty) when there is no usable file (a damaged one is moved
        aside by the owner, see :class:`~tiered.metadata.state_file.JsonStateFile`)."""
        loaded = self._file.load(owner=owner)
        durable = loaded.offsets if loaded is not None else None
        fast = self._fast.load(owner=owner)
        offsets = durable
        if fast is not None and self._boot and fast.boot == self._boot:
            offsets = fast.offsets  # written after the durable copy, in this boot: never behind
        if offsets is None:
            return False
        with self._lock:
            self._offsets = offsets
            # the next checkpoint makes durable what the durable copy does not hold
            self._changed = _differ(offsets, durable or {})
            self._dirty = bool(self._changed)
        return True

    def restore(self, rows: Rows) -> None:
        """Take ``rows`` (e.g. the backend copy after a lost volume) as the offsets.

        Raises:
            TypeError: a row is not ``[topic, queueId, offset]``.
        """
        offsets = _parse({"queues": rows})
        with self._lock:
            changed = _differ(offsets, self._offsets)
            self._offsets = offsets
            self._mark_moved(changed)

    def _mark_moved(self, keys: set[Key]) -> None:
        """``keys``' offsets changed (the caller holds the lock): both copies are behind."""
        self._changed |= keys
        self._fast_changed |= keys
        self._dirty = self._fast_dirty = True
        self.moved.set()

    def rows(self) -> Rows:
        """The offsets as ``[[topic, queueId, offset], ...]`` (also kept beside each sealed file
        and then in the backend, so a lost data volume restarts from the uploaded files'
        coverage: :mod:`tiered.index.service`)."""
        with self._lock:
            return [[t, q, o] for (t, q), o in sorted(self._offsets.items())]

    def get(self, topic: str, queue_id: int) -> int | None:
        """The queue's indexed offset, or None when the queue is not known."""
        with self._lock:
            return self._offsets.get((topic, queue_id))

    def items(self) -> dict[Key, int]:
        """A copy of every queue's indexed offset."""
        with self._lock:
            return dict(self._offsets)

    def set_default(self, topic: str, queue_id: int, offset: int) -> int:
        """The queue's indexed offset, set to ``offset`` first if the queue is not known."""
        with self._lock:
            key = (topic, queue_id)
            if key not in self._offsets:
                self._offsets[key] = offset
                self._dirty = True
                self._changed.add(key)
                self._fast_changed.add(key)  # goes with the fast copy's next write
            return self._offsets[key]

    def advance(self, topic: str, queue_id: int, start: int, end: int) -> bool:
        """``[start, end)`` was indexed: move the queue's offset to ``end`` if the range joins
        it (or the queue is new); returns False when a gap before ``start`` remains (an earlier
        batch was not indexed: the catch-up indexes it)."""
        return not self.advance_many([(topic, queue_id, start, end)])

    def advance_many(self, ranges: list[tuple[str, int, int, int]]) -> list[tuple[str, int, int]]:
        """:meth:`advance` for each ``(topic, queue id, start, end)`` in order, under one lock;
        returns ``(topic, queue id, start)`` of the ranges a gap kept from joining."""
        gaps: list[tuple[str, int, int]] = []
        moved: set[Key] = set()
        with self._lock:
            offsets = self._offsets
            for topic, queue_id, start, end in ranges:
                key = (topic, queue_id)
                current = offsets.get(key)
                if current is not None and current < start:
                    gaps.append((topic, queue_id, start))
                elif current is None or end > current:
                    offsets[key] = end
                    moved.add(key)
            if moved:
                self._mark_moved(moved)
        return gaps

    def forget(self, topic: str, queue_id: int) -> None:
        """Drop a queue (its tiered data was deleted)."""
        with self._lock:
            key = (topic, queue_id)
            if self._offsets.pop(key, None) is not None:
                self._mark_moved({key})

    @property
    def dirty(self) -> bool:
        """Whether offsets changed since the last save."""
        return self._dirty

    def save(self) -> None:
        """Save the durable copy (``progress.json`` and its journal) atomically and durably:
        the copy that holds after a power loss.

        Call it only after the index files holding the recorded items were flushed (the
        service's checkpoint).

        Raises:
            OSError: not saved; the offsets stay to be saved.
        """
        with self._file.lock:
            with self._lock:
                changed, self._changed, self._dirty = self._changed, set(), False
                w = self._file.prepare(self._offsets, changed, {})
            try:
                if w is not None:
                    self._file.write(w)
            except BaseException:
                with self._lock:
                    self._changed |= changed
                    self._dirty = True
                raise

    def save_fast(self, *, force: bool = False) -> bool:
        """Save the fast copy (``progress.fast.json`` and its journal, no fsync) if the offsets
        moved and the interval passed since the last write (see :data:`FAST_SAVE_INTERVAL_S`;
        ``force``: whatever the time); returns whether it wrote. Call it only after the items
        recorded were put into the (mapped) files.

        The copy is stamped with the kernel's boot id. Items are written into the index files
        before the progress moves, and a killed process's writes stay in the page cache, so
        within the same boot the fast copy never leads the files; after a reboot it is ignored.
        A ``kill -9`` then re-indexes at most the last fraction of a second instead of
        everything since the last checkpoint.
        """
        now = time.monotonic()
        if not force and now - self._fast_saved < self._fast_interval and self._fast_dirty:
            return False  # the common case of a put: no lock taken
        with self._fast.lock:
            with self._lock:
                if not self._boot or not self._fast_dirty:
                    self.moved.clear()  # nothing to write (or never written: no boot id)
                    return False
                if not force and now - self._fast_saved < self._fast_interval:
                    return False
                changed, self._fast_changed = self._fast_changed, set()
                self._fast_dirty, self._fast_saved = False, now
                self.moved.clear()
                w = self._fast.prepare(self._offsets, changed, {"bootId": self._boot})
            try:
                if w is not None:
                    self._fast.write(w)
            except BaseException:
                with self._lock:
                    self._fast_changed |= changed
                    self._fast_dirty = True
                    self.moved.set()
                raise
        took = time.monotonic() - now
        self._fast_interval = max(FAST_SAVE_INTERVAL_S, 10 * took)
        return True

    @property
    def fast_interval_s(self) -> float:
        """The current interval between fast writes."""
        return self._fast_interval


def _differ(a: dict[Key, int], b: dict[Key, int]) -> set[Key]:
    """The keys whose offsets differ between ``a`` and ``b`` (present in one only included)."""
    return {k for k, v in a.items() if b.get(k) != v} | (b.keys() - a.keys())


def _parse(document: dict[str, Any]) -> dict[Key, int]:
    out = {}
    for topic, queue_id, offset in document["queues"]:
        if not isinstance(topic, str) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (queue_id, offset)
        ):
            raise TypeError(f"row {[topic, queue_id, offset]!r} is not [topic, queueId, offset]")
        out[(topic, queue_id)] = offset
    return out


def _generation(document: dict[str, Any]) -> str:
    generation = document.get("generation", "")  # none before the journal: matches no line
    if not isinstance(generation, str):
        raise TypeError("generation is not a string")
    return generation


def _parse_durable(document: dict[str, Any]) -> Snapshot:
    return Snapshot(_generation(document), "", _parse(document))


def _parse_fast(document: dict[str, Any]) -> Snapshot:
    boot = document["bootId"]
    if not isinstance(boot, str):
        raise TypeError("bootId is not a string")
    return Snapshot(_generation(document), boot, _parse(document))
