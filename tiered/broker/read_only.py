"""Reading a broker's file without holding it open: the broker rolls and deletes its files under
us, so every read opens the file read-only, ``pread``\\ s and closes it. A file that is gone
raises the caller's error, which says what its absence means there."""

from __future__ import annotations

import os
from collections.abc import Callable


def open_read_only(path: str | os.PathLike[str], missing: Callable[[], Exception]) -> int:
    """A read-only descriptor of ``path``; ``missing()`` is raised when the file does not exist."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise missing() from e


def pread_file(
    path: str | os.PathLike[str], length: int, position: int, missing: Callable[[], Exception]
) -> bytes:
    """Up to ``length`` bytes of ``path`` at ``position`` (fewer at its end)."""
    fd = open_read_only(path, missing)
    try:
        return os.pread(fd, length, position)
    finally:
        os.close(fd)


def open_sized(path: str, file_size: int) -> int | None:
    """A read-only descriptor of the file ``path`` if it exists and is ``file_size`` bytes (what
    a listing would check); else ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size == file_size:
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def pread_exact(fd: int, position: int, length: int) -> bytes | None:
    """``length`` bytes of ``fd`` at ``position``, ``None`` when it holds fewer."""
    data = os.pread(fd, length, position)
    return data if len(data) == length else None


def read_sized_part(path: str, file_size: int, position: int, length: int) -> bytes | None:
    """``length`` bytes at ``position`` of the file ``path`` if it exists, is ``file_size``
    bytes (what a listing would check) and holds them all; else ``None``. Opened read-only,
    read, closed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size != file_size:
            return None
        data = os.pread(fd, length, position)
    finally:
        os.close(fd)
    return data if len(data) == length else None
