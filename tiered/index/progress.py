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

import logging
import threading
from pathlib import Path
from typing import Any, Final

from tiered.metadata.state_file import JsonStateFile

log = logging.getLogger(__name__)

PROGRESS_NAME: Final = "progress.json"
_VERSION: Final = 1


class IndexProgress:
    """The indexed offset of each ``(topic, queue id)``; thread-safe."""

    def __init__(self, directory: Path) -> None:
        self._file = JsonStateFile(
            Path(directory) / PROGRESS_NAME,
            _VERSION,
            _parse,
            "every queue is indexed again from the tier (keys already indexed are put twice, "
            "which queries collapse)",
        )
        self._offsets: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._dirty = False

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self, *, owner: bool = True) -> bool:
        """Read the saved offsets; False (and empty) when there is no usable file (a damaged
        one is moved aside by the owner, see :class:`JsonStateFile`)."""
        offsets = self._file.load(owner=owner)
        if offsets is None:
            return False
        with self._lock:
            self._offsets = offsets
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
        """Replace the file atomically and durably.

        Call it only after the index files holding the recorded items were flushed.
        """
        with self._lock:
            rows = [[t, q, o] for (t, q), o in sorted(self._offsets.items())]
            self._dirty = False
        self._file.save({"queues": rows})


def _parse(document: dict[str, Any]) -> dict[tuple[str, int], int]:
    out = {}
    for topic, queue_id, offset in document["queues"]:
        if not isinstance(topic, str) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (queue_id, offset)
        ):
            raise TypeError(f"row {[topic, queue_id, offset]!r} is not [topic, queueId, offset]")
        out[(topic, queue_id)] = offset
    return out
