"""The posix provider: files under ``tieredStoreFilePath``, laid out exactly as upstream's
``PosixFileSegment`` lays them out, so a Java broker configured with the same path reads them.

An append is one ``pwrite`` at the checked position followed by ``fdatasync``; creating a file also
fsyncs the directories it created. The descriptor an append opened stays open for the key's next
append and ``sync`` (at most :data:`OPEN_FILES`, the least recently used closed first; a seal,
delete, put or ``close`` closes it): each ``open``/``close`` lets another thread take the
interpreter lock, and on a catch-up those handovers cost more than the calls. ``put`` writes a
hidden temporary file beside the target and links (no overwrite) or renames (overwrite) it into
place, so a put object appears whole. Plain files carry no seal mark (the Java broker opens them
read-write), so ``enforces_seal`` is false here. Request accounting counts system-call groups:
``STAT``, ``READ``, ``WRITE``, ``FSYNC``, ``RENAME``, ``DELETE``, ``LIST`` (one per directory
scanned).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import logging
import os
import re
import stat
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import cast

from tiered.errors import PositionMismatchError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import TieredStoreError

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import as_bytes_view
from .base import check_range
from .base import iter_payload
from .layout import all_keys_safe
from .layout import check_key
from .layout import check_prefix
from .layout import is_key
from .os_errors import translate
from .os_errors import translated

if TYPE_CHECKING:
    from tiered.config import TieredConfig

_PIECE_BYTES = 8 << 20
BULK_APPENDS = 64
"""Deferred appends to files without a kept descriptor made by one call of the compiled kernel
(fewer go one by one)."""
BULK_THREADS = min(len(os.sched_getaffinity(0)), 2)
"""Threads of that call: the appends' system calls side by side."""
OPEN_FILES = 128
"""Append descriptors a provider keeps open (two per queue being offloaded: its commitlog and
consumequeue segments). Reusing one saves an ``open``, ``close`` and their handovers of the
interpreter lock per append and per sync."""
SYNCFS_MIN_KEYS = 64
"""From this many keys :meth:`PosixProvider.sync_many` syncs the whole file system at once."""


def _find_syncfs() -> Callable[[int], int] | None:
    try:
        return cast("Callable[[int], int]", ctypes.CDLL(None, use_errno=True).syncfs)
    except (OSError, AttributeError):  # not Linux / glibc: one key after the other
        return None


_syncfs = _find_syncfs()
_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}
_TEMP_NAME = re.compile(r"\.(.+)\.[0-9a-f]{32}\.tmp")
"""What :meth:`PosixProvider.put` writes before its rename: ``.{name}.{uuid4 hex}.tmp``."""
log = logging.getLogger(__name__)


class PosixProvider(Provider):
    """Files below ``root``; a key is a relative path (see :mod:`.layout`)."""

    name = "posix"

    def __init__(self, root: str | os.PathLike[str] = "") -> None:
        super().__init__()
        # upstream uses tieredStoreFilePath verbatim ("" = the working directory); it is made
        # absolute here so a pickled provider means the same directory on a Spark executor
        self.root = Path(os.path.abspath(os.fspath(root) or "."))
        self._root = str(self.root)
        self._prefix = os.path.join(self._root, "")  # (a key's file: this and the key)
        self._open: OrderedDict[str, int] = OrderedDict()
        """Idle append descriptors by key (a writer takes its key's out while it uses it)."""
        self._open_lock = threading.Lock()
        self._putting: set[str] = set()
        """The temporary files of this provider's puts in progress (under ``_open_lock``):
        :meth:`clean_temporary` leaves them alone."""
        self._unsynced_dirs: dict[str, set[str]] = {}
        """Directories whose new entries (a deferred append's new file or directories) wait for
        the key's :meth:`sync`, or any :meth:`sync_many` that ran ``syncfs`` (under
        ``_open_lock``)."""

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> PosixProvider:
        """Files below ``tieredStoreFilePath``."""
        return cls(cfg.tiered_store_file_path)

    def __repr__(self) -> str:
        return f"PosixProvider(root={str(self.root)!r})"

    @property
    def enforces_seal(self) -> bool:
        return False

    @property
    def defers_sync(self) -> bool:
        return True

    @property
    def leaves_temporary(self) -> bool:
        return True

    def path(self, key: str) -> Path:
        """The file that holds ``key``."""
        return self.root / check_key(key)

    def _file(self, key: str) -> str:
        """:meth:`path` as a string (a ``Path`` join costs more, and this runs per call)."""
        return self._prefix + check_key(key)

    def size(self, key: str) -> int:
        path = self._file(key)
        self._request("STAT")
        with translated(key, "file operation"):
            st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise SegmentNotFoundError(f"key {key!r} names a directory, not an object", key=key)
        return st.st_size

    def sizes_many(self, keys: Sequence[str]) -> list[int | None]:
        """Each key's file size (None: absent, or a directory), looking at its directories from
        the root down first: one found absent answers for every key below it without a system
        call (a broker's first offload: thousands of new queues, no object yet)."""
        out: list[int | None] = []
        present: set[str] = set()
        absent: set[str] = set()
        for key in keys:
            path = self._file(key)
            directory, found = self._root, True
            for part in key.split("/")[:-1]:
                directory = os.path.join(directory, part)
                if directory in present:
                    continue
                if directory not in absent:
                    st = self._stat(key, directory)
                    if st is not None and stat.S_ISDIR(st.st_mode):
                        present.add(directory)
                        continue
                    absent.add(directory)
                found = False
                break
            st = self._stat(key, path) if found else None
            out.append(st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None)
        return out

    def _stat(self, key: str, path: str) -> os.stat_result | None:
        """``os.stat(path)`` for ``key``, None where nothing is there (as :meth:`size` finds
        no object); any other error as :meth:`size` raises it."""
        self._request("STAT")
        try:
            with translated(key, "file operation"):
                return os.stat(path)
        except SegmentNotFoundError:
            return None

    def read(self, key: str, position: int, length: int) -> bytes:
        path = self._file(key)
        check_range(position, length, key=key)
        with translated(key, "file operation"):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return self._pread(fd, key, position, length)
        finally:
            os.close(fd)

    def readinto(self, key: str, position: int, into: memoryview) -> int:
        """:meth:`read` straight into ``into`` (``os.preadv``: one copy, from the page cache)."""
        path = self._file(key)
        check_range(position, len(into), key=key)
        with translated(key, "file operation"):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            want = self._readable(fd, key, position, len(into))
            got = 0
            with translated(key, "file operation"):
                while got < want:
                    self._request("READ")
                    n = os.preadv(fd, [into[got:want]], position + got)
                    if not n:
                        break
                    got += n
            return got
        finally:
            os.close(fd)

    def _readable(self, fd: int, key: str, position: int, length: int) -> int:
        """How many of ``length`` bytes from ``position`` the open object ``fd`` holds."""
        with translated(key, "file operation"):
            st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SegmentNotFoundError(f"key {key!r} names a directory, not an object", key=key)
        if position >= st.st_size:
            raise ReadPastEndError(
                f"read of {key!r} at {position} is past its end ({st.st_size} bytes)", key=key
            )
        return min(length, st.st_size - position)

    def _pread(self, fd: int, key: str, position: int, length: int) -> bytes:
        want = self._readable(fd, key, position, length)
        with translated(key, "file operation"):
            parts: list[bytes] = []
            got = 0
            while got < want:
                self._request("READ")
                piece = os.pread(fd, want - got, position + got)
                if not piece:
                    break
                parts.append(piece)
                got += len(piece)
            return b"".join(parts)

    def append(self, key: str, data: BytesLike, position: int) -> int:
        return self._append(key, data, position, durable=True)

    def append_deferred(self, key: str, data: BytesLike, position: int) -> int:
        return self._append(key, data, position, durable=False)

    def append_deferred_many(
        self, appends: Sequence[tuple[str, BytesLike, int]]
    ) -> list[int | TieredStoreError | OSError]:
        """Every append deferred. Of a wide round's thousands of files (more than
        :data:`OPEN_FILES`), those without a kept descriptor go to the compiled kernel at once
        (:meth:`_append_closed_many`: an existing file opened, checked, written and closed, a
        new one made with its directories, none kept); a file whose descriptor is kept, or a
        call of fewer than :data:`BULK_APPENDS`, goes the usual way."""
        out: list[int | TieredStoreError | OSError] = []
        closed: list[tuple[int, str, str, memoryview, int]] = []  # (index, key, path, ...)
        checked = all_keys_safe([key for key, _, _ in appends])
        prefix = self._prefix
        for key, data, position in appends:
            try:
                check_range(position, key=key)
                if key in self._open:
                    out.append(self._append(key, data, position, durable=False))
                else:
                    path = prefix + key if checked else self._file(key)
                    closed.append((len(out), key, path, as_bytes_view(data), position))
                    out.append(position)  # (replaced below)
            except (TieredStoreError, OSError) as e:
                out.append(e)
        if len(closed) >= BULK_APPENDS:
            self._append_closed_many(closed, out)
            return out
        for i, key, _, view, position in closed:
            try:
                if position == 0:
                    out[i] = self._append(key, view, 0, durable=False)
                else:
                    out[i] = self._append_closed(key, view, position)
            except (TieredStoreError, OSError) as e:
                out[i] = e
        return out

    def _append_closed_many(
        self,
        closed: list[tuple[int, str, str, memoryview, int]],
        out: list[int | TieredStoreError | OSError],
    ) -> None:
        """The appends of ``closed`` by one call of the compiled kernel (``append_files``: on a
        few threads, without the interpreter lock, an existing file opened, its size checked,
        written and closed; at position 0 a new one made, with its missing directories); each
        outcome into ``out`` at its index. What the kernel made is synced as
        :meth:`_makedirs` leaves it, with the key (:meth:`sync`, :meth:`sync_many`)."""
        from tiered.process.native import kernel

        status, value, made = kernel().append_files(
            [path for _, _, path, _, _ in closed],
            array.array("q", [p for _, _, _, _, p in closed]),
            [view for _, _, _, view, _ in closed],
            BULK_THREADS,
        )
        deferred: list[tuple[str, str]] = []
        writes = 0  # (reported at once: every write was made by then)
        for (i, key, path, _, position), s, v, m in zip(
            closed, memoryview(status).cast("q").tolist(), memoryview(value).cast("q").tolist(),
            memoryview(made).cast("q").tolist(), strict=True,
        ):  # fmt: skip
            directory = path
            for _ in range(m):  # the directories that gained an entry: the file's, then up
                directory = directory.rpartition("/")[0] or "/"  # (absolute, normalised)
                deferred.append((key, directory))
            if s == 0:
                writes += 1
                out[i] = position + v
            elif s == 1:
                out[i] = SegmentNotFoundError(
                    f"append to absent object {key!r} at {position}; create it at position 0",
                    key=key,
                )
            elif s == 2:
                out[i] = PositionMismatchError(
                    f"append to {key!r} at {position}, but the file holds {v} bytes",
                    key=key,
                    expected=v,
                    given=position,
                )
            else:
                writes += 1
                out[i] = translate(OSError(v, os.strerror(v), path), key, "file operation")
        self._request_many("WRITE", writes)
        with self._open_lock:
            for key, parent in deferred:
                self._unsynced_dirs.setdefault(key, set()).add(parent)

    def _append_closed(self, key: str, data: BytesLike, position: int) -> int:
        """A deferred append to the existing file of ``key`` (``position`` > 0), through a
        descriptor opened for it and closed after."""
        check_range(position, key=key)
        view = as_bytes_view(data)
        path = self._file(key)
        with translated(key, "file operation"):
            fd = self._open_existing(path, key, position)
            try:
                return self._write_at(fd, key, view, position, None, durable=False)
            finally:
                os.close(fd)

    def sync(self, key: str) -> None:
        self._sync_data(key)
        with self._open_lock:
            directories = self._unsynced_dirs.pop(key, set())
        try:
            with translated(key, "file operation"):
                for directory in sorted(directories, key=lambda d: -d.count(os.sep)):
                    self._fsync_dir(directory)
        except BaseException:
            with self._open_lock:  # still to be synced
                self._unsynced_dirs.setdefault(key, set()).update(directories)
            raise

    def _sync_data(self, key: str) -> None:
        fd = self._take(key)
        if fd is not None:  # the descriptor the appends wrote through
            try:
                with translated(key, "file operation"):
                    self._request("FSYNC")
                    os.fdatasync(fd)
            except BaseException:
                os.close(fd)
                raise
            self._keep(key, fd)
            return
        path = self.path(key)
        with translated(key, "file operation"):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            except FileNotFoundError as e:
                raise SegmentNotFoundError(f"sync of absent object {key!r}", key=key) from e
            try:
                self._request("FSYNC")
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def sync_many(self, keys: Sequence[str]) -> None:
        """One ``syncfs`` of the tier's file system for :data:`SYNCFS_MIN_KEYS` keys or more
        (writing back every dirty page and inode of that file system, the new directory entries
        of deferred appends included, then one journal commit: for thousands of small appends
        much faster than their ``fdatasync`` calls, even issued side by side, and cheaper in
        CPU); fewer are synced one by one. An I/O error of any file of that file system since
        the tier's directory was opened fails it (Linux >= 5.8 reports them): the caller then
        syncs key by key, and learns which."""
        if len(keys) < SYNCFS_MIN_KEYS or _syncfs is None:
            super().sync_many(keys)
            return
        if not all_keys_safe(keys):  # checked as every call checks its key
            for key in keys:
                self._file(key)
        with translated(str(self.root), "file operation"):
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                with self._open_lock:  # what syncfs covers: entries made before it starts
                    covered = {key: self._unsynced_dirs.pop(key) for key in keys
                               if key in self._unsynced_dirs}  # fmt: skip
                self._request("FSYNC")
                if _syncfs(fd) != 0:
                    err = ctypes.get_errno()
                    with self._open_lock:
                        for key, dirs in covered.items():
                            self._unsynced_dirs.setdefault(key, set()).update(dirs)
                    raise OSError(err, f"syncfs of {self.root}: {os.strerror(err)}")
            finally:
                os.close(fd)

    def _append(self, key: str, data: BytesLike, position: int, *, durable: bool) -> int:
        check_range(position, key=key)
        view = as_bytes_view(data)
        fd, st, new_in = self._take(key), None, None
        if fd is not None:
            try:
                with translated(key, "file operation"):
                    st = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
            if st.st_nlink == 0:  # deleted or replaced behind this provider: open the path
                os.close(fd)
                fd = st = None
        if fd is None:  # (a kept descriptor's key was checked when it was opened)
            with translated(key, "file operation"):
                if position:
                    fd = self._open_existing(self._file(key), key, position)
                else:
                    path = self.path(key)
                    fd, created = self._open_for_append(path, key, position, durable)
                    new_in = path.parent if created else None
        if new_in is not None and not durable:  # the name is made durable with the data
            self._defer_dir(key, str(new_in))
            new_in = None
        try:
            with translated(key, "file operation"):
                end = self._write_at(fd, key, view, position, new_in, durable=durable, st=st)
        except BaseException:
            os.close(fd)
            raise
        self._keep(key, fd)
        return end

    def _take(self, key: str) -> int | None:
        """The key's idle append descriptor, taken out (the caller keeps or closes it)."""
        with self._open_lock:
            return self._open.pop(key, None)

    def _keep(self, key: str, fd: int) -> None:
        """Keep ``fd`` for the key's next append or sync; close the least recently used beyond
        :data:`OPEN_FILES` (all idle: a descriptor in use is out of the table)."""
        with self._open_lock:
            stale = self._open.pop(key, None)
            self._open[key] = fd
            over = len(self._open) - OPEN_FILES
            closing = [self._open.popitem(last=False)[1] for _ in range(over)]
        for old in [*closing, *([stale] if stale is not None else [])]:
            os.close(old)

    def _drop(self, key: str) -> None:
        """Close the key's kept descriptor, if any (it is sealed, deleted or replaced)."""
        fd = self._take(key)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        with self._open_lock:
            kept, self._open = list(self._open.values()), OrderedDict()
        for fd in kept:
            os.close(fd)

    def __del__(self) -> None:
        # a provider dropped without close(), as file objects do: its descriptors go with it
        with contextlib.suppress(Exception):
            self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_open", None)  # descriptors mean nothing in another process
        state.pop("_open_lock", None)
        state.pop("_unsynced_dirs", None)
        state.pop("_putting", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._open = OrderedDict()
        self._open_lock = threading.Lock()
        self._putting = set()
        self._unsynced_dirs = {}

    def _write_at(
        self,
        fd: int,
        key: str,
        view: memoryview,
        position: int,
        new_in: Path | None,
        *,
        durable: bool = True,
        st: os.stat_result | None = None,
    ) -> int:
        current = (st or os.fstat(fd)).st_size
        if position != current:
            raise PositionMismatchError(
                f"append to {key!r} at {position}, but the file holds {current} bytes",
                key=key,
                expected=current,
                given=position,
            )
        written = 0
        while written < len(view):
            self._request("WRITE")
            written += os.pwrite(fd, view[written:], position + written)
        if durable:
            self._request("FSYNC")
            os.fdatasync(fd)
        if new_in is not None:  # the new file's name is durable at once either way
            self._fsync_dir(new_in)
        return position + written

    def _open_existing(self, path: str, key: str, position: int) -> int:
        try:
            return os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError as e:
            raise SegmentNotFoundError(
                f"append to absent object {key!r} at {position}; create it at position 0",
                key=key,
            ) from e

    def _open_for_append(
        self, path: Path, key: str, position: int, durable: bool = True
    ) -> tuple[int, bool]:
        flags = os.O_WRONLY | os.O_CLOEXEC
        if position != 0:
            return self._open_existing(str(path), key, position), False
        self._makedirs(path.parent, None if durable else key)
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666), True
        except FileExistsError:
            return os.open(path, flags), False

    def _makedirs(self, directory: str | Path, deferred_for: str | None = None) -> None:
        """Create ``directory`` and its missing parents, fsyncing each new entry's parent (or,
        ``deferred_for`` a key, leaving that to the key's sync). A ``mkdir`` first, a parent
        only when it says the parent is missing: a new queue's directories take one call
        each, no look at what exists."""
        made: list[str] = []
        todo = [os.fspath(directory)]
        while todo:
            try:
                os.mkdir(todo[-1])
            except FileExistsError:
                todo.pop()
            except FileNotFoundError:
                parent = os.path.dirname(todo[-1])
                if parent == todo[-1]:
                    raise
                todo.append(parent)
            else:
                made.append(todo.pop())  # (parents first)
        for new in made:
            if deferred_for is None:
                self._fsync_dir(os.path.dirname(new))
            else:
                self._defer_dir(deferred_for, os.path.dirname(new))

    def _defer_dir(self, key: str, directory: str) -> None:
        with self._open_lock:
            self._unsynced_dirs.setdefault(key, set()).add(directory)

    def _fsync_dir(self, directory: str | Path) -> None:
        self._request("FSYNC")
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def seal(self, key: str) -> None:
        self._drop(key)  # the file grows no more
        self.size(key)  # the data is already durable; a file has nothing to consolidate

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        path = self.path(key)
        self._drop(key)
        if not overwrite and path.exists():
            raise SegmentExistsError(
                f"object {key!r} exists; pass overwrite=True to replace", key=key
            )
        with translated(key, "file operation"):
            self._makedirs(path.parent)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            with self._open_lock:
                self._putting.add(str(tmp))
            try:
                self._write_file(tmp, data)
                self._request("RENAME")
                if overwrite:
                    os.replace(tmp, path)
                else:
                    self._link_no_overwrite(tmp, path, key)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                with self._open_lock:
                    self._putting.discard(str(tmp))
            self._fsync_dir(path.parent)

    def _write_file(self, path: Path, data: Payload) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            for piece in iter_payload(data, _PIECE_BYTES):
                view = as_bytes_view(piece)
                done = 0
                while done < len(view):
                    self._request("WRITE")
                    done += os.write(fd, view[done:])
            self._request("FSYNC")
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def _link_no_overwrite(self, tmp: Path, path: Path, key: str) -> None:
        try:
            os.link(tmp, path)
        except FileExistsError as e:
            raise SegmentExistsError(
                f"object {key!r} exists; pass overwrite=True to replace", key=key
            ) from e
        except OSError as e:
            if e.errno not in _NO_LINK:
                raise
            # no hard links on this file system: check, then rename (one writer per key)
            if path.exists():
                raise SegmentExistsError(
                    f"object {key!r} exists; pass overwrite=True to replace", key=key
                ) from e
            os.rename(tmp, path)

    def delete(self, key: str) -> None:
        path = self.path(key)
        self._drop(key)
        with self._open_lock:  # a deleted key's new names need no sync any more
            self._unsynced_dirs.pop(key, None)
        self._request("DELETE")
        with (
            translated(key, "file operation"),
            contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError),
        ):
            os.unlink(path)

    def clean_temporary(self, prefix: str = "", prune: Callable[[str], bool] | None = None) -> int:
        check_prefix(prefix)
        base = prefix.rpartition("/")[0]
        removed = 0
        skip = len(os.path.join(self._root, ""))  # walked paths start so (no relpath each)
        for dirpath, dirnames, filenames in os.walk(self.root / base if base else self.root):
            self._request("LIST")
            rel = dirpath[skip:] + "/" if dirpath != self._root else ""
            if prune is not None:
                dirnames[:] = [d for d in dirnames if not prune(f"{rel}{d}/")]
            for name in filenames:
                if name[:1] != ".":  # a temporary name starts with a dot
                    continue
                match = _TEMP_NAME.fullmatch(name)
                path = os.path.join(dirpath, name)
                if match and (rel + match.group(1)).startswith(prefix):
                    with self._open_lock:
                        if path in self._putting:
                            continue  # a put of this provider, in progress
                    self._request("DELETE")
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                    removed += 1
                    log.info("removed %s, left by an interrupted put", path)
        return removed

    def list(self, prefix: str = "") -> Iterator[str]:
        return iter(sorted(key for key, _ in self._walk(prefix)))

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        for key, path in self._walk(prefix):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # deleted since the directory was read
            if stat.S_ISREG(st.st_mode):
                found.append((key, st.st_size))
        return iter(sorted(found))

    def _walk(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(key, file path) of every key below ``prefix``, directory by directory."""
        check_prefix(prefix)
        base, _, _ = prefix.rpartition("/")
        for dirpath, dirnames, filenames in os.walk(self.root / base if base else self.root):
            self._request("LIST")
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel + "/"
            dirnames[:] = [
                d
                for d in dirnames
                if not d.startswith(".")
                and ((rel + d + "/").startswith(prefix) or prefix.startswith(rel + d + "/"))
            ]
            for name in filenames:
                key = rel + name
                if key.startswith(prefix) and is_key(key):
                    yield key, os.path.join(dirpath, name)
