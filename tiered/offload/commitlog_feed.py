"""Which queues moved, learned from the commitlog as the broker's reput service learns it.

Looking at every queue's consumequeue on every dispatch pass costs a read per queue per pass
whether anything moved or not. :class:`CommitlogFeed` instead follows the commitlog from a message
boundary: each :meth:`~CommitlogFeed.poll` reads the bytes written since, and the compiled kernel
walks their message headers (``walk_commitlog``) and names the queues they went to with the
highest queue offset seen; a poll with nothing new costs one small read. inotify cannot stand in
for this: the broker writes through mapped files, which raise no events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from tiered import _kernel
from tiered.broker.commitlog import CommitLog
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.errors import StoreFileNotFoundError

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20
"""Commitlog bytes read and walked at once."""
POLL_BYTES = 256 << 20
"""Bytes one poll walks at most (the rest at the next poll): a poll stays well under a second."""
STUCK_S = 60.0
"""A message that stays torn this long is damage, not a write in progress: the feed gives up."""


@dataclass
class Moved:
    """What one poll found: ``(topic, queue id) -> max queue offset + 1`` of the messages
    walked, how many, and their bytes; and the commitlog offset and store time of each queue's
    first message walked in each chunk (``first_offsets``, ascending, and ``first_times``: a
    store time a dispatch pass need not read again)."""

    queues: dict[tuple[str, int], int] = field(default_factory=dict)
    messages: int = 0
    bytes: int = 0
    first_offsets: list[int] = field(default_factory=list)
    first_times: list[int] = field(default_factory=list)


class CommitlogFeed:
    """Follows one broker's commitlog (see the module docstring); one thread at a time."""

    def __init__(self, commitlog: CommitLog, clock: Callable[[], float] = time.monotonic) -> None:
        self.commitlog = commitlog
        self.clock = clock
        self.position: int | None = None
        """The physical offset of the next message to walk; None: not following."""
        self._torn: tuple[int, float] | None = None  # where a torn message was first seen, when

    def start(self, position: int) -> None:
        """Follow from ``position``, a message boundary (the end of a message the consumequeues
        hold): every message written after it will be walked."""
        self.position, self._torn = position, None

    def stop(self) -> None:
        self.position, self._torn = None, None

    def poll(self) -> Moved | None:
        """The queues the messages written since the last poll went to; None when the feed
        cannot tell -- it then stops until :meth:`start`, and the dispatcher looks at every
        queue's consumequeue meanwhile.

        The walk stops before a message that does not add up (the broker is writing it, or it is
        damaged) and starts there at the next poll; at a file's filler it goes on at the next
        file. The feed gives up when it was never started, when the broker deleted the file it
        is in, or when the same message stays torn for :data:`STUCK_S` (a damaged file)."""
        if self.position is None:
            return None
        moved = Moved()
        while moved.bytes < POLL_BYTES:
            step = self._step(moved)
            if step is None:
                self.stop()
                return None
            if not step:
                break
        return moved

    def _step(self, moved: Moved) -> bool | None:
        """Walk one chunk: whether to go on, or None to give up."""
        assert self.position is not None
        position = self.position
        try:
            f = self.commitlog.file_for(position)
        except OffsetNotInStoreError:
            self.commitlog.refresh()
            files = self.commitlog.files
            if files and files[0].base <= position <= files[-1].end:
                if position == files[-1].end:
                    return False  # the next file is not created yet: nothing written
                try:
                    f = self.commitlog.file_for(position)
                except OffsetNotInStoreError:
                    return None  # a hole in the file list
            else:
                if files and position < files[0].base:
                    log.info("commitlog feed: the broker deleted the file holding physical "
                             "offset %d; every queue is looked at again", position)  # fmt: skip
                return None
        chunk = min(CHUNK_BYTES, f.end - position)
        while True:
            try:
                data = self.commitlog.read(position, chunk)
            except (StoreFileNotFoundError, OffsetNotInStoreError, CorruptStoreFileError):
                return None  # deleted or truncated under us
            consumed, messages, stop, queues = _kernel.walk_commitlog(data)
            if consumed or stop != "more" or chunk == f.end - position:
                break
            chunk = min(chunk * 4, f.end - position)  # a message longer than the chunk
        firsts = []
        for topic, queue_id, end, at, stamp in queues:
            try:
                key = (topic.decode(), queue_id)
            except UnicodeDecodeError:
                continue  # not a topic the broker could have created
            if end > moved.queues.get(key, -1):
                moved.queues[key] = end
            firsts.append((position + at, stamp))
        firsts.sort()
        moved.first_offsets += [at for at, _ in firsts]
        moved.first_times += [stamp for _, stamp in firsts]
        moved.messages += messages
        moved.bytes += consumed
        self.position = position + consumed
        if stop == "blank" or self.position >= f.end:
            self.position = f.end  # the filler: the next message starts the next file
            self._torn = None
            return True
        if stop == "more" and consumed:
            self._torn = None
            return True
        if stop == "torn" or (stop == "more" and not consumed):
            return self._stalled()
        self._torn = None
        return False  # unwritten: caught up

    def _stalled(self) -> bool | None:
        """A message at the position does not add up: wait for the broker to finish it, or
        give up once it stayed so for :data:`STUCK_S`."""
        assert self.position is not None
        now = self.clock()
        if self._torn is None or self._torn[0] != self.position:
            self._torn = (self.position, now)
            return False
        if now - self._torn[1] < STUCK_S:
            return False
        log.warning(
            "commitlog feed: the message at physical offset %d has not added up for %.0f s "
            "(damaged?); every queue's consumequeue is looked at instead until the feed starts "
            "again past it",
            self.position,
            now - self._torn[1],
        )
        return None
