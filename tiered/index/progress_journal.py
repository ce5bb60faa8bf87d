"""A copy of the key index's progress that a save writes in proportion to the queues that moved.

A copy is two files: the snapshot ``{name}.json`` (every queue's row, a :class:`JsonStateFile`:
atomic, ``.bak``) and the journal ``{name}.journal`` beside it, one line per save since the
snapshot with the rows that changed (and the queues dropped). A save appends a line; it rewrites
the snapshot instead -- and empties the journal -- when the journal would grow past the
snapshot's row count (so a save costs, amortised, at most twice the rows that moved, and a load
reads at most twice the snapshot), when the copy is small (:data:`SMALL_ROWS`), and at the first
save of a process (it never appends after another process's last line, which a kill may have
torn).

Each snapshot carries a random *generation*; each journal line names the generation it extends
and its CRC-32, ``{crc:08x} {json}\\n``. A load applies, in order, the lines of the snapshot's
generation up to the first line that does not check (a torn tail). A crash between a new
snapshot and the emptied journal leaves lines of the previous generation: ignored, the new
snapshot holds them. A snapshot read from its ``.bak`` has an older generation: its journal is
ignored too, and the copy lags (never leads) what was saved -- the index's rule (:mod:`.progress`).
With ``sync``, a journal line is ``fdatasync``'d before the save returns, as the snapshot is.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import zlib
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Final
from typing import NamedTuple

from tiered.metadata.atomic import fsync_dir
from tiered.metadata.state_file import JsonStateFile

log = logging.getLogger(__name__)

Key = tuple[str, int]
SMALL_ROWS: Final = 256
"""A copy of at most this many queues is always written whole (a journal line saves nothing)."""


class Snapshot(NamedTuple):
    """A parsed snapshot: its generation, its boot id ("" when it has none) and its offsets."""

    generation: str
    boot: str
    offsets: dict[Key, int]


class _Write(NamedTuple):
    """What one save writes: a whole snapshot (``body``) or one journal line (``line``)."""

    rows: int
    body: dict[str, Any] | None = None  # the snapshot's fields but its generation
    line: bytes = b""


class JournaledCopy:
    """One copy of the offsets: snapshot plus journal (see the module docstring).

    Saves are serialised (:attr:`lock`): :meth:`prepare` decides what to write from the offsets
    (the caller holds its own lock over them), :meth:`write` writes it.
    """

    def __init__(
        self,
        path: Path,
        version: int,
        parse: Callable[[dict[str, Any]], Snapshot],
        loses: str,
        *,
        sync: bool,
    ) -> None:
        self.snapshot = JsonStateFile(path, version, parse, loses)
        self.journal = path.with_suffix(".journal")
        self.sync = sync
        self.lock = threading.Lock()
        self._generation: str | None = None  # None: the next save writes a snapshot
        self._journal_rows = 0

    @property
    def path(self) -> Path:
        return self.snapshot.path

    def load(self, *, owner: bool = True) -> Snapshot | None:
        """The snapshot with its journal applied; None when there is no usable snapshot.

        Raises:
            OSError: a file exists but cannot be read.
        """
        snap = self.snapshot.load(owner=owner)
        if snap is None:
            return None
        try:
            data = self.journal.read_bytes()
        except FileNotFoundError:
            return snap
        for line in data.split(b"\n"):
            record = _decode(line)
            if record is None:
                break  # a torn tail (or nothing more)
            if record.get("g") != snap.generation:
                continue  # the journal of an earlier snapshot: the snapshot holds it
            for topic, queue_id, offset in record["q"]:
                snap.offsets[(topic, queue_id)] = offset
            for topic, queue_id in record["f"]:
                snap.offsets.pop((topic, queue_id), None)
        return snap

    def prepare(
        self, offsets: Mapping[Key, int], changed: Iterable[Key], head: dict[str, Any]
    ) -> _Write | None:
        """What to write for ``changed`` keys (those absent from ``offsets`` were dropped);
        ``head``: the snapshot's other fields. None when there is nothing to write. Call with
        :attr:`lock` held, then :meth:`write` the result under it."""
        keys = list(changed)
        if (
            self._generation is None
            or len(offsets) <= SMALL_ROWS
            or self._journal_rows + len(keys) >= len(offsets)
        ):
            rows = [[t, q, o] for (t, q), o in offsets.items()]
            return _Write(len(rows), body={**head, "queues": rows})
        if not keys:
            return None
        moved = [[t, q, offsets[t, q]] for t, q in keys if (t, q) in offsets]
        gone = [[t, q] for t, q in keys if (t, q) not in offsets]
        return _Write(len(keys), line=_encode({"g": self._generation, "q": moved, "f": gone}))

    def write(self, w: _Write) -> None:
        """Write what :meth:`prepare` decided (with :attr:`lock` held).

        Raises:
            OSError: nothing or only part was written; the next save writes a snapshot.
        """
        if w.body is None:
            assert self._generation is not None
            try:
                with self.journal.open("ab") as f:
                    f.write(w.line)
                    if self.sync:
                        os.fdatasync(f.fileno())
            except OSError:
                self._generation = None
                raise
            self._journal_rows += w.rows
            return
        self._generation = None
        generation = secrets.token_hex(8)
        self.snapshot.save({**w.body, "generation": generation}, sync=self.sync)
        created = not self.journal.exists()
        with self.journal.open("wb"):  # the old generation's lines are void: dropped
            pass
        if created and self.sync:
            fsync_dir(self.journal.parent)
        self._generation, self._journal_rows = generation, 0


def _encode(record: dict[str, Any]) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _decode(line: bytes) -> dict[str, Any] | None:
    """A journal line's record; None when it does not check."""
    crc, _, body = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
            return None
        record = json.loads(body)
        if not isinstance(record, dict):
            return None
        for topic, queue_id, offset in record["q"]:
            _check(topic, queue_id, offset)
        for topic, queue_id in record["f"]:
            _check(topic, queue_id, 0)
    except (ValueError, TypeError, KeyError):
        return None
    return record


def _check(topic: object, queue_id: object, offset: object) -> None:
    if not isinstance(topic, str) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (queue_id, offset)
    ):
        raise TypeError(f"row {[topic, queue_id, offset]!r} is not [topic, queueId, offset]")
