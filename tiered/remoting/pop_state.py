"""POP consumption as the broker keeps it, for a read-only tier: leases, acks and progress.

A POP consumer (every RocketMQ 5 gRPC client through a proxy, and a remoting consumer switched
to POP) never owns a queue: each ``POP_MESSAGE`` leases messages for an invisible time, an ack
ends the lease for good, and a lease that runs out makes the message visible again (at least
once). The broker writes checkpoints and retry-topic copies for this; the replay endpoint writes
nothing to the broker, so the state lives here, per ``(group, topic, queue)``:

* ``progress`` -- every offset below it is acked (or dead-lettered): the group's consumed offset,
  reported as its consumer offset;
* ``cursor`` -- the first offset never delivered;
* for each offset in ``[progress, cursor)``: acked, or leased until a deadline (epoch ms) with the
  number of deliveries so far (``reconsumeTimes`` is that minus one).

Memory is bounded: a queue holds at most :data:`WINDOW` offsets between ``progress`` and
``cursor`` -- a consumer that never acks stops receiving new messages of that queue once its
window is full (it still receives the expired ones again) -- and at most :data:`MAX_QUEUES`
queues are kept (pops of a queue beyond that are refused, see :class:`PopStateFullError`).

A message delivered ``max_redeliveries + 1`` times and still not acked when its lease runs out is
dead-lettered: the broker would write it to ``%DLQ%group``; here it is recorded (the latest
:data:`DLQ_KEPT` per group and topic, and a count), never written, and counts as consumed. So is a
message in flight that the consumer gives up on (``CONSUMER_SEND_MSG_BACK``, which names it by
its commitlog offset: each lease keeps the one of its message, :meth:`PopState.find`).

Deadlines are wall-clock milliseconds (``popTime`` is, and they survive a restart): a clock that
jumps forward makes leases run out early (delivered again: at least once), one that jumps back
holds them longer; neither ever redelivers an acked message.

The state (and the request modes ``mqadmin setConsumeMode`` sets, :mod:`.assignment`) is written
to ``{tieredDataDir}/config/replayPopState.json`` as the other state files
(:class:`~tiered.metadata.state_file.JsonStateFile`: atomic, ``.bak``, a damaged pair moved
aside) by :meth:`PopState.flush`, which ``run`` calls every second and at shutdown: a restart
keeps every ack written and leases in flight run out as they would have (delivered again); a
``kill -9`` loses at most the last second's acks (those messages are delivered again). When both
files are damaged the groups start over from their committed consumer offsets.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from tiered.errors import PopStateFullError
from tiered.metadata.state_file import JsonStateFile

POP_STATE_FILE = "replayPopState.json"
VERSION = 1
WINDOW = 4096
"""Offsets at most between a queue's progress and its cursor (acked or leased)."""
MAX_QUEUES = 65_536
"""``(group, topic, queue)`` states at most."""
MAX_REQUEST_MODES = 4096
"""(topic, group) request modes at most (``SET_MESSAGE_REQUEST_MODE``)."""
DLQ_KEPT = 256
"""Dead-lettered offsets remembered per group and topic (the count is kept in full)."""
MAX_REDELIVERIES = 16
"""The broker's default ``retryMaxTimes`` of a subscription group."""

Key = tuple[str, str, int]
"""``(group, topic, queue id)``."""


@dataclass(slots=True)
class Lease:
    """An offset delivered and not acked: visible again at ``deadline`` (epoch ms); ``phys`` is
    its message's commitlog offset (-1: not known)."""

    deadline: int
    deliveries: int
    phys: int = -1


@dataclass(slots=True)
class Claim:
    """What one pop of one queue hands out: offsets delivered again (``offset -> deliveries``
    including this one) and, when ``new_from`` is not None, up to ``new_max`` messages to read
    from ``new_from`` (then :meth:`PopState.delivered` or :meth:`PopState.release`)."""

    key: Key
    pop_time: int
    deadline: int
    again: dict[int, int] = field(default_factory=dict)
    new_from: int | None = None
    new_max: int = 0


@dataclass(slots=True)
class _Queue:
    progress: int
    cursor: int
    acked: set[int] = field(default_factory=set)
    leases: dict[int, Lease] = field(default_factory=dict)
    reading: bool = False  # a pop reads new messages from the cursor right now

    def size(self) -> int:
        return len(self.acked) + len(self.leases)

    def advance(self) -> None:
        """Move progress past the acked offsets at its head."""
        while self.progress in self.acked:
            self.acked.discard(self.progress)
            self.progress += 1


@dataclass(slots=True)
class DeadLetters:
    """A group's dead-lettered messages of one topic: how many, and the latest ones."""

    count: int = 0
    latest: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=DLQ_KEPT))


class PopState:
    """POP leases, acks and progress of every ``(group, topic, queue)`` (thread-safe).

    ``start(key)`` gives the offset a queue never popped starts from (the group's committed
    offset, else ``tieredRemotingNewGroupOffset``'s); ``on_progress(key, offset)`` is told when a
    queue's progress moves (the replay endpoint commits it as the group's consumer offset)."""

    def __init__(
        self,
        config_dir: Path | None,
        *,
        window: int = WINDOW,
        max_queues: int = MAX_QUEUES,
    ) -> None:
        self.window = window
        self.max_queues = max_queues
        self._file = (
            None
            if config_dir is None
            else JsonStateFile(
                Path(config_dir) / POP_STATE_FILE,
                VERSION,
                _parse,
                "POP groups start again from their committed consumer offsets (messages in "
                "flight or acked above them are delivered again)",
            )
        )
        self._queues: dict[Key, _Queue] = {}
        self._dlq: dict[tuple[str, str], DeadLetters] = {}
        self._moved: dict[Key, int] = {}
        self._modes: dict[tuple[str, str], tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._dirty = False

    @property
    def path(self) -> Path | None:
        return None if self._file is None else self._file.path

    # --- the state machine ------------------------------------------------------------------------

    def claim(
        self,
        key: Key,
        *,
        start: int,
        now: int,
        invisible_ms: int,
        max_count: int,
        max_offset: int,
        orderly: bool = False,
        max_redeliveries: int = MAX_REDELIVERIES,
        new: bool = True,
    ) -> Claim | None:
        """Lease up to ``max_count`` messages of ``key``'s queue (whose messages end before
        ``max_offset``) until ``now + invisible_ms``: the expired leases first (lowest offsets
        first; those past ``max_redeliveries`` dead-lettered instead), then new messages from the
        cursor unless another pop is reading them, the window is full or, ``orderly``, the queue
        still has a lease in flight (then nothing at all), or not ``new`` (expired leases
        only). A queue never popped starts at ``start``. None when there is nothing to hand
        out.

        Raises:
            PopStateFullError: the queue is new and :data:`MAX_QUEUES` are tracked.
        """
        deadline = now + max(invisible_ms, 0)
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                if len(self._queues) >= self.max_queues:
                    raise PopStateFullError(
                        f"POP state of {self.max_queues} queues is full: group {key[0]!r} cannot "
                        f"start on {key[1]}/{key[2]} (ack or delete groups' state)"
                    )
                q = self._queues[key] = _Queue(start, start)
                self._dirty = True
            if orderly and any(lease.deadline > now for lease in q.leases.values()):
                return None
            claim = Claim(key, now, deadline)
            expired = sorted(o for o, lease in q.leases.items() if lease.deadline <= now)
            for offset in expired:
                lease = q.leases[offset]
                if lease.deliveries > max_redeliveries:
                    self._letter(key, q, offset)
                    continue
                if len(claim.again) < max_count:
                    lease.deliveries += 1
                    lease.deadline = deadline
                    claim.again[offset] = lease.deliveries
                    self._dirty = True
            self._advance(key, q)
            room = min(max_count - len(claim.again), self.window - (q.cursor - q.progress))
            if (
                new
                and room > 0
                and not q.reading
                and q.cursor < max_offset
                and not (orderly and claim.again)
            ):
                q.reading = True
                claim.new_from, claim.new_max = q.cursor, room
            if not claim.again and claim.new_from is None:
                return None
            return claim

    def delivered(
        self, claim: Claim, offsets: list[int], next_offset: int, phys: list[int] | None = None
    ) -> None:
        """The new messages ``claim`` read: ``offsets`` handed out (leased; ``phys`` their
        commitlog offsets), the ones between ``claim.new_from`` and ``next_offset`` not among
        them filtered out (consumed)."""
        assert claim.new_from is not None
        with self._lock:
            q = self._queues[claim.key]
            q.reading = False
            if next_offset <= q.cursor:
                return
            at_phys = phys if phys is not None else [-1] * len(offsets)
            chosen = dict(zip(offsets, at_phys, strict=True))
            for offset in range(q.cursor, next_offset):
                at = chosen.get(offset)
                if at is not None:
                    q.leases[offset] = Lease(claim.deadline, 1, at)
                else:
                    q.acked.add(offset)
            q.cursor = next_offset
            self._advance(claim.key, q)
            self._dirty = True

    def release(self, claim: Claim) -> None:
        """``claim``'s read of new messages failed: the next pop reads them."""
        with self._lock:
            q = self._queues.get(claim.key)
            if q is not None:
                q.reading = False

    def ack(self, key: Key, offset: int) -> bool:
        """End ``offset``'s lease for good; whether it was leased (an ack of an offset acked
        before, never delivered or unknown changes nothing)."""
        with self._lock:
            q = self._queues.get(key)
            if q is None or q.leases.pop(offset, None) is None:
                return False
            q.acked.add(offset)
            self._advance(key, q)
            self._dirty = True
            return True

    def find(self, group: str, topic: str | None, phys: int) -> list[tuple[Key, int]]:
        """The queue and offset of each of ``group``'s messages in flight (leased) whose
        commitlog offset is ``phys``, in ``topic`` (None: any topic). More than one when
        messages served from the tier share it: their offsets in their queues' flat commitlogs
        are per queue."""
        found = []
        with self._lock:
            for key, q in self._queues.items():
                if key[0] != group or (topic is not None and key[1] != topic):
                    continue
                found += [(key, offset) for offset, lease in q.leases.items() if lease.phys == phys]
        return found

    def popped(self, group: str, topic: str | None) -> bool:
        """Whether ``group`` popped ``topic`` (None: any topic) since its state was kept."""
        with self._lock:
            return any(k[0] == group and (topic is None or k[1] == topic) for k in self._queues)

    def dead_letter(self, key: Key, offset: int) -> bool:
        """Dead-letter ``offset`` now (its consumer gave up on it); whether it was leased."""
        with self._lock:
            q = self._queues.get(key)
            if q is None or offset not in q.leases:
                return False
            self._letter(key, q, offset)
            self._advance(key, q)
            return True

    def _letter(self, key: Key, q: _Queue, offset: int) -> None:
        del q.leases[offset]
        q.acked.add(offset)
        letters = self._dlq.setdefault((key[0], key[1]), DeadLetters())
        letters.count += 1
        letters.latest.append((key[2], offset))
        self._dirty = True

    def change_invisible(self, key: Key, offset: int, now: int, invisible_ms: int) -> bool:
        """Make ``offset`` visible again at ``now + invisible_ms`` (0: at once); whether it is
        leased (False for an acked or unknown offset)."""
        with self._lock:
            q = self._queues.get(key)
            lease = None if q is None else q.leases.get(offset)
            if lease is None:
                return False
            lease.deadline = now + max(invisible_ms, 0)
            self._dirty = True
            return True

    def _advance(self, key: Key, q: _Queue) -> None:
        before = q.progress
        q.advance()
        if q.progress != before:
            self._moved[key] = q.progress

    # --- what it holds ----------------------------------------------------------------------------

    def take_progress(self) -> dict[Key, int]:
        """The queues whose progress moved since the last call, and where it is now."""
        with self._lock:
            moved = dict(self._moved)
            self._moved.clear()
            return moved

    def progress(self, key: Key) -> int | None:
        """``key``'s progress: every offset below it acked; None for a queue never popped."""
        with self._lock:
            q = self._queues.get(key)
            return None if q is None else q.progress

    def cursor(self, key: Key) -> int | None:
        """``key``'s first offset never delivered; None for a queue never popped."""
        with self._lock:
            q = self._queues.get(key)
            return None if q is None else q.cursor

    def due(self, key: Key, now: int, max_offset: int, *, orderly: bool = False) -> bool:
        """Whether a pop of ``key`` may hand something out now: a lease ran out, or new
        messages below ``max_offset`` fit the window (a queue never popped: any message), and,
        ``orderly``, no lease is in flight."""
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                return max_offset > 0
            if orderly and any(lease.deadline > now for lease in q.leases.values()):
                return False
            if any(lease.deadline <= now for lease in q.leases.values()):
                return True
            return q.cursor < max_offset and q.cursor - q.progress < self.window

    def in_flight(self, key: Key, now: int) -> int:
        """Offsets of ``key`` leased and not yet visible again."""
        with self._lock:
            q = self._queues.get(key)
            return 0 if q is None else sum(1 for x in q.leases.values() if x.deadline > now)

    def lease(self, key: Key, offset: int) -> Lease | None:
        with self._lock:
            q = self._queues.get(key)
            lease = None if q is None else q.leases.get(offset)
            return None if lease is None else Lease(lease.deadline, lease.deliveries, lease.phys)

    def entries(self) -> int:
        """Offsets held over every queue (acked above progress, and leased)."""
        with self._lock:
            return sum(q.size() for q in self._queues.values())

    def queues(self) -> Iterator[Key]:
        with self._lock:
            keys = list(self._queues)
        yield from keys

    def dead_letters(self, group: str, topic: str) -> tuple[int, list[tuple[int, int]]]:
        """How many of ``group``'s messages of ``topic`` were dead-lettered, and the latest
        ``(queue id, offset)`` of them."""
        with self._lock:
            letters = self._dlq.get((group, topic))
            return (0, []) if letters is None else (letters.count, list(letters.latest))

    def dead_letter_table(self) -> list[tuple[str, str, int, list[tuple[int, int]]]]:
        """Every ``(group, topic, count, latest (queue id, offset))`` with dead letters, sorted."""
        with self._lock:
            return [
                (group, topic, x.count, list(x.latest))
                for (group, topic), x in sorted(self._dlq.items())
                if x.count
            ]

    def dead_letter_total(self) -> int:
        with self._lock:
            return sum(x.count for x in self._dlq.values())

    def set_request_mode(self, topic: str, group: str, mode: str, share: int) -> None:
        """``group`` reads ``topic`` by ``mode`` (PULL or POP) with ``popShareQueueNum``
        ``share``; at most :data:`MAX_REQUEST_MODES` pairs (the oldest forgotten)."""
        with self._lock:
            self._modes.pop((topic, group), None)
            self._modes[(topic, group)] = (mode, share)
            while len(self._modes) > MAX_REQUEST_MODES:
                del self._modes[next(iter(self._modes))]
            self._dirty = True

    def request_mode(self, topic: str, group: str) -> tuple[str, int] | None:
        """``(mode, popShareQueueNum)`` set for ``group`` on ``topic``, or None."""
        with self._lock:
            return self._modes.get((topic, group))

    def request_modes(self) -> list[tuple[str, str, str, int]]:
        """Every ``(topic, group, mode, popShareQueueNum)`` set, sorted."""
        with self._lock:
            return sorted((t, g, m, n) for (t, g), (m, n) in self._modes.items())

    def forget(self, group: str) -> None:
        """Drop every queue of ``group`` (its progress stays its committed offset)."""
        with self._lock:
            for key in [k for k in self._queues if k[0] == group]:
                del self._queues[key]
            self._dirty = True

    # --- the file ---------------------------------------------------------------------------------

    def load(self, *, owner: bool = True) -> None:
        """Read the file (or its ``.bak``); see the module docstring for a damaged pair.

        Raises:
            OSError: a file exists but cannot be read.
        """
        if self._file is None:
            return
        loaded = self._file.load(owner=owner)
        queues, dlq, modes = loaded if loaded is not None else ({}, {}, {})
        with self._lock:
            self._queues, self._dlq, self._modes = queues, dlq, modes
            self._dirty = False

    def flush(self) -> bool:
        """Write the state if it changed since the last flush; whether it wrote.

        Raises:
            OSError: the write failed (the state stays dirty and is written next time).
        """
        if self._file is None:
            return False
        with self._write_lock:
            with self._lock:
                if not self._dirty:
                    return False
                body = _dump(self._queues, self._dlq, self._modes)
                self._dirty = False
            try:
                self._file.save(body)
            except OSError:
                with self._lock:
                    self._dirty = True
                raise
            return True


def _runs(offsets: list[int]) -> list[list[int]]:
    """Sorted offsets as ``[first, last]`` runs (acked sets are mostly contiguous)."""
    out: list[list[int]] = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return out


def _dump(
    queues: dict[Key, _Queue],
    dlq: dict[tuple[str, str], DeadLetters],
    modes: dict[tuple[str, str], tuple[str, int]],
) -> dict[str, Any]:
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for (group, topic, queue_id), q in sorted(queues.items()):
        table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = {
            "progress": q.progress,
            "cursor": q.cursor,
            "acked": _runs(sorted(q.acked)),
            "leases": [[o, x.deadline, x.deliveries, x.phys] for o, x in sorted(q.leases.items())],
        }
    letters = {
        f"{topic}@{group}": {"count": d.count, "latest": [list(x) for x in d.latest]}
        for (group, topic), d in sorted(dlq.items())
    }
    request_modes = [[t, g, m, n] for (t, g), (m, n) in modes.items()]
    return {"queues": table, "deadLetters": letters, "requestModes": request_modes}


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is {value!r}, not an integer")
    return value


def _split(name: str) -> tuple[str, str]:
    topic, sep, group = name.partition("@")
    if not sep or not topic or not group:
        raise ValueError(f"entry {name!r} is not topic@group")
    return topic, group


_State = tuple[
    dict[Key, _Queue], dict[tuple[str, str], DeadLetters], dict[tuple[str, str], tuple[str, int]]
]


def _parse(document: dict[str, Any]) -> _State:
    queues: dict[Key, _Queue] = {}
    for name, rows in document["queues"].items():
        topic, group = _split(name)
        for queue_id, row in rows.items():
            q = _Queue(_int(row["progress"], "progress"), _int(row["cursor"], "cursor"))
            if q.cursor < q.progress:
                raise ValueError(f"{name}/{queue_id}: cursor {q.cursor} < progress {q.progress}")
            for first, last in row["acked"]:
                q.acked.update(range(_int(first, "acked"), _int(last, "acked") + 1))
            for offset, deadline, deliveries, *phys in row["leases"]:
                q.leases[_int(offset, "lease")] = Lease(
                    _int(deadline, "deadline"),
                    _int(deliveries, "deliveries"),
                    _int(phys[0], "phys") if phys else -1,
                )
            inside = all(q.progress <= o < q.cursor for o in (*q.acked, *q.leases))
            if not inside or q.acked & q.leases.keys():
                raise ValueError(f"{name}/{queue_id}: offsets outside [progress, cursor)")
            queues[(group, topic, int(queue_id))] = q
    dlq: dict[tuple[str, str], DeadLetters] = {}
    for name, row in document["deadLetters"].items():
        topic, group = _split(name)
        letters = DeadLetters(_int(row["count"], "count"))
        letters.latest.extend((_int(a, "queue"), _int(b, "offset")) for a, b in row["latest"])
        dlq[(group, topic)] = letters
    modes: dict[tuple[str, str], tuple[str, int]] = {}
    for topic, group, mode, share in document.get("requestModes", []):
        modes[(str(topic), str(group))] = (str(mode), _int(share, "popShareQueueNum"))
    return queues, dlq, modes


__all__ = ["Claim", "Lease", "PopState"]
