"""Queue locks of orderly consumers (``LOCK_BATCH_MQ`` / ``UNLOCK_BATCH_MQ``), as the broker's
``RebalanceLockManager`` keeps them.

A Java consumer with a ``MessageListenerOrderly`` consumes a queue only while the broker says it
holds the queue's lock; it asks for the locks of the queues rebalancing gave it
(``RebalanceImpl.lock``), renews them every 20 s (``lockAll``) and gives them up when rebalancing
takes a queue away (``unlock``). A lock belongs to one client of a group per ``(topic, queue
id)`` -- this endpoint is one broker, so the broker name does not matter -- and lapses
:data:`LOCK_MAX_LIVE_S` after it was last taken or renewed (upstream's
``rebalance.lockMaxLiveTime``, 60 s): a consumer that died without unlocking holds its queues
that long. Another client of the group is refused a queue whose lock is live; locks of different
groups never meet. Kept in memory only, as the broker does: after a restart the consumers'
next ``lockAll`` takes them again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Iterable

LOCK_MAX_LIVE_S = 60.0


class RebalanceLocks:
    """``(group, topic, queue id) -> (client id, last renewed)`` (thread-safe)."""

    def __init__(
        self,
        max_live_s: float = LOCK_MAX_LIVE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_live_s = max_live_s
        self.clock = clock
        self._table: dict[tuple[str, str, int], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def try_lock(
        self, group: str, client: str, queues: Iterable[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        """Take or renew ``client``'s locks on ``queues``; the queues it now holds (a queue
        another client of ``group`` holds a live lock on is left out)."""
        now = self.clock()
        held: list[tuple[str, int]] = []
        with self._lock:
            for topic, queue_id in queues:
                key = (group, topic, queue_id)
                entry = self._table.get(key)
                if entry is None or entry[0] == client or now - entry[1] > self.max_live_s:
                    self._table[key] = (client, now)
                    held.append((topic, queue_id))
        return held

    def unlock(self, group: str, client: str, queues: Iterable[tuple[str, int]]) -> None:
        """Release ``client``'s locks on ``queues`` (another client's lock is left alone)."""
        with self._lock:
            for topic, queue_id in queues:
                key = (group, topic, queue_id)
                entry = self._table.get(key)
                if entry is not None and entry[0] == client:
                    del self._table[key]

    def holder(self, group: str, topic: str, queue_id: int) -> str | None:
        """The client holding a live lock on the queue, if any."""
        with self._lock:
            entry = self._table.get((group, topic, queue_id))
        if entry is None or self.clock() - entry[1] > self.max_live_s:
            return None
        return entry[0]
