"""Metric labels from names a request brings, kept bounded: no label from a stranger.

A topic a request names becomes a label value only when the sidecar already knows it: the tier
holds it (a topic record in the metadata) or the broker's store does (a directory under its
``consumequeue`` directory). Anything else is counted under :data:`tiered.metrics.OTHER_LABEL`,
so requests for made-up names add no series to ``/metrics`` and no children to
:func:`tiered.metrics.child`'s memo. The listing of known topics is cached for
:data:`KNOWN_TOPICS_TTL_S`: a flood of unknown names costs one directory read per period, not
one per request (a topic created meanwhile gets its own label at the next listing).

An unknown name is logged at most once per name a minute (:class:`UnknownNames`), with at most
:data:`MAX_LOGGED_NAMES` names remembered; past that, one summary line a minute counts the rest.
The other request-derived labels are bounded where they are made: request codes
(:func:`tiered.remoting.codes.code_name`, ``OTHER``), HTTP routes (the path template,
:mod:`tiered.http.accounting`, ``other``). Consumer groups are no label at all.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from cachetools import TTLCache

from tiered.metrics import OTHER_LABEL
from tiered.metrics import topic_label

__all__ = [
    "KNOWN_TOPICS_TTL_S",
    "MAX_LOGGED_NAMES",
    "UNKNOWN_TOPICS",
    "UNKNOWN_WINDOW_S",
    "KnownTopics",
    "UnknownNames",
]

log = logging.getLogger(__name__)

KNOWN_TOPICS_TTL_S: Final = 3.0
"""How long a listing of the known topics is reused before an unknown name re-reads it."""
UNKNOWN_WINDOW_S: Final = 60.0
"""An unknown name is logged at most once per this period."""
MAX_LOGGED_NAMES: Final = 1024
"""Unknown names remembered (so not logged again) per period; more are only counted."""

Clock = Callable[[], float]


class UnknownNames:
    """Logs requests naming a ``kind`` (topic, group) that does not exist: each name at most once
    per ``window_s``, at most ``max_names`` names a period, then one line per period counting the
    names not logged (thread-safe, memory bounded by ``max_names``)."""

    def __init__(
        self,
        kind: str,
        *,
        window_s: float = UNKNOWN_WINDOW_S,
        max_names: int = MAX_LOGGED_NAMES,
        clock: Clock = time.monotonic,
    ) -> None:
        self.kind = kind
        self.window_s = window_s
        self.clock = clock
        self._logged: TTLCache[str, None] = TTLCache(max_names, window_s, timer=clock)
        self._lock = threading.Lock()
        self._unlogged = 0
        self._next_summary = float("-inf")

    def __len__(self) -> int:
        with self._lock:
            return len(self._logged)

    def note(self, name: str) -> None:
        """A request named ``name``, which does not exist: log it unless logged lately."""
        with self._lock:
            if name in self._logged:
                return
            self._logged.expire()
            if len(self._logged) < self._logged.maxsize:
                self._logged[name] = None
                summary = 0
            else:
                self._unlogged += 1
                now = self.clock()
                if now < self._next_summary:
                    return
                summary, self._unlogged = self._unlogged, 0
                self._next_summary = now + self.window_s
        if summary:
            log.info(
                "%d more request(s) named %ss that do not exist, not logged one by one (over %d "
                "names within %.0f s); metrics count them as %s",
                summary,
                self.kind,
                self._logged.maxsize,
                self.window_s,
                OTHER_LABEL,
            )
        else:
            log.info(
                "a request named %s %r, which does not exist here; metrics count it as %s "
                "(logged once per %.0f s per name)",
                self.kind,
                name,
                OTHER_LABEL,
                self.window_s,
            )


UNKNOWN_TOPICS: Final = UnknownNames("topic")
"""The process's log of requested topics that neither the tier nor the broker's store holds."""


class KnownTopics:
    """The topics the sidecar knows: ``tier_topics()`` (what the tier holds) and the topic
    directories under ``consume_queue_dir`` (what the broker's store holds), listed at most once
    per ``ttl_s`` (thread-safe)."""

    def __init__(
        self,
        tier_topics: Callable[[], Iterable[str]],
        consume_queue_dir: Path,
        *,
        ttl_s: float = KNOWN_TOPICS_TTL_S,
        clock: Clock = time.monotonic,
        unknown: UnknownNames = UNKNOWN_TOPICS,
    ) -> None:
        self.tier_topics = tier_topics
        self.consume_queue_dir = consume_queue_dir
        self.ttl_s = ttl_s
        self.clock = clock
        self.unknown = unknown
        self._topics: frozenset[str] = frozenset()
        self._expires = float("-inf")
        self._lock = threading.Lock()
        self.listings = 0

    def _listing(self) -> frozenset[str]:
        """The cached listing, re-read when older than ``ttl_s`` (by one thread; the others
        keep using the previous one meanwhile)."""
        if self.clock() < self._expires:
            return self._topics
        if not self._lock.acquire(blocking=not self.listings):  # the first listing: wait
            return self._topics
        try:
            if self.clock() >= self._expires:
                found = set(self.tier_topics())
                try:
                    with os.scandir(self.consume_queue_dir) as entries:
                        found.update(e.name for e in entries if e.is_dir())
                except OSError:
                    pass  # no broker store (yet): the tier's topics alone
                self._topics = frozenset(found)
                self._expires = self.clock() + self.ttl_s
                self.listings += 1
            return self._topics
        finally:
            self._lock.release()

    def known(self, topic: str) -> bool:
        """Whether the tier or the broker's store holds ``topic`` (as of the last listing)."""
        return topic in self._topics or topic in self._listing()

    def label(self, topic: str) -> str:
        """``topic`` as a metric label value: itself when known, else :data:`OTHER_LABEL` (and
        the name logged, rate-limited)."""
        if self.known(topic):
            return topic_label(topic)
        self.unknown.note(topic)
        return OTHER_LABEL
