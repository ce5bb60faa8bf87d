"""The memory provider: a per-instance dict, for tests, demos and benchmarks.

Nothing is shared between instances (no class-level state). Unlike upstream's
``MemoryFileSegment`` there is no fake 1000-byte starting size (spec §5.7): a new object is empty.
A pickled copy carries a snapshot of the objects.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from tiered.errors import PositionMismatchError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import as_bytes_view
from .base import check_range
from .base import read_payload
from .layout import check_key
from .layout import check_prefix


class MemoryProvider(Provider):
    """Objects in a dict; every method holds one lock for its whole (short) duration."""

    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[str, bytearray] = {}
        self._sealed: set[str] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryProvider(objects={len(self._objects)})"

    def _get(self, key: str) -> bytearray:
        data = self._objects.get(key)
        if data is None:
            raise SegmentNotFoundError(f"no object {key!r} in the memory provider", key=key)
        return data

    def size(self, key: str) -> int:
        check_key(key)
        with self._lock:
            self._request("HEAD")
            return len(self._get(key))

    def read(self, key: str, position: int, length: int) -> bytes:
        with self._lock:
            return bytes(self._piece(key, position, length))

    def readinto(self, key: str, position: int, into: memoryview) -> int:
        with self._lock:
            piece = self._piece(key, position, len(into))
            into[: len(piece)] = piece
            return len(piece)

    def _piece(self, key: str, position: int, length: int) -> memoryview:
        """Up to ``length`` bytes of ``key`` from ``position``, one GET (the caller holds the
        lock and copies them out before it lets go)."""
        check_key(key)
        check_range(position, length, key=key)
        self._request("GET")
        data = self._get(key)
        if position >= len(data):
            raise ReadPastEndError(
                f"read of {key!r} at {position} is past its end ({len(data)} bytes)", key=key
            )
        return memoryview(data)[position : position + length]

    def append(self, key: str, data: BytesLike, position: int) -> int:
        check_key(key)
        check_range(position, key=key)
        view = as_bytes_view(data)
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                if position != 0:
                    raise SegmentNotFoundError(
                        f"append to absent object {key!r} at {position}; create it at position 0",
                        key=key,
                    )
                self._request("PUT")
                self._objects[key] = bytearray(view)
                return len(view)
            if key in self._sealed:
                raise SegmentSealedError(f"object {key!r} is sealed; start a new segment", key=key)
            if position != len(current):
                raise PositionMismatchError(
                    f"append to {key!r} at {position}, but it holds {len(current)} bytes",
                    key=key,
                    expected=len(current),
                    given=position,
                )
            self._request("PUT")
            current += view
            return len(current)

    def seal(self, key: str) -> None:
        check_key(key)
        with self._lock:
            self._request("HEAD")
            self._get(key)
            self._sealed.add(key)

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        check_key(key)
        content = bytearray(read_payload(data))
        with self._lock:
            if not overwrite and key in self._objects:
                raise SegmentExistsError(
                    f"object {key!r} exists; pass overwrite=True to replace", key=key
                )
            self._request("PUT")
            self._objects[key] = content
            self._sealed.add(key)

    def delete(self, key: str) -> None:
        check_key(key)
        with self._lock:
            self._request("DELETE")
            self._objects.pop(key, None)
            self._sealed.discard(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        check_prefix(prefix)
        with self._lock:
            self._request("LIST")
            found = sorted(k for k in self._objects if k.startswith(prefix))
        return iter(found)

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        check_prefix(prefix)
        with self._lock:
            self._request("LIST")
            found = sorted((k, len(v)) for k, v in self._objects.items() if k.startswith(prefix))
        return iter(found)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = super().__getstate__()
            state["_objects"] = {k: bytearray(v) for k, v in self._objects.items()}
            state["_sealed"] = set(self._sealed)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.Lock()
