"""How far each queue is indexed: ``{tieredDataDir}/tiered_index_file/progress.json``.

The dispatcher tells the index service of every batch it uploaded, but a batch uploaded just
before a crash may never be told. So the service keeps, per queue, the queue offset below which
every uploaded message is indexed (the *indexed offset*), and at start (and then periodically)
indexes ``[indexed offset, commit offset)`` again from the tier (:mod:`tiered.index.catch_up`).

The indexed offset only moves over contiguous ranges (:meth:`IndexProgress.advance`): a batch
that starts beyond it (an earlier batch was not indexed) leaves it where it is, for the catch-up.
It is saved only after the index files holding those items were flushed (:meth:`save` is called
by the service's checkpoint), so the saved value may lag the files -- the catch-up then puts some
items twice, which queries collapse -- but never leads them: nothing indexed is lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

PROGRESS_NAME: Final = "progress.json"
_VERSION: Final = 1


class IndexProgress:
    """The indexed offset of each ``(topic, queue id)``; thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / PROGRESS_NAME
        self._offsets: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._dirty = False

    def load(self) -> bool:
        """Read the saved offsets; False (and empty) when there is no usable file."""
        try:
            obj = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return False
        except ValueError as e:
            log.warning("%s does not parse (%s): every queue is indexed again from the tier",
                        self.path, e)  # fmt: skip
            return False
        if not isinstance(obj, dict) or obj.get("version") != _VERSION:
            log.warning("%s has an unknown version: every queue is indexed again", self.path)
            return False
        with self._lock:
            self._offsets = {(str(t), int(q)): int(o) for t, q, o in obj.get("queues", [])}
            self._dirty = False
        return True

    def get(self, topic: str, queue_id: int) -> int | None:
        """The queue's indexed offset, or None when the queue is not known."""
        with self._lock:
            return self._offsets.get((topic, queue_id))

    def items(self) -> dict[tuple[str, int], int]:
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
            return self._offsets[key]

    def advance(self, topic: str, queue_id: int, start: int, end: int) -> bool:
        """``[start, end)`` was indexed: move the queue's offset to ``end`` if the range joins
        it (or the queue is new); returns False when a gap before ``start`` remains."""
        with self._lock:
            key = (topic, queue_id)
            current = self._offsets.get(key)
            if current is not None and current < start:
                return False
            if current is None or end > current:
                self._offsets[key] = end
                self._dirty = True
            return True

    def forget(self, topic: str, queue_id: int) -> None:
        """Drop a queue (its tiered data was deleted)."""
        with self._lock:
            if self._offsets.pop((topic, queue_id), None) is not None:
                self._dirty = True

    @property
    def dirty(self) -> bool:
        """Whether offsets changed since the last save."""
        return self._dirty

    def save(self) -> None:
        """Replace the file atomically and durably (temp file, fsync, rename, directory fsync).

        Call it only after the index files holding the recorded items were flushed.
        """
        with self._lock:
            rows = [[t, q, o] for (t, q), o in sorted(self._offsets.items())]
            self._dirty = False
        data = json.dumps({"version": _VERSION, "queues": rows}, separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
