"""A small file replaced atomically with its previous version kept as ``.bak`` (STYLE rule 11).

Upstream's ``ConfigManager.persist`` renames ``X`` to ``X.bak`` and then writes a fresh ``X``, so
``X`` is briefly missing and a crash mid-write leaves it torn. Here the new bytes go to ``X.tmp``
(fsync'd), the current ``X`` becomes ``X.bak`` (a hard link, or an fsync'd copy where links are not
supported, swapped in by rename), ``X.tmp`` is renamed over ``X`` and the directory is fsync'd. A
crash at any point leaves ``X`` whole, old or new, and ``X.bak`` whole, older or old.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path

__all__ = ["AtomicFile", "fsync_dir", "write_synced"]

log = logging.getLogger(__name__)

StepHook = Callable[[str], None]
"""Called after each step of :meth:`AtomicFile.write` (tests stop there, as a crash would)."""


def fsync_dir(directory: Path) -> None:
    """Make renames and creations inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes | Iterable[bytes], *, sync: bool = True) -> None:
    """Create or truncate ``path``, write all of ``data`` (or its parts in turn) and fsync it
    (unless not ``sync``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for part in (data,) if isinstance(data, bytes) else data:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


class AtomicFile:
    """``path`` plus ``path.bak``; not thread-safe (its owner serialises writes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bak_path = path.with_name(path.name + ".bak")
        self._tmp = path.with_name(path.name + ".tmp")
        self._bak_tmp = path.with_name(path.name + ".bak.tmp")
        self.step_hook: StepHook | None = None
        # one write at a time: every write goes through the same temporary file (two threads
        # saving at once, the index progress saver and a put, had one rename the other's file)
        self._write_lock = threading.Lock()

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    def write(self, data: bytes | Iterable[bytes], *, sync: bool = True) -> None:
        """Replace the file with ``data`` (or its parts, written in turn as they come), keeping
        the current file as ``.bak``; without ``sync`` nothing is fsync'd (whole after a process
        crash, not after a power loss).

        Steps (reported to ``step_hook``): ``tmp-written``, ``bak-kept`` (only when the file
        existed), ``renamed``.

        Raises:
            OSError: a write, link or rename failed; the file is still the previous version.
        """
        with self._write_lock:
            self._write(data, sync)

    def _write(self, data: bytes | Iterable[bytes], sync: bool) -> None:
        directory = self.path.parent
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            if sync:
                fsync_dir(directory.parent)
        write_synced(self._tmp, data, sync=sync)
        self._step("tmp-written")
        if self.path.exists():
            self._keep_previous(sync)
            self._step("bak-kept")
        os.replace(self._tmp, self.path)
        self._step("renamed")
        if sync:
            fsync_dir(directory)

    def _keep_previous(self, sync: bool = True) -> None:
        # X is only ever replaced by rename, never rewritten in place, so a hard link to it keeps
        # the previous version's bytes; .bak is swapped in by rename, so it too is always whole.
        with contextlib.suppress(FileNotFoundError):
            self._bak_tmp.unlink()
        try:
            os.link(self.path, self._bak_tmp)
        except OSError:  # a filesystem without hard links
            write_synced(self._bak_tmp, self.path.read_bytes(), sync=sync)
        os.replace(self._bak_tmp, self.bak_path)

    def drop_stale_temp(self) -> None:
        """Remove temporary files an interrupted write left (never acknowledged; ``X`` is whole)."""
        for stale in (self._tmp, self._bak_tmp):
            if stale.exists():
                log.info("removing %s left by an interrupted write", stale)
                stale.unlink()

    @staticmethod
    def move_aside(path: Path, stamp: int) -> Path:
        """Rename a damaged ``path`` to ``{path}.corrupt-{stamp}`` (the next free stamp); never
        delete it."""
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        while target.exists():
            stamp += 1
            target = path.with_name(f"{path.name}.corrupt-{stamp}")
        path.rename(target)
        fsync_dir(path.parent)
        return target
