"""What the dispatcher's workers hand on: the commit listeners' thread and the bytes held.

:class:`Notifier` tells the commit listeners (the key index) of each committed batch, in commit
order, on a thread of its own; :class:`Held` counts the message bytes handed to the workers and
not yet freed; :func:`waves` splits a round's plans into reads of bounded size.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

from tiered.broker.unit_fields import int_sum
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch
from tiered.offload.listeners import CommitListener
from tiered.offload.listeners import Int64s
from tiered.offload.listeners import StagedListener
from tiered.offload.listeners import StagedMany
from tiered.offload.listeners import steps_of
from tiered.offload.offload_step import Plan

__all__ = ["NOTIFY_PENDING_BYTES", "NOTIFY_PENDING_STEPS", "Held", "Notifier", "freed", "waves"]

log = logging.getLogger(__name__)

NOTIFY_PENDING_BYTES = 16 << 20
"""Message bytes of committed batches that may wait for the commit listeners (:class:`Notifier`)
before the workers wait for them."""
NOTIFY_PENDING_STEPS = 64
"""Committed batches that may wait to be told (a staged listener's step holds its index items,
about 100 bytes a message) before the workers wait for them."""


class Notifier:
    """Tells the commit listeners of each committed batch on one thread of its own
    (``tiered-commit``), in commit order, while the workers go on uploading.

    The listeners' work (the key index chains its items in one file under its lock) would
    otherwise hold up the end of every round, the workers queueing on the index's lock; told
    here, it overlaps the next round. A staged listener
    (:meth:`~tiered.offload.dispatcher.Dispatcher.add_staged_listener`) does its parallel share
    in the worker (extracting and hashing the keys) and leaves this thread only the ordered
    rest, so this one thread does not become the bottleneck. A worker blocks only while the
    batches waiting to be told hold more than
    :data:`NOTIFY_PENDING_BYTES` of message bytes (kept in memory for a plain listener), or
    :data:`NOTIFY_PENDING_STEPS` batches wait. A listener's exception is logged and never fails
    the upload.
    """

    def __init__(
        self,
        listeners: list[CommitListener],
        staged: list[StagedListener],
        initializer: Callable[[], None],
    ) -> None:
        self.listeners = listeners
        self.staged = staged
        self._pool = ThreadPoolExecutor(1, "tiered-commit", initializer=initializer)
        self._room = threading.Condition()
        self._pending = 0
        self._untold = 0
        """Batches handed over and not yet told (queued or being told)."""
        self._inline = False
        """Whether the batches are told on the thread that commits them (:meth:`inline`)."""
        self.scopes: list[Callable[[], AbstractContextManager[object]]] = []
        """Entered around the listeners told inline (e.g. the key index gathers its puts)."""
        self.many: dict[StagedListener, StagedMany] = {}
        """A staged listener's form for many batches at once, where it has one."""

    @property
    def early(self) -> bool:
        """Whether every listener is staged: then :meth:`prepare` may run before the upload
        (a plain listener is handed the batch itself, its bytes included, after it)."""
        return not self.listeners

    def prepare(
        self, flat: FlatMessageFile, batch: MessageBatch, offsets: Int64s
    ) -> Callable[[], None]:
        """The staged listeners' share of the batch, done now (in the worker, before the
        upload); returns what hands their steps to the commit thread once the batch is
        committed."""
        steps = self._prepare(flat, batch, offsets)
        return functools.partial(self._hand_over, flat, None, steps)

    def prepare_many(
        self, batches: Sequence[tuple[FlatMessageFile, MessageBatch, Int64s]]
    ) -> list[Callable[[], None]]:
        """:meth:`prepare` of many queues' batches (a wide round's wave): a staged listener
        with a many-batch form (:attr:`many`) is called once for them all."""
        steps: list[list[Callable[[], None]]] = [[] for _ in batches]
        for prepare in tuple(self.staged):
            for i, step in enumerate(steps_of(batches, prepare, self.many.get(prepare))):
                if step is not None:
                    steps[i].append(step)
        return [
            functools.partial(self._hand_over, flat, None, s)
            for (flat, _, _), s in zip(batches, steps, strict=True)
        ]

    def _prepare(
        self, flat: FlatMessageFile, batch: MessageBatch, offsets: Int64s
    ) -> list[Callable[[], None]]:
        steps: list[Callable[[], None]] = []
        for prepare in tuple(self.staged):
            try:
                step = prepare(flat, batch, offsets)
            except Exception:  # a listener's bug must not fail the upload; logged in full
                log.exception("%s: commit listener %r failed", flat.path, prepare)
                continue
            if step is not None:
                steps.append(step)
        return steps

    def __call__(self, flat: FlatMessageFile, batch: MessageBatch, offsets: Int64s) -> None:
        steps = self._prepare(flat, batch, offsets)
        self._hand_over(flat, (batch, offsets), steps)

    def _hand_over(
        self,
        flat: FlatMessageFile,
        batch: tuple[MessageBatch, Int64s] | None,
        steps: list[Callable[[], None]],
    ) -> None:
        """Queue the batch's steps and plain listeners on the commit thread (in commit order)."""
        plain = tuple(self.listeners) if batch is not None else ()
        if not plain and not steps:
            return
        if self._inline:  # (nothing to count: only this thread drains, and it is telling)
            told = (flat, batch[0], batch[1]) if plain and batch is not None else None
            self._call(flat.path, plain, told, steps)
            return
        size = batch[0].nbytes if plain and batch is not None else 0
        with self._room:
            while self._untold and (
                self._pending + size > NOTIFY_PENDING_BYTES or self._untold >= NOTIFY_PENDING_STEPS
            ):
                self._room.wait()
            self._pending += size
            self._untold += 1
        told = (flat, batch[0], batch[1]) if plain and batch is not None else None
        try:
            self._pool.submit(self._tell, flat.path, plain, told, steps, size)
        except RuntimeError:  # closed: a step still running at shutdown is told in its thread
            self._tell(flat.path, plain, told, steps, size)

    def _tell(
        self,
        path: str,
        plain: tuple[CommitListener, ...],
        told: tuple[FlatMessageFile, MessageBatch, Int64s] | None,
        steps: list[Callable[[], None]],
        size: int,
    ) -> None:
        try:
            self._call(path, plain, told, steps)
        finally:
            with self._room:
                self._pending -= size
                self._untold -= 1
                self._room.notify_all()

    @staticmethod
    def _call(
        path: str,
        plain: tuple[CommitListener, ...],
        told: tuple[FlatMessageFile, MessageBatch, Int64s] | None,
        steps: list[Callable[[], None]],
    ) -> None:
        """Run a batch's steps, then call its plain listeners (when ``told``)."""
        calls: list[Callable[[], None]] = steps
        if told is not None:
            calls = [*steps, *(functools.partial(listener, *told) for listener in plain)]
        for call in calls:
            try:
                call()
            except Exception:  # a listener's bug must not fail the upload; logged in full
                log.exception("%s: commit listener %r failed", path, call)

    @contextlib.contextmanager
    def inline(self) -> Iterator[tuple[Notifier, ...]]:
        """Tell the listeners on the calling thread while in the block (after what waits for the
        commit thread, so a queue's batches stay in order), inside every one of
        :attr:`scopes`; yields the listeners a step takes (none when there are none)."""
        self.drain()
        self._inline = True
        try:
            with contextlib.ExitStack() as scopes:
                for scope in self.scopes:
                    scopes.enter_context(scope())
                yield (self,) if self.listeners or self.staged else ()
        finally:
            self._inline = False

    def drain(self) -> None:
        """Wait until every batch committed so far was told (at once when none waits: a pass
        that committed nothing does not wake the thread)."""
        with self._room:
            while self._untold:
                self._room.wait()

    def close(self) -> None:
        """Tell what is waiting, then stop the thread."""
        self._pool.shutdown(wait=True)


class Held:
    """The message bytes of the batches handed to the workers and not yet freed: a batch's are
    freed once the flat commitlog holds them (before their sync, see
    :meth:`FlatMessageFile.commit`), or when its step ends."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.bytes = 0

    def hold(self, nbytes: int) -> Callable[..., None]:
        """Count ``nbytes`` held; returns what frees them (once, however often it is called;
        any argument, such as the future of a done callback, is ignored)."""
        with self._cond:
            self.bytes += nbytes
        freed = False

        def free(*_: object) -> None:
            nonlocal freed
            with self._cond:
                if not freed:
                    freed = True
                    self.bytes -= nbytes
                    self._cond.notify_all()

        return free

    def wait_below(self, room: int) -> None:
        """Wait until at most ``room`` bytes are held."""
        with self._cond:
            self._cond.wait_for(lambda: self.bytes <= room)


def freed() -> None:
    """A wide round's batches are not counted in :class:`Held`: its waves run one at a time."""


def waves(
    plans: list[Plan], wave_bytes: int, max_plans: int | None = None
) -> list[list[tuple[Plan, int]]]:
    """Split plans into groups whose batches together stay within ``wave_bytes`` (and of at
    most ``max_plans`` plans); each plan with its batch's message bytes."""
    waves: list[list[tuple[Plan, int]]] = [[]]
    size = 0
    for p in plans:
        n = int_sum(p.units["size"]) if p.units is not None else 0
        if waves[-1] and (size + n > wave_bytes or len(waves[-1]) == max_plans):
            waves.append([])
            size = 0
        waves[-1].append((p, n))
        size += n
    return [w for w in waves if w]


def wide_slices(n: int, step: int, tail: int) -> list[tuple[int, int]]:
    """``[i, j)`` ranges over ``n`` items: of ``step`` items while more than ``step`` are left,
    then halves of what is left while that is more than twice ``tail`` (the last two of at most
    ``tail`` each): 5,000 items by 2,048 with a tail of 256 go 2,048, 2,048, 452, 226, 226."""
    out: list[tuple[int, int]] = []
    i = 0
    while n - i > step:
        out.append((i, i + step))
        i += step
    while n - i > 2 * tail:
        half = (n - i) // 2
        out.append((i, i + half))
        i += half
    if n - i > tail:
        half = (n - i + 1) // 2
        out.append((i, i + half))
        i += half
    if n > i:
        out.append((i, n))
    return out


@contextlib.contextmanager
def held_all(locks: Sequence[AbstractContextManager[object]]) -> Iterator[None]:
    """Every one of ``locks`` held, taken in order and given back in reverse: a round's
    thousands of queue locks in one loop each way (an ``ExitStack`` makes a callback per lock)."""
    taken = 0
    try:
        for lock in locks:
            lock.__enter__()
            taken += 1
        yield
    finally:
        for lock in reversed(locks[:taken]):
            lock.__exit__(None, None, None)
