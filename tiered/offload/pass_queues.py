"""Which queues a dispatch pass of ``run`` looks at: the ones that moved, not all of them.

A pass of ``run`` (``follow``) looks at

- the queues the :class:`~.commitlog_feed.CommitlogFeed` saw messages for since the last pass;
- the queues with work left: a batch held for its group commit, a failed upload, a backlog
  larger than a pass sends, messages the commitlog holds and the consumequeue does not yet
  (the broker dispatches a little after it appends);
- a slice of every local queue, so each is looked at once per ``tieredStoreQueueScanIntervalMs``
  whatever the feed said: the safety net for anything the feed could not see.

The first pass, and any pass after the feed gave up, looks at every queue (as a one-off
``dispatch --once`` always does) and starts the feed at the end of the newest message the
queues' consumequeues hold. A queue that did not move costs nothing in a pass.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from tiered.errors import TieredStoreError
from tiered.offload.commitlog_feed import CommitlogFeed
from tiered.source.local_source import LocalSource
from tiered.source.topic_filter import TopicFilter

log = logging.getLogger(__name__)

GRACE_S = 60.0
"""A queue the commitlog named whose consumequeue does not show the messages (or does not exist)
for this long is dropped from the pass's list (the safety net looks at it again)."""

Key = tuple[str, int]


@dataclass(slots=True)
class _Work:
    want: int  # the queue offset the tier must reach (max queue offset + 1 the feed saw)
    since: float  # when the consumequeue was first seen behind ``want``, or added


class QueueProgress(NamedTuple):
    """What a pass left of one queue: the tier's commit offset, the local max offset it saw, and
    whether it has work left (held, failed, pending, backlog)."""

    committed: int
    local_max: int
    busy: bool


class PassQueues:
    """The queue list of each following pass (see the module docstring)."""

    def __init__(
        self,
        local: LocalSource,
        topic_filter: TopicFilter,
        *,
        scan_interval_ms: int,
        pass_interval_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.local = local
        self.filter = topic_filter
        self.feed = CommitlogFeed(local.commitlog, clock)
        self.scan_interval_ms = scan_interval_ms
        self.pass_interval_ms = pass_interval_ms
        self.clock = clock
        self.work: dict[Key, _Work] = {}
        self._scan: list[Key] = []
        self._cursor = 0

    def choose(self) -> list[Key] | None:
        """The queues this pass looks at, sorted; None: every queue (the feed is not
        following)."""
        moved = self.feed.poll()
        if moved is None:
            self.local.remember_store_times((), ())
            return None
        self.local.remember_store_times(moved.first_offsets, moved.first_times)
        now = self.clock()
        for key, want in moved.queues.items():
            if not self.filter.allows(key[0]):
                continue
            work = self.work.get(key)
            if work is None:
                self.work[key] = _Work(want, now)
            elif want > work.want:
                work.want = want
        return sorted(set(self.work).union(self._slice()))

    def _slice(self) -> list[Key]:
        """The next slice of every local queue (listed again once the last slice was taken)."""
        if self._cursor >= len(self._scan):
            self._scan = [k for k in self.local.queues() if self.filter.allows(k[0])]
            self._cursor = 0
        passes = max(self.scan_interval_ms / max(self.pass_interval_ms, 1), 1.0)
        size = max(math.ceil(len(self._scan) / passes), 1)
        part = self._scan[self._cursor : self._cursor + size]
        self._cursor += size
        return part

    def settle(self, progress: dict[Key, QueueProgress], *, listed: list[Key] | None) -> None:
        """After a pass: forget the queues it finished, keep those with work left. After a pass
        over every queue (which listed the local queues as ``listed``; None for a following
        pass), start the feed at the newest message they hold, and the scan's slices again from
        ``listed``, not a listing of their own (at 16,000 queues, a stat of every queue
        directory)."""
        if listed is not None:
            self._scan, self._cursor = listed, 0
        now = self.clock()
        for key, p in progress.items():
            work = self.work.get(key)
            want = work.want if work is not None else 0
            if not p.busy and p.committed >= max(want, p.local_max):
                self.work.pop(key, None)
            elif work is None:
                self.work[key] = _Work(p.local_max, now)
            elif want <= p.local_max:
                work.since = now  # the consumequeue holds what the commitlog showed
        for key in [k for k, w in self.work.items() if now - w.since > GRACE_S]:
            seen = progress.get(key)
            if seen is None or self.work[key].want > seen.local_max:
                log.debug("%s/%d: the commitlog showed queue offset %d, the consumequeue does "
                          "not: left to the scan", key[0], key[1], self.work[key].want)  # fmt: skip
                del self.work[key]
        if listed is not None:
            self._start_feed(progress)

    def _start_feed(self, progress: dict[Key, QueueProgress]) -> None:
        """Follow from the end of the newest message any looked-at queue holds (the first
        commitlog file's start when none holds one)."""
        newest = -1
        for (topic, queue_id), p in progress.items():
            if p.local_max <= 0:
                continue
            try:
                units = self.local.read_units(topic, queue_id, p.local_max - 1, 1)
            except (TieredStoreError, OSError):
                continue
            if len(units):
                newest = max(newest, int(units["offset"][0]) + int(units["size"][0]))
        start = newest if newest >= 0 else self.local.commitlog.min_offset
        if start >= 0:
            self.feed.start(start)
            log.debug("commitlog feed: following from physical offset %d", start)
