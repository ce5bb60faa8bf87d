"""The cyclic garbage collector paused while a process makes thousands of short-lived objects."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off meanwhile (with ``pause``; nothing is done when it is
    already off). A wide dispatch round, a ``status`` of thousands of queues: their plans, rows
    and copies are hundreds of thousands of objects that make next to no cycles and are freed
    by reference counting at the end, yet every collection meanwhile walks them again, and
    soon one runs over every object of the process (every queue's records: most of a second at
    16,000 queues). Any cycle waits for the next collection."""
    if not (pause and gc.isenabled()):
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
