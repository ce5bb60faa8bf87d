"""The CPU priority of the offload's own threads (``tieredOffloadNice``).

The sidecar shares its node with the broker, and unlike the broker's in-process tieredstore
plugin it is a process of its own: its offload work can yield the CPU to the broker. On Linux
every thread has its own nice value, so the threads that only offload -- the dispatch pass, the
dispatch workers, the commit notifier that puts keys into the index, the second reader of large
commitlog ranges, the index progress saver -- raise theirs to ``tieredOffloadNice``, while the
threads that serve reads (HTTP, replay connections, prefetch) keep the process's.

A thread inherits its creator's nice value, and raising it back down needs privileges a sidecar
does not have: a pool that serves reads must never be started from an offload thread (the
dispatcher has its own commitlog reader for that reason, :mod:`tiered.broker.coalesce`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable

__all__ = ["NICE_MAX", "lower_thread_priority", "with_nice"]

log = logging.getLogger(__name__)

NICE_MAX = 19
"""The lowest priority Linux has."""
_LINUX = sys.platform == "linux"
_refused: set[int] = set()
"""Nice values a thread was refused (each logged once)."""


def lower_thread_priority(nice: int) -> None:
    """Raise the calling thread's nice value to ``nice`` (never lower it: a process started at a
    lower priority keeps it). Only on Linux, where ``setpriority`` of a thread id is one
    thread's; elsewhere nothing is changed. A refusal (a seccomp profile, say) is logged once and
    the thread runs on as it is."""
    if not _LINUX:
        return
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as e:
        if nice not in _refused:
            _refused.add(nice)
            log.warning(
                "cannot lower the offload threads' priority (tieredOffloadNice=%d): %s; they run "
                "at the process's",
                nice,
                e,
            )


def with_nice(nice: int) -> Callable[[], None]:
    """A thread pool ``initializer`` that runs its threads at ``nice``."""
    return functools.partial(lower_thread_priority, nice)
