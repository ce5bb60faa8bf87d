"""What a broker store directory must hold, and the mapped file sizes its files were written with.

:func:`check_store` refuses a ``storePathRootDir`` that does not exist or holds neither
``commitlog/`` nor ``consumequeue/`` -- a typo must stop ``dispatch``/``run``/``status`` with a
one-line error, not offload "0 queues" and exit 0.

:func:`mapped_sizes` answers the two mapped file sizes (``mappedFileSizeCommitLog``,
``mappedFileSizeConsumeQueue``) from the files themselves: a broker preallocates every file to its
mapped size and names it by its start offset, so the step between two consecutive names (or, with
one file, its length) is the size -- and all files of a directory agree. When the keys are absent
from the configuration the files' sizes are used; when the keys disagree with the files the files
win and a warning names both values (once per process). Without files, the configured sizes stand.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Iterable
from collections.abc import Sequence
from pathlib import Path

from tiered.errors import ConfigError

log = logging.getLogger(__name__)

_OFFSET_NAME = re.compile(r"[0-9]{20}")
_CQ_UNIT = 20
_QUEUES_SAMPLED = 64
_warned: set[tuple[str, int, int]] = set()


def check_store(root: Path, commitlog_dirs: Sequence[Path], consume_queue_dir: Path) -> None:
    """Refuse a store directory that is missing or is not a broker store.

    Raises:
        ConfigError: naming the path and the fix.
    """
    if not root.is_dir():
        raise ConfigError(
            f"storePathRootDir='{root}' does not exist: point it at the broker's store (the "
            "directory holding commitlog/ and consumequeue/, storePathRootDir in broker.conf)"
        )
    if not any(d.is_dir() for d in commitlog_dirs) and not consume_queue_dir.is_dir():
        raise ConfigError(
            f"storePathRootDir='{root}' holds no commitlog/ or consumequeue/: it is not a broker "
            "store; point it at the directory the broker writes (storePathRootDir in broker.conf)"
        )


def _offset_files(directory: Path) -> list[tuple[int, int]]:
    """``(start offset, length)`` of the offset-named files of ``directory``, by offset."""
    try:
        with os.scandir(directory) as entries:
            out = [
                (int(e.name), e.stat().st_size)
                for e in entries
                if _OFFSET_NAME.fullmatch(e.name) and e.is_file()
            ]
    except OSError:
        return []
    return sorted(out)


def file_size_of(files: Iterable[tuple[int, int]]) -> int | None:
    """The mapped size a directory's ``(offset, length)`` files share: the step between
    consecutive names when there are two or more, else the single file's length; None when
    there is no file or they disagree."""
    listed = list(files)
    steps = {b[0] - a[0] for a, b in itertools.pairwise(listed)}
    lengths = {length for _, length in listed}
    if not listed:
        return None
    if steps:
        size = min(steps)
        return size if size > 0 and all(s % size == 0 for s in steps) else None
    (length,) = lengths
    return length if length > 0 else None


def _commitlog_size(dirs: Sequence[Path]) -> int | None:
    files = [f for d in dirs for f in _offset_files(d)]
    return file_size_of(sorted(files))


def _consume_queue_size(root: Path) -> int | None:
    found: set[int] = set()
    sampled = 0
    try:
        with os.scandir(root) as entries:  # thousands of topics: no Path, no stat, per topic
            names = sorted(e.name for e in entries if e.is_dir())
    except OSError:
        return None
    for name in names:
        topic = root / name
        for queue in sorted(q for q in topic.iterdir() if q.is_dir()):
            size = file_size_of(_offset_files(queue))
            if size is not None:
                found.add(size)
                sampled += 1
            if sampled >= _QUEUES_SAMPLED:
                break
        if sampled >= _QUEUES_SAMPLED:
            break
    if len(found) != 1:
        return None
    (size,) = found
    return size if size % _CQ_UNIT == 0 else None


def _resolve(key: str, configured: int, explicit: bool, found: int | None) -> int:
    if found is None or found == configured:
        return configured
    if explicit and (key, configured, found) not in _warned:
        _warned.add((key, configured, found))
        log.warning(
            "%s=%d disagrees with the broker's files, which are %d bytes each: using %d (the "
            "files are what the broker wrote); fix %s in the configuration",
            key,
            configured,
            found,
            found,
            key,
        )
    elif not explicit and (key, configured, found) not in _warned:
        _warned.add((key, configured, found))
        log.info("%s is not configured: %d bytes, from the broker's files", key, found)
    return found


def sizes_found(commitlog_dirs: Sequence[Path], consume_queue_dir: Path) -> tuple[bool, bool]:
    """Whether the commitlog's and the consumequeues' file sizes can be read off their files
    yet (a new broker has written none)."""
    return (
        _commitlog_size(commitlog_dirs) is not None,
        _consume_queue_size(consume_queue_dir) is not None,
    )


def mapped_sizes(
    commitlog_dirs: Sequence[Path],
    consume_queue_dir: Path,
    *,
    commitlog: tuple[int, bool],
    consume_queue: tuple[int, bool],
) -> tuple[int, int]:
    """``(commitlog file size, consumequeue file size)`` the store was written with; each of
    ``commitlog`` and ``consume_queue`` is ``(configured size, whether the key was set)``."""
    return (
        _resolve("mappedFileSizeCommitLog", *commitlog, _commitlog_size(commitlog_dirs)),
        _resolve(
            "mappedFileSizeConsumeQueue", *consume_queue, _consume_queue_size(consume_queue_dir)
        ),
    )
