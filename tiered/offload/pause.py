"""Pausing uploads: an operator's switch kept in a small file the running dispatcher looks at.

``{tieredDataDir}/config/tieredUploadsPaused.json`` holds whether uploads are paused, since when,
by whom and why. ``rmq-tiered pause``/``resume`` and ``POST /v1/admin/pause``/``resume`` write
it (a :class:`~tiered.metadata.state_file.JsonStateFile`: atomic, fsync'd, the previous version
kept as ``.bak``; writers take an ``flock`` on its directory). The state lives in a file rather
than in the daemon, so the CLI works whether or not the HTTP port is on, and a paused sidecar
restarts paused.

The dispatcher reads the file before each round (one ``stat``; parsed again only when it
changed), so uploads stop after the running round, within one dispatch interval. A pause stops
uploads -- message batches and the key index's compacted files -- and nothing else: reads and
expiry go on. The queues keep their positions, so ``resume`` offloads the lag from where it
stopped: no gap unless the broker deleted messages meanwhile (reported as a gap, as always).

A file that does not parse (and neither does its ``.bak``) reads as *not paused*, with a warning
naming it: the sidecar offloads rather than let the broker delete messages it never uploaded.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import threading
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import Final
from typing import NamedTuple

from tiered import metrics
from tiered.metadata import now_ms
from tiered.metadata.state_file import JsonStateFile

log = logging.getLogger(__name__)

FILE_NAME: Final = "tieredUploadsPaused.json"
VERSION: Final = 1


class PauseState(NamedTuple):
    """Whether uploads are paused; ``since_ms`` is when they were paused (or, when not paused,
    resumed; 0: never paused), ``by`` who did it, ``reason`` what they said."""

    paused: bool = False
    since_ms: int = 0
    by: str = ""
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """The file's body (and the JSON of ``status`` and the admin routes)."""
        return {
            "paused": self.paused,
            "sinceMs": self.since_ms,
            "by": self.by,
            "reason": self.reason,
        }


def _parse(obj: dict[str, Any]) -> PauseState:
    paused = obj["paused"]
    if not isinstance(paused, bool):
        raise TypeError(f"paused={paused!r} is not a boolean")
    return PauseState(
        paused, int(obj["sinceMs"]), str(obj.get("by", "")), str(obj.get("reason", ""))
    )


def publish(state: PauseState) -> None:
    """Set ``uploads_paused`` and ``uploads_paused_since_timestamp_seconds`` from ``state``."""
    metrics.UPLOADS_PAUSED.set(1 if state.paused else 0)
    metrics.UPLOADS_PAUSED_SINCE.set(state.since_ms / 1000 if state.paused else 0)


class PauseFile:
    """``{data_dir}/config/tieredUploadsPaused.json``; thread-safe."""

    def __init__(self, data_dir: Path, clock: Callable[[], int] = now_ms) -> None:
        self.data_dir = Path(data_dir)
        self._file = JsonStateFile(
            self.data_dir / "config" / FILE_NAME,
            VERSION,
            _parse,
            "uploads are not paused (pause them again if they should be)",
        )
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int, int] | None = None
        self._state = PauseState()

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> PauseState:
        """The current state: a ``stat``, and a parse only when the file changed since the last
        call (a damaged file reads as not paused, warned about once per change)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            signature = None
        else:
            signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            if signature is not None and signature == self._seen:
                return self._state
            state = self._file.load(owner=False) if signature is not None else None
            if state is None and signature is not None:
                log.warning(
                    "%s is damaged (and so is its .bak): uploads are not paused; "
                    "`rmq-tiered pause` or `resume` writes it again",
                    self.path,
                )
            self._seen, self._state = signature, state or PauseState()
            return self._state

    def set(self, paused: bool, by: str, reason: str = "") -> tuple[PauseState, bool]:
        """Pause (``paused``) or resume; returns the state after and whether it changed
        (pausing paused uploads keeps their ``since``, resuming running ones changes nothing).

        Raises:
            FileNotFoundError: ``tieredDataDir`` does not exist.
            OSError: the file could not be written (it is still the previous version).
        """
        with self._locked():
            current = self._file.load() or PauseState()
            if current.paused == paused:
                return current, False
            state = PauseState(paused, self.clock(), by, reason if paused else "")
            self._file.save(state.to_json(), sync=True)
        return state, True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive ``flock`` on ``{data_dir}/config`` (made when missing, never the data dir
        itself): the CLI and the daemon's HTTP route never write the file at once."""
        if not self.data_dir.is_dir():
            raise FileNotFoundError(2, "tieredDataDir does not exist", str(self.data_dir))
        directory = self.path.parent
        directory.mkdir(exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


class PauseWatch:
    """What the dispatcher asks before each round: whether uploads are paused. Each change (and
    the state at start) is exported (:func:`publish`) and logged; ``on_resume`` is called when
    paused uploads resume."""

    def __init__(self, file: PauseFile, on_resume: Callable[[], None]) -> None:
        self.file = file
        self.on_resume = on_resume
        self._seen: PauseState | None = None

    def paused(self) -> bool:
        """Whether uploads are paused now (an unreadable file: not paused, warned about)."""
        try:
            state = self.file.read()
        except OSError as e:  # e.g. permissions: uploads go on, the operator must look
            log.warning("cannot read %s (%s): uploads are not paused", self.file.path, e)
            state = PauseState()
        seen, self._seen = self._seen, state
        if seen is not None and seen.paused == state.paused:
            return state.paused
        publish(state)
        if state.paused:
            log.warning(
                "uploads paused since %s by %s%s: nothing is offloaded until `rmq-tiered resume`"
                " (reads and expiry go on; what the broker deletes meanwhile becomes a gap)",
                utc(state.since_ms),
                state.by or "?",
                f" ({state.reason})" if state.reason else "",
            )
        elif seen is not None:
            log.warning("uploads resumed by %s: offloading the lag", state.by or "?")
            self.on_resume()
        return state.paused


def utc(ms: int) -> str:
    """``ms`` (Unix ms) as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
