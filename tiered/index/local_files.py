"""The local index files, ``{tieredDataDir}/tiered_index_file/{beginTimestamp}`` (spec §6.1, §6.7).

One file takes puts: the newest, while it is UNSEALED. A put that does not fit seals it and goes
on in a new file named by the current time (always above every begin timestamp in use, local or
uploaded, so names never repeat). SEALED files wait for compaction and upload.

Opening the directory after a restart (:meth:`LocalIndexFiles.open`): the ``compacting``
directory is deleted, files already uploaded are deleted, a file that does not open is moved
aside (``{name}.corrupt-{ms}``, never deleted), every file but the newest is sealed (upstream
reopens them all UNSEALED and seals them one put later) and the newest UNSEALED file is continued.
A read-only instance (``readonly=True``, for ``rmq-tiered query`` beside a running sidecar)
changes nothing on disk.

Not thread-safe: the index service serialises every call with its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Collection
from pathlib import Path
from typing import Final

from tiered import metrics
from tiered.errors import IndexFileError
from tiered.index.format import IndexStatus
from tiered.index.index_batch import IndexBatch
from tiered.index.index_store_file import COMPACTED_DIRECTORY_NAME
from tiered.index.index_store_file import IndexStoreFile
from tiered.index.index_store_file import local_index_files
from tiered.metadata import now_ms

log = logging.getLogger(__name__)

_MAX_ROLLS: Final = 1000  # files one put may fill (a batch larger than this many files is a bug)


class LocalIndexFiles:
    """The local files of one index directory, by begin timestamp."""

    def __init__(
        self,
        directory: Path,
        *,
        slots: int,
        max_items: int,
        clock: Callable[[], int] = now_ms,
        readonly: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.slots = slots
        self.max_items = max_items
        self.clock = clock
        self.readonly = readonly
        self.floor = 0
        """Begin timestamps up to this one are taken (by uploaded files): new files go above."""
        self._files: dict[int, IndexStoreFile] = {}

    @property
    def compacting_dir(self) -> Path:
        """Where compaction output is written before upload."""
        return self.directory / COMPACTED_DIRECTORY_NAME

    def open(self, uploaded: Collection[int] = ()) -> list[int]:
        """Open every local file; delete those whose begin timestamp is in ``uploaded``.

        Returns the begin timestamps of the files deleted as already uploaded.
        """
        removed: list[int] = []
        if not self.readonly and self.compacting_dir.exists():
            import shutil  # (after a compaction cut short only: every start would import it)

            shutil.rmtree(self.compacting_dir, ignore_errors=True)
        for path in local_index_files(self.directory):
            begin = int(path.name)
            if begin in uploaded:
                if not self.readonly:
                    log.info("%s: already uploaded, local copy deleted", path)
                    path.unlink(missing_ok=True)
                    removed.append(begin)
                continue
            try:
                f = IndexStoreFile.open(
                    path, slots=self.slots, max_items=self.max_items, readonly=self.readonly
                )
            except FileNotFoundError:
                continue  # uploaded and deleted by the running sidecar since the listing
            except IndexFileError as e:
                if self.readonly:
                    log.warning("%s: skipped: %s", path, e)
                    continue
                aside = path.with_name(f"{path.name}.corrupt-{self.clock()}")
                path.rename(aside)
                log.error("%s: %s; moved aside to %s (its keys are not searched)", path, e, aside)
                continue
            self._files[begin] = f
        if not self.readonly:
            for f in self.files[:-1]:
                if f.status is IndexStatus.UNSEALED:
                    f.seal()
                    metrics.INDEX_FILES_SEALED.inc()
            self._publish()
        return removed

    @property
    def files(self) -> list[IndexStoreFile]:
        """Every open local file, oldest first."""
        return [self._files[k] for k in sorted(self._files)]

    def sealed(self) -> list[IndexStoreFile]:
        """The SEALED files (waiting for compaction), oldest first."""
        return [f for f in self.files if f.status is IndexStatus.SEALED]

    def get(self, begin: int) -> IndexStoreFile | None:
        """The local file of ``begin``, if open."""
        return self._files.get(begin)

    def current(self) -> IndexStoreFile:
        """The file taking puts: the newest if UNSEALED, else a new one."""
        if self._files:
            newest = self._files[max(self._files)]
            if newest.status is IndexStatus.UNSEALED:
                return newest
        return self._create()

    def _create(self) -> IndexStoreFile:
        if self.readonly:
            raise IndexFileError(f"{self.directory}: opened read-only, no file can be created")
        begin = max(self.clock(), self.floor + 1, max(self._files, default=0) + 1)
        f = IndexStoreFile.create(self.directory, begin, slots=self.slots, max_items=self.max_items)
        self._files[begin] = f
        log.info("new index file %s", f.path)
        return f

    def put(self, batch: IndexBatch) -> list[IndexStoreFile]:
        """Put every message of ``batch``, sealing full files and creating new ones; returns
        the files this put sealed (flushed to disk)."""
        sealed: list[IndexStoreFile] = []
        try:
            self._put(batch, sealed)
        finally:
            if sealed:
                metrics.INDEX_FILES_SEALED.inc(len(sealed))
                self._publish()
        return sealed

    def _put(self, batch: IndexBatch, sealed: list[IndexStoreFile]) -> None:
        rest = batch
        for _ in range(_MAX_ROLLS):
            if not rest.messages:
                return
            f = self.current()
            items = f.item_count
            was_empty = items == 0
            done = f.put_many(rest)
            metrics.INDEX_KEYS.inc(f.item_count - items)
            if done == rest.messages:
                return
            if f.status is IndexStatus.SEALED:
                f.flush()
                sealed.append(f)
                log.info("index file %s is full (%d items): sealed", f.path, f.item_count)
            if done == 0 and was_empty:
                raise IndexFileError(f"{f.path}: an empty file took none of {rest.messages} "
                                     "messages; this is a bug")  # fmt: skip
            rest = rest.messages_slice(done)
        raise IndexFileError(f"one put filled {_MAX_ROLLS} index files: raise "
                             "tieredStoreIndexFileMaxIndexNum")  # fmt: skip

    def seal_current(self) -> IndexStoreFile | None:
        """Seal the UNSEALED file (the next put opens a new one); None when there is none."""
        for f in self.files:
            if f.status is IndexStatus.UNSEALED:
                f.seal()
                f.flush()
                metrics.INDEX_FILES_SEALED.inc()
                self._publish()
                return f
        return None

    def remove(self, begin: int) -> None:
        """Close and delete the local file of ``begin`` (it was uploaded)."""
        f = self._files.pop(begin, None)
        if f is not None:
            f.close()
            f.path.unlink(missing_ok=True)
            self._publish()

    def _publish(self) -> None:
        """Set the gauge of SEALED files waiting for compaction (not from a read-only view)."""
        if not self.readonly:
            metrics.INDEX_FILES_WAITING.set(len(self.sealed()))

    def flush(self) -> None:
        """Write the UNSEALED files' dirty pages to disk (SEALED ones were flushed when sealed)."""
        for f in self.files:
            if f.status is IndexStatus.UNSEALED:
                f.flush()

    def close(self) -> None:
        """Flush and close every file."""
        for f in self._files.values():
            f.close()
        self._files.clear()
