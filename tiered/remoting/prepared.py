"""The next pull of each queue a connection pulls, read while its consumer works on this one.

A consumer catching up sends a queue's next pull as soon as it has the answer to the previous one,
from that answer's ``nextBeginOffset``, with the same batch size, subscription and byte limit
(a push consumer's ``executePullRequestImmediately``, and pull consumers looping). So when a pull
finds messages, the pull it predicts is remembered (:meth:`PreparedPulls.expect`) and read once
the connection has answered every request it holds (:meth:`PreparedPulls.prepare`); the pull that
then matches it exactly takes the result (:meth:`PreparedPulls.take`), any other request reads
and drops it. The read overlaps the consumer's work, and the sidecar reads no more: one read per
pull, done earlier. The results are views of the read-ahead cache's windows, not copies, bounded
by the constants below.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Hashable
from dataclasses import dataclass

from tiered import metrics
from tiered.read.fetcher import GetResult
from tiered.read.fetcher import GetStatus

log = logging.getLogger(__name__)

PREPARED_TTL_S = 1.0
"""A prepared result older than this is read again: a consumer that paused gets what the queue
holds when it comes back (the offsets in the answer, a segment expired meanwhile)."""
PREPARED_QUEUES = 64
"""Queues of one connection whose next pull is prepared at most (a consumer of more queues has
the most recently answered ones prepared)."""
PREPARED_MAX_BYTES = 64 << 20
"""Message bytes all prepared results of a server hold at most (:class:`PreparedBudget`): past
it nothing more is prepared."""
SWEEP_INTERVAL_S = 0.1
"""A full budget looks for stale results to drop at most this often."""

Queue = tuple[str, int]
Read = Callable[[], GetResult]


class PreparedBudget:
    """The message bytes every connection's prepared results hold (thread-safe). When a result
    does not fit, the results no pull can take any more (older than :data:`PREPARED_TTL_S`: a
    consumer that stopped pulling a queue but keeps its connection) are dropped first."""

    def __init__(
        self, max_bytes: int = PREPARED_MAX_BYTES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = max_bytes
        self._clock = clock
        self.held = 0
        self._lock = threading.Lock()
        self._holders: weakref.WeakSet[PreparedPulls] = weakref.WeakSet()
        self._swept = -SWEEP_INTERVAL_S
        # the counters' two series, resolved once with the server (not at a first use)
        self.used = metrics.child(metrics.REMOTING_PREPARED_PULLS, "used")
        self.unused = metrics.child(metrics.REMOTING_PREPARED_PULLS, "unused")

    def register(self, holder: PreparedPulls) -> None:
        with self._lock:
            self._holders.add(holder)

    def take(self, nbytes: int) -> bool:
        """Count ``nbytes`` as held; False (nothing counted) when they do not fit. A full budget
        sweeps every connection for stale results at most every :data:`SWEEP_INTERVAL_S` (not
        on every refused result: with many connections that would be a walk of all of them per
        pull)."""
        for attempt in range(2):
            with self._lock:
                if self.held + nbytes <= self.max_bytes:
                    self.held += nbytes
                    return True
                now = self._clock()
                if attempt or now - self._swept < SWEEP_INTERVAL_S:
                    return False
                self._swept = now
                holders = list(self._holders)
            for holder in holders:  # (outside the lock: dropping gives bytes back)
                holder.drop_stale()
        return False

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes


@dataclass(slots=True)
class _Ready:
    key: Hashable
    result: GetResult
    read_at: float
    nbytes: int


def _nbytes(result: GetResult) -> int:
    runs = result.runs
    return runs[0].nbytes if len(runs) == 1 else sum(r.nbytes for r in runs)


class PreparedPulls:
    """One connection's expected and prepared pulls, by queue (thread-safe: a held pull is
    answered from another thread)."""

    def __init__(self, budget: PreparedBudget, clock: Callable[[], float] = time.monotonic):
        self.budget = budget
        self._clock = clock
        self._expected: OrderedDict[Queue, tuple[Hashable, Read]] = OrderedDict()
        self._ready: dict[Queue, _Ready] = {}
        self._lock = threading.Lock()
        budget.register(self)

    def take(self, queue: Queue, key: Hashable) -> GetResult | None:
        """The prepared result of ``queue``'s pull when it is the one ``key`` names (request
        code, topic, queue, offset, batch size, subscription expression, byte limit) and fresh;
        None otherwise. Either way the queue's prepared result is gone."""
        with self._lock:
            ready = self._ready.pop(queue, None)
            self._expected.pop(queue, None)
        if ready is None:
            return None
        self.budget.give(ready.nbytes)
        used = ready.key == key and self._clock() - ready.read_at <= PREPARED_TTL_S
        (self.budget.used if used else self.budget.unused).inc()
        return ready.result if used else None

    def expect(self, queue: Queue, key: Hashable, read: Read) -> None:
        """``queue``'s next pull is likely the one ``key`` names; ``read`` reads it."""
        with self._lock:
            self._expected[queue] = (key, read)
            self._expected.move_to_end(queue)
            while len(self._expected) > PREPARED_QUEUES:
                self._expected.popitem(last=False)

    @property
    def pending(self) -> bool:
        """Whether a pull is expected and not prepared yet."""
        return bool(self._expected)

    def prepare(self) -> None:
        """Read every expected pull (the connection is about to wait for its next request).
        Nothing is prepared for a pull that found no message (long polling is unchanged), and a
        preparation that fails is dropped (the pull itself reads, and reports what it meets)."""
        while True:
            with self._lock:
                if not self._expected:
                    return
                queue, (key, read) = self._expected.popitem(last=False)
            try:
                result = read()
            except Exception as e:  # the pull itself reads again, and reports what it meets
                log.debug("preparing the next pull of %s/%d failed: %s", *queue, e)
                continue
            if result.status is not GetStatus.FOUND:
                continue
            nbytes = _nbytes(result)
            if not self.budget.take(nbytes):
                continue
            ready = _Ready(key, result, self._clock(), nbytes)
            with self._lock:
                dropped = self._ready.pop(queue, None)
                self._ready[queue] = ready
                while len(self._ready) > PREPARED_QUEUES:
                    oldest = next(iter(self._ready))
                    extra = self._ready.pop(oldest)
                    self.budget.give(extra.nbytes)
                    self.budget.unused.inc()
            if dropped is not None:
                self.budget.give(dropped.nbytes)
                self.budget.unused.inc()

    def drop_stale(self) -> None:
        """Drop the results no pull can take any more (older than :data:`PREPARED_TTL_S`)."""
        oldest = self._clock() - PREPARED_TTL_S
        with self._lock:
            stale = [q for q, r in self._ready.items() if r.read_at < oldest]
            dropped = [self._ready.pop(q) for q in stale]
        for r in dropped:
            self.budget.give(r.nbytes)
            self.budget.unused.inc()

    def clear(self) -> None:
        """Drop everything (the connection closed)."""
        with self._lock:
            ready = list(self._ready.values())
            self._ready.clear()
            self._expected.clear()
        for r in ready:
            self.budget.give(r.nbytes)
            self.budget.unused.inc()
