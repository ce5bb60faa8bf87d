"""Cold reads for benchmarks: write back, then drop the cached pages of whole directories."""

from __future__ import annotations

import os
from pathlib import Path


def drop_cache(*directories: Path | None) -> None:
    """Write back (``sync``), then drop the cached pages of every file below ``directories``
    (``POSIX_FADV_DONTNEED``); ``None`` entries are skipped."""
    os.sync()
    for d in directories:
        if d is None:
            continue
        for root, _, files in os.walk(d):
            for name in files:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
