"""Objects whose record is gone but whose deletion has not succeeded yet.

Expiry removes a segment's record (persisted) before it deletes the object, so the metadata never
points at a deleted object. If the delete then fails -- or the process dies between the two -- the
object would be left in the backend for good. So the key is written to this log *before* the
record is removed, and taken out once the object is gone; every expiry run retries what is left
(:meth:`OrphanLog.sweep`). A key whose record still exists (the process died after logging it but
before removing the record) is dropped from the log, never deleted.

The log is ``{tieredDataDir}/config/tieredOrphanObjects.json``: a JSON object
``{"version": 1, "keys": [...]}``, a :class:`~tiered.metadata.state_file.JsonStateFile`: written
atomically and durably; a damaged file (and ``.bak``) is moved aside and the log starts empty (the
worst case is an object left in the backend). Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from typing import Final

from tiered.errors import ProviderError
from tiered.errors import SegmentNotFoundError

from .state_file import JsonStateFile

log = logging.getLogger(__name__)

FILE_NAME: Final = "tieredOrphanObjects.json"
_VERSION: Final = 1


class OrphanLog:
    """The keys whose objects still have to be deleted; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self._file = JsonStateFile(
            Path(directory) / FILE_NAME,
            _VERSION,
            _parse,
            "objects it listed may be left in the backend",
        )
        self._lock = threading.Lock()
        self._keys: list[str] | None = None  # read on first use

    @property
    def path(self) -> Path:
        """The log file."""
        return self._file.path

    def keys(self) -> list[str]:
        """The logged keys, oldest first."""
        with self._lock:
            return list(self._load())

    def add(self, keys: Iterable[str]) -> None:
        """Log ``keys`` (durably) before their records are removed."""
        with self._lock:
            current = self._load()
            new = [k for k in keys if k not in current]
            if new:
                self._save([*current, *new])

    def remove(self, keys: Iterable[str]) -> None:
        """Forget ``keys``: their objects are deleted (or must not be)."""
        with self._lock:
            gone = set(keys)
            current = self._load()
            if gone & set(current):
                self._save([k for k in current if k not in gone])

    def sweep(self, delete: Callable[[str], None], recorded: Callable[[str], bool]) -> int:
        """Delete every logged object whose record is gone; returns how many were deleted.

        An object already absent counts as deleted. A failure leaves its key for the next
        sweep (logged once per sweep) and the sweep goes on with the others.
        """
        done: list[str] = []
        deleted = 0
        for key in self.keys():
            if recorded(key):
                done.append(key)  # the record was never removed: the object is live
                continue
            try:
                delete(key)
                deleted += 1
            except SegmentNotFoundError:
                pass
            except (ProviderError, OSError) as e:  # keep the key: the next sweep retries
                log.warning(
                    "could not delete the expired object %s, retried at the next expiry run: %s",
                    key,
                    e,
                    extra={"objectKey": key},
                )
                continue
            done.append(key)
        self.remove(done)
        return deleted

    def peek(self) -> list[str]:
        """The logged keys as the files hold them now, for a reader beside the owner (the
        scrubber): nothing is cached, moved or rewritten; none when both copies are damaged."""
        return self._file.load(owner=False) or []

    def _load(self) -> list[str]:
        if self._keys is None:
            self._keys = self._file.load() or []
        return self._keys

    def _save(self, keys: list[str]) -> None:
        self._file.save({"keys": keys})
        self._keys = keys


def _parse(document: dict[str, Any]) -> list[str]:
    keys = document["keys"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise TypeError("'keys' is not a list of strings")
    return keys
