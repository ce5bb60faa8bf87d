"""The fsspec provider: any fsspec URL (``file://``, ``memory://``, ``s3://`` through s3fs,
``gcs://``, ``az://``, ...), with the posix key layout below the URL's path.

Two append modes. ``native`` (the default for ``file`` and ``memory``) appends to the file itself
(``open(..., "ab")``, fsync'd on local disks). ``chunks`` (the default for every other protocol:
object stores cannot append) uses the chunk scheme of :mod:`.chunks`, exactly as the s3 provider
does. Whole objects (``put``, a seal of several chunks) are written to a temporary object and
moved into place (a server-side copy on object stores, a rename on disks), so they appear whole.
In native mode files carry no seal mark, so ``enforces_seal`` is false.

Requests are counted per file-system call (``STAT``, ``GET``, ``PUT``, ``LIST``, ``DELETE``,
``COPY``); s3fs may send more than one HTTP request for one call and retries on its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

from tiered.errors import ConfigError
from tiered.errors import MissingDependencyError
from tiered.errors import PositionMismatchError
from tiered.errors import ProviderError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import as_bytes_view
from .base import check_range
from .base import iter_payload
from .chunks import Chunk
from .chunks import SegmentState
from .chunks import chunk_name
from .chunks import parse_name
from .chunks import pieces_for_read
from .chunks import state_from_listing
from .chunks import temp_name
from .layout import RESERVED_CHAR
from .layout import check_key
from .layout import check_prefix
from .layout import is_key
from .object_store import ObjectStoreOptions
from .os_errors import translated

if TYPE_CHECKING:
    from tiered.config import TieredConfig

AppendMode = Literal["auto", "native", "chunks"]
_NATIVE_PROTOCOLS = frozenset({"file", "local", "memory"})
_LOCAL_PROTOCOLS = frozenset({"file", "local"})
_PIECE_BYTES = 8 << 20


class FsspecProvider(Provider):
    """Objects below ``url``; ``storage_options`` go to the file system's constructor."""

    name = "fsspec"

    def __init__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        append_mode: AppendMode = "auto",
    ) -> None:
        super().__init__()
        try:
            from fsspec.core import split_protocol
        except ImportError as e:  # pragma: no cover - fsspec is a core dependency
            raise MissingDependencyError(
                "the fsspec provider needs fsspec: pip install fsspec"
            ) from e
        if not url:
            raise ConfigError(
                "tieredStoreFsspecUrl is empty; give a URL such as s3://bucket/tiered"
            )
        protocol = split_protocol(url)[0] or "file"
        if append_mode not in ("auto", "native", "chunks"):
            raise ConfigError(f"append_mode {append_mode!r} is not one of auto, native, chunks")
        if append_mode == "auto":
            append_mode = "native" if protocol in _NATIVE_PROTOCOLS else "chunks"
        self.url = url
        self.protocol = protocol
        self.append_mode: Literal["native", "chunks"] = append_mode
        self.storage_options = dict(storage_options or {})
        if append_mode == "chunks" and protocol not in _NATIVE_PROTOCOLS:
            # every object-store call must see the backend, not a cached listing
            self.storage_options.setdefault("use_listings_cache", False)
        self._fs_obj: Any = None
        self._root = ""
        self._fs_lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> FsspecProvider:
        """Objects below ``tieredStoreFsspecUrl``; an ``s3://`` URL is reached with the
        ``objectStore*`` keys (:class:`.object_store.ObjectStoreOptions`)."""
        url = cfg.tiered_store_fsspec_url
        options: dict[str, Any] = {}
        if url.startswith(("s3://", "s3a://")):
            options = ObjectStoreOptions.from_config(cfg).s3fs_storage_options()
        return cls(url, storage_options=options)

    def __repr__(self) -> str:
        return f"FsspecProvider(url={self.url!r}, append_mode={self.append_mode!r})"

    @property
    def enforces_seal(self) -> bool:
        return self.append_mode == "chunks"

    @property
    def object_per_append(self) -> bool:
        return self.append_mode == "chunks"

    @property
    def fs(self) -> Any:
        """The ``fsspec.AbstractFileSystem``, created on first use."""
        fs = self._fs_obj
        if fs is None:
            with self._fs_lock:
                if self._fs_obj is None:
                    from fsspec.core import url_to_fs

                    try:
                        new_fs, root = url_to_fs(self.url, **self.storage_options)
                    except ImportError as e:
                        raise MissingDependencyError(
                            f"fsspec URL {self.url!r} needs a driver that is not installed "
                            f"({e}); for s3:// run: pip install 'rocketmq-tiered[s3]'"
                        ) from e
                    self._root = str(root).rstrip("/")
                    self._fs_obj = new_fs
                fs = self._fs_obj
        return fs

    def _path(self, name: str) -> str:
        """The file-system path of a key or chunk name."""
        if self._fs_obj is None:
            self.fs  # noqa: B018 - creating the file system resolves the root
        return f"{self._root}/{name}"

    def _rel(self, path: str) -> str:
        path = str(path)
        return path[len(self._root) + 1 :] if self._root or path.startswith("/") else path

    # --- shared pieces ----------------------------------------------------------------------------

    def _info_size(self, key: str) -> int | None:
        """The file's size, ``None`` if absent (native mode)."""
        self._request("STAT")
        try:
            with translated(key, "fsspec operation"):
                info = self.fs.info(self._path(key))
        except SegmentNotFoundError:
            return None
        return int(info["size"]) if info.get("type") == "file" else None

    def _state(self, key: str) -> SegmentState:
        """One listing of the key's directory (chunks mode).

        A directory listing on a disk is no snapshot: a file renamed or removed meanwhile can be
        missed (or vanish between its name and its size), so there an absent result is confirmed
        by asking for the object itself.
        """
        parent = self._path(key).rpartition("/")[0]
        entries: list[dict[str, Any]] = []
        local = self.protocol in _LOCAL_PROTOCOLS
        for _ in range(3):
            self._request("LIST")
            with translated(key, "fsspec operation"):
                self.fs.invalidate_cache(parent)
                try:
                    entries = self.fs.ls(parent, detail=True)
                    break
                except FileNotFoundError:
                    if not local or not os.path.isdir(parent):
                        break  # no directory, no objects
                    # a file went away between its name and its size: list again
                except (KeyError, RuntimeError):
                    continue  # memory:// iterates a shared dict that changed meanwhile
        state = state_from_listing(
            key,
            ((self._rel(e["name"]), int(e["size"])) for e in entries if e.get("type") == "file"),
        )
        if not state.exists and local:
            size = self._info_size(key)
            if size is not None:
                return SegmentState(key, size, state.run, state.strays, state.junk)
        return state

    def _cat(self, name: str, start: int, end: int, key: str) -> bytes:
        self._request("GET")
        with translated(key, "fsspec operation"):
            return bytes(self.fs.cat_file(self._path(name), start=start, end=end))

    def _write_whole(self, key: str, pieces: Iterable[BytesLike]) -> None:
        """Write ``key`` so that it appears whole: a temporary object, then a move.

        A failed write (fsspec commits a file even when its ``with`` block raises) leaves only
        the temporary object, which listings ignore and the next seal, put or delete removes.
        """
        fs = self.fs
        path = self._path(key)
        tmp = self._path(temp_name(key, uuid.uuid4().hex))
        with translated(key, "fsspec operation"):
            self._makedirs(path)
            self._request("PUT")
            with fs.open(tmp, "wb") as f:
                for piece in pieces:
                    f.write(piece)
                _fsync(f)
            self._request("COPY")
            fs.mv(tmp, path)

    def _makedirs(self, path: str) -> None:
        """Create the parent directories of ``path`` where directories are real (local disks)."""
        if self.protocol in _LOCAL_PROTOCOLS:
            self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)

    def _remove(self, names: Iterable[str], key: str) -> None:
        """Delete names in order; object stores get one bulk request for all but the first."""
        paths = [self._path(name) for name in names]
        one_by_one = paths if self.protocol in _NATIVE_PROTOCOLS else paths[:1]
        for path in one_by_one:
            self._request("DELETE")
            with translated(key, "fsspec operation"), contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)
        if len(paths) > len(one_by_one):
            self._request("DELETE")
            with translated(key, "fsspec operation"), contextlib.suppress(FileNotFoundError):
                self.fs.rm(paths[1:])

    # --- the contract -----------------------------------------------------------------------------

    def size(self, key: str) -> int:
        check_key(key)
        if self.append_mode == "native":
            size = self._info_size(key)
        else:
            state = self._state(key)
            size = state.size if state.exists else None
        if size is None:
            raise SegmentNotFoundError(f"no object {key!r} at {self.url!r}", key=key)
        return size

    def read(self, key: str, position: int, length: int) -> bytes:
        check_key(key)
        check_range(position, length, key=key)
        if length > 0:
            try:  # the common case, a whole object: one ranged read
                data = self._cat(key, position, position + length, key)
            except ProviderError:
                data = b""  # absent, unsealed, or past the end (416): size or listing tells
            if data:
                return data
        for attempt in (1, 2):
            if self.append_mode == "native":
                size = self.size(key)
                names = [(key, position, min(position + length, size))]
            else:
                state = self._state(key)
                if not state.exists:
                    raise SegmentNotFoundError(f"no object {key!r} at {self.url!r}", key=key)
                size = state.size
                if state.sealed:
                    names = [(key, position, min(position + length, size))]
                else:
                    pieces = pieces_for_read(state.run, position, length)
                    names = [(p.name, p.start, p.end) for p in pieces]
            if position >= size:
                raise ReadPastEndError(
                    f"read of {key!r} at {position} is past its end ({size} bytes)", key=key
                )
            if length == 0:
                return b""
            try:
                return b"".join(self._cat(name, start, end, key) for name, start, end in names)
            except SegmentNotFoundError:
                if attempt == 2 or self.append_mode == "native":
                    raise
                # a seal finished meanwhile and removed the chunks: list again
        raise AssertionError("unreachable")  # pragma: no cover

    def append(self, key: str, data: BytesLike, position: int) -> int:
        check_key(key)
        check_range(position, key=key)
        view = as_bytes_view(data)
        strays: tuple[Chunk, ...] = ()
        if self.append_mode == "native":
            current = self._info_size(key)
            exists, sealed = current is not None, False
        else:
            state = self._state(key)
            current = state.size
            exists, sealed, strays = state.exists, state.sealed, state.strays
        if sealed:
            raise SegmentSealedError(f"object {key!r} is sealed; start a new segment", key=key)
        if not exists and position != 0:
            raise SegmentNotFoundError(
                f"append to absent object {key!r} at {position}; create it at position 0",
                key=key,
            )
        if exists and position != current:
            raise PositionMismatchError(
                f"append to {key!r} at {position}, but it holds {current} bytes",
                key=key,
                expected=current or 0,
                given=position,
            )
        if exists and not view:
            return position
        if self.append_mode == "native":
            self._append_native(key, view)
        else:
            self._remove((c.name for c in strays), key)
            path = self._path(chunk_name(key, position))
            self._request("PUT")
            with translated(key, "fsspec operation"):
                if position == 0:
                    self._makedirs(path)
                self.fs.pipe_file(path, bytes(view))
        return position + len(view)

    def _append_native(self, key: str, view: memoryview) -> None:
        path = self._path(key)
        self._request("PUT")
        with translated(key, "fsspec operation"):
            self._makedirs(path)
            with self.fs.open(path, "ab") as f:
                f.write(view)
                _fsync(f)

    def seal(self, key: str) -> None:
        check_key(key)
        if self.append_mode == "native":
            self.size(key)
            return
        state = self._state(key)
        if not state.exists:
            raise SegmentNotFoundError(f"no object {key!r} at {self.url!r}", key=key)
        if not state.sealed:
            path = self._path(key)
            if len(state.run) == 1 and self.protocol not in _LOCAL_PROTOCOLS:
                self._request("COPY")  # a server-side copy appears whole
                with translated(key, "fsspec operation"):
                    self.fs.copy(self._path(state.run[0].name), path)
            else:
                chunks = (self._cat(c.name, 0, c.size, key) for c in state.run)
                self._write_whole(key, chunks)
        self._remove(state.chunk_names, key)

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        check_key(key)
        if self.append_mode == "native":
            exists, leftovers = self._info_size(key) is not None, []
        else:
            state = self._state(key)
            exists, leftovers = state.exists, state.chunk_names
        if exists and not overwrite:
            raise SegmentExistsError(
                f"object {key!r} exists; pass overwrite=True to replace", key=key
            )
        self._write_whole(key, iter_payload(data, _PIECE_BYTES))
        self._remove(leftovers, key)

    def delete(self, key: str) -> None:
        check_key(key)
        if self.append_mode == "native":
            self._remove([key], key)
            return
        state = self._state(key)
        names = state.chunk_names
        first = names[:1] if names and names[0] == chunk_name(key, 0) else []
        self._remove(first, key)  # the segment is absent from here on
        self._remove([key] if state.sealed else [], key)
        self._remove(names[len(first) :], key)

    def list(self, prefix: str = "") -> Iterator[str]:
        check_prefix(prefix)
        fs = self.fs
        base = prefix.rpartition("/")[0]
        start = self._path(base) if base else self._root or "/"
        self._request("LIST")
        with translated(prefix, "fsspec operation"):
            fs.invalidate_cache()
            try:
                paths = fs.find(start, withdirs=False)
            except FileNotFoundError:
                paths = []
        keys: set[str] = set()
        for path in paths:
            parsed = parse_name(self._rel(path))
            if parsed is None or parsed[1] not in (None, 0):
                continue
            if parsed[1] == 0 and self.append_mode == "native":
                continue
            if parsed[0].startswith(prefix) and is_key(parsed[0]):
                keys.add(parsed[0])
        return iter(sorted(keys))

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        check_prefix(prefix)
        fs = self.fs
        base = prefix.rpartition("/")[0]
        start = self._path(base) if base else self._root or "/"
        self._request("LIST")
        with translated(prefix, "fsspec operation"):
            fs.invalidate_cache()
            try:
                infos: dict[str, Any] = fs.find(start, withdirs=False, detail=True)
            except FileNotFoundError:
                infos = {}
        names: dict[str, list[tuple[str, int]]] = {}
        for path, info in infos.items():
            name = self._rel(path)
            key = name.partition(RESERVED_CHAR)[0]
            if self.append_mode == "native" and key != name:
                continue
            if key.startswith(prefix) and is_key(key):
                names.setdefault(key, []).append((name, int(info["size"])))
        states = (state_from_listing(key, entries) for key, entries in names.items())
        return iter(sorted((s.key, s.size) for s in states if s.exists))

    # --- pickling ---------------------------------------------------------------------------------

    def close(self) -> None:
        with self._fs_lock:
            self._fs_obj = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_fs_obj"] = None
        state.pop("_fs_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._fs_lock = threading.Lock()


def _fsync(f: Any) -> None:
    """fsync a local file behind an fsspec file object; others are durable when closed."""
    inner = getattr(f, "f", None)
    fileno = getattr(inner, "fileno", None)
    if fileno is None:
        return
    f.flush()
    os.fsync(fileno())
