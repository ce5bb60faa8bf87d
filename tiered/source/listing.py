"""Whether a directory listing still holds, told by the directories' mtimes: a running
sidecar lists a broker's commitlog and consumequeue directories again only when something in
them came or went."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

SETTLED_NS = 2_000_000_000
"""A directory listing is reused while the directory's mtime is unchanged, once that mtime is
this much older than the listing (file times are coarse: an entry added in the same clock tick
as the last change leaves the mtime as it was)."""


class Listing:
    """Whether a listing of some directories still holds: their mtimes and inodes (and the sizes
    and inodes of ``files``) as they were just after it, kept only when every directory's mtime
    is :data:`SETTLED_NS` old (a change while listing, or in the same clock tick as one, is then
    seen at the next look)."""

    def __init__(self) -> None:
        self._paths: tuple[list[str], list[str]] = ([], [])
        self._stamps: list[tuple[int, int] | None] | None = None

    def listed(self, dirs: list[str], files: Sequence[str] = ()) -> None:
        stamps = _stamps(dirs, files)
        settled = time.time_ns() - SETTLED_NS
        ok = all(st is not None for st in stamps) and all(
            st is not None and st[0] <= settled for st in stamps[: len(dirs)]
        )
        self._paths, self._stamps = (dirs, list(files)), (stamps if ok else None)

    def holds(self) -> bool:
        return self._stamps is not None and _stamps(*self._paths) == self._stamps


def _stamps(dirs: list[str], files: Sequence[str] = ()) -> list[tuple[int, int] | None]:
    """``(mtime, inode)`` of each directory, then ``(size, inode)`` of each file; None: gone."""
    out: list[tuple[int, int] | None] = []
    for i, path in enumerate((*dirs, *files)):
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_mtime_ns if i < len(dirs) else st.st_size, st.st_ino))
    return out
