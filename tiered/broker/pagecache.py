"""Drop the page cache of commitlog ranges the sidecar has finished with (``posix_fadvise``).

Offloading a cold backlog reads gigabytes the broker itself no longer needs; leaving them cached
would evict the broker's hot pages. :func:`release` tells the kernel, with
``POSIX_FADV_DONTNEED``, that the sidecar is done with a range. It only drops clean cached pages
(nothing is written; the broker's dirty pages are left alone by the kernel), on files opened
``O_RDONLY``.
"""

from __future__ import annotations

import contextlib
import os

from tiered.broker.commitlog import CommitLog

ALIGN = 2 << 20
"""The largest page-cache folio (a PMD): advised ranges start on this boundary."""


def release(log: CommitLog, start: int, end: int) -> int:
    """Advise the kernel to drop cached pages of physical range ``[start, end)``.

    The start is moved down to a :data:`ALIGN` boundary: the page cache holds large folios
    (up to 2 MiB) that are dropped only when a call covers them whole, so each call also covers
    the folio the previous call ended in (advising pages already dropped costs nothing). Files
    the broker deleted meanwhile are skipped. Returns the bytes advised.
    """
    if end <= start or not hasattr(os, "posix_fadvise"):
        return 0
    advised = 0
    for f in log.files:
        lo, hi = max(start, f.base) - f.base, min(end, f.end) - f.base
        if lo >= hi:
            continue
        lo -= lo % ALIGN
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(f.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
                advised += hi - lo
            finally:
                os.close(fd)
    return advised
