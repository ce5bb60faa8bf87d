"""Key queries across index files, resolved to the messages they point at (spec §6.6, §6.8).

Files are searched newest first: the local ones (UNSEALED, SEALED) and then the uploaded ones (at
most two ranged reads each). An item matches by hash, store time and topic id; it is then read
from its queue's flat commitlog and kept only if the message really is that topic's message with
that key at that offset -- hash collisions within a topic and items left by a crash (a range that
was indexed twice, or cut and uploaded again) never reach the caller. Results are deduplicated by
``(queueId, offset)`` and returned newest (by store time) first.

Unlike upstream, which searches only files whose *begin* timestamp lies in the query range, every
file that can hold a match is searched: a file holds items up to its end timestamp, and items
older than its begin (a backlog offloaded late), so only files whose newest item predates the
range are skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tiered import metrics
from tiered.broker import message as msgcodec
from tiered.errors import CorruptStoreFileError
from tiered.errors import IntegrityError
from tiered.index.format import IndexItem
from tiered.index.format import KeyQuery
from tiered.index.key_set import key_set

log = logging.getLogger(__name__)

ReadUnit = Callable[[str, int, int, int], bytes | None]
"""``read(topic, queue id, flat offset, size)``: the stored unit, or None when the tier no longer
(or not yet) holds it."""


class Searchable(Protocol):
    """What the search needs of an index file (local or uploaded)."""

    @property
    def begin_timestamp(self) -> int: ...

    @property
    def end_timestamp(self) -> int: ...

    def query(self, q: KeyQuery) -> list[IndexItem]: ...


@dataclass(frozen=True)
class KeyHit:
    """One message found by key: where it is in the tier and its stored bytes."""

    topic: str
    queue_id: int
    offset: int  # in the queue's flat commitlog
    size: int
    store_timestamp: int
    data: bytes


def may_hold(f: Searchable, begin_ms: int) -> bool:
    """Whether ``f`` can hold an item stored at ``begin_ms`` or later."""
    return max(f.begin_timestamp, f.end_timestamp) >= begin_ms


def message_keys(m: msgcodec.Message) -> set[str]:
    """The keys a message is indexed under (``UNIQ_KEY`` and the ``KEYS`` tokens)."""
    props = m.properties
    return set(key_set(props.get(msgcodec.PROPERTY_UNIQ_KEY), props.get(msgcodec.PROPERTY_KEYS)))


class Collector:
    """Resolves items to hits until ``max_count`` distinct messages are found."""

    def __init__(self, topic: str, key: str, max_count: int, read: ReadUnit) -> None:
        self.topic = topic
        self.key = key
        self.max_count = max_count
        self.read = read
        self.hits: list[KeyHit] = []
        self.items = 0
        self._seen: set[tuple[int, int]] = set()

    @property
    def full(self) -> bool:
        """Whether ``max_count`` messages were found."""
        return len(self.hits) >= self.max_count

    def add(self, items: Iterable[IndexItem]) -> bool:
        """Resolve ``items`` (newest first); returns :attr:`full`.

        Raises:
            IntegrityError: a message read back fails its body CRC.
        """
        for item in items:
            if self.full:
                break
            where = (item.queue_id, item.offset)
            if where in self._seen:
                continue
            self._seen.add(where)
            self.items += 1
            data = self.read(self.topic, item.queue_id, item.offset, item.size)
            if data is None:
                continue
            m = self._check(item, data)
            if m is not None:
                hit = KeyHit(self.topic, item.queue_id, item.offset, item.size,
                             m.store_timestamp, data)  # fmt: skip
                self.hits.append(hit)
        return self.full

    def _check(self, item: IndexItem, data: bytes) -> msgcodec.Message | None:
        try:
            m = msgcodec.decode(data)
        except CorruptStoreFileError:
            log.debug("index item %s points at no message: stale, skipped", item)
            return None
        if (
            m.total_size != item.size
            or m.physical_offset != item.offset
            or m.queue_id != item.queue_id
            or m.topic != self.topic
            or self.key not in message_keys(m)
        ):
            return None  # a hash collision, or an item of data the tier no longer holds
        if not m.crc_ok:
            labels = metrics.queue_labels(self.topic, item.queue_id)
            metrics.child(metrics.READ_CRC_FAILURES, *labels).inc()
            raise IntegrityError(
                f"{self.topic}/{item.queue_id}: the message at flat commitlog offset "
                f"{item.offset} fails its body CRC; the tier holds damaged data",
                offset=item.offset,
            )
        return m

    def result(self) -> list[KeyHit]:
        """The hits, newest store time first."""
        return sorted(self.hits, key=lambda h: -h.store_timestamp)


def newest_first(files: Sequence[Searchable], begin_ms: int) -> list[Searchable]:
    """The files that may hold a match, newest (by begin timestamp) first."""
    found = [f for f in files if may_hold(f, begin_ms)]
    return sorted(found, key=lambda f: -f.begin_timestamp)
