"""The bounded read queue: at most ``tieredReadMaxPending`` cold reads wait for the backend at once.

A cold read is one the read-ahead cache cannot answer: it goes to the backend and waits there
(for the backend, or for the read quota of :mod:`tiered.providers.quota`). The HTTP API and the
replay port read through one :class:`~tiered.read.message_store.TieredMessageStore`, so one
gate bounds them together. A read that would wait behind the limit is refused at once with
:class:`~tiered.errors.ReadBusyError` rather than queued without bound (Kafka's
``remote.log.reader.max.pending.tasks``): the client backs off instead of timing out, and the
reads already admitted are not slowed down by more. Reads answered from the cache, and a reader
that waits for a window another reader is loading, never pass the gate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tiered.errors import ReadBusyError


class ReadGate:
    """Admits up to ``limit`` cold reads at a time (thread-safe)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"tieredReadMaxPending={limit!r} must be >= 1")
        self.limit = limit
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Cold reads admitted and not finished now."""
        return self._pending

    @contextmanager
    def admit(self, what: str) -> Iterator[None]:
        """Hold one place while the body reads from the backend.

        Raises:
            ReadBusyError: ``limit`` reads hold every place; ``what`` (the queue and offset)
                is named in the message.
        """
        with self._lock:
            if self._pending >= self.limit:
                raise ReadBusyError(
                    f"cold read of {what} refused: tieredReadMaxPending={self.limit} reads are "
                    "already waiting for the tier's backend; retry in a moment (or raise "
                    "tieredReadMaxPending, or tieredReadMaxBytesPerSecond if the read quota "
                    "holds them)",
                    limit=self.limit,
                )
            self._pending += 1
        try:
            yield
        finally:
            with self._lock:
                self._pending -= 1
