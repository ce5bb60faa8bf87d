"""The data-dir lock: one sidecar (or one exclusive command) per ``tieredDataDir``.

Its own module so that a reader beside a running sidecar (``status``) can find the lock's holder
without importing the offload machinery.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from tiered.errors import ConfigError

LOCK_NAME = "rmq-tiered.lock"


class DataDirLock:
    """An exclusive ``flock`` on ``{tieredDataDir}/rmq-tiered.lock`` holding the owner's pid."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_NAME
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock or fail at once.

        Raises:
            ConfigError: another process holds it (its pid is named).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"tieredDataDir={str(self.path.parent)!r} is in use by another rmq-tiered "
                f"(pid {holder}); stop it, or give this one its own tieredDataDir"
            ) from e
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)  # no owner any more
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
