"""What a dispatch step tells of the batches it uploads: the commit listeners (the key index),
prepared early -- in the worker, on the batch's bytes, before its upload -- where they can be,
a wide round's wave of batches at once, and told once both uploads succeeded."""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Sequence
from typing import Protocol
from typing import cast
from typing import runtime_checkable

import numpy as np
import numpy.typing as npt

from tiered.file.flat_message_file import CommitResult
from tiered.file.flat_message_file import FlatMessageFile
from tiered.file.flat_message_file import MessageBatch

log = logging.getLogger(__name__)

Int64s = npt.NDArray[np.int64]

CommitListener = Callable[[FlatMessageFile, MessageBatch, Int64s], None]
"""Told of every batch once both of its uploads succeeded: the queue, the batch and the flat
commitlog offset of each of its messages (e.g. to index its keys)."""
StagedListener = Callable[[FlatMessageFile, MessageBatch, Int64s], Callable[[], None] | None]
"""A commit listener in two stages: called as a :data:`CommitListener` is, in the worker that
uploaded the batch; the step it returns is then run in commit order (see
:meth:`~.dispatcher.Dispatcher.add_staged_listener`)."""
StagedMany = Callable[
    [Sequence[tuple[FlatMessageFile, MessageBatch, Int64s]]], Sequence[Callable[[], None] | None]
]
"""A staged listener's form for many queues' batches at once (a wide round's wave): the step of
each, as the listener would return it."""


@runtime_checkable
class EarlyListener(Protocol):
    """A commit listener that can do its work on a batch's bytes before the upload."""

    @property
    def early(self) -> bool:
        """Whether :meth:`prepare` may be called instead of the listener itself."""
        ...

    def prepare(
        self, flat: FlatMessageFile, batch: MessageBatch, offsets: Int64s
    ) -> Callable[[], None]:
        """Do the work that needs the batch's bytes now; returns what to run once the batch is
        committed (what calling the listener then would have done)."""
        ...

    def prepare_many(
        self, batches: Sequence[tuple[FlatMessageFile, MessageBatch, Int64s]]
    ) -> list[Callable[[], None]]:
        """:meth:`prepare` of many queues' batches (a wide round's wave), one result each."""
        ...


def all_early(listeners: Sequence[object]) -> bool:
    """Whether every listener is an :class:`EarlyListener` that may be prepared early."""
    # by attribute: an isinstance check against a runtime-checkable protocol walks its members,
    # a cost paid per batch
    return all(getattr(n, "early", False) is True and hasattr(n, "prepare") for n in listeners)


def prepare_early(
    flat: FlatMessageFile, batch: MessageBatch, offsets: Int64s, listeners: Sequence[object]
) -> bool:
    """When every listener is an :class:`EarlyListener` that may be prepared early, prepare
    them now and leave the rest to the commit that completes the batch
    (:meth:`FlatMessageFile.after_commit`); whether so (then nothing needs the batch's bytes
    once they are written)."""
    if not all_early(listeners):
        return False
    for listener in cast("Sequence[EarlyListener]", listeners):
        try:
            flat.after_commit(listener.prepare(flat, batch, offsets))
        except Exception:  # a listener's bug must not fail the upload; logged in full
            log.exception("%s: commit listener %r failed", flat.path, listener)
    return True


Batches = Sequence[tuple[FlatMessageFile, MessageBatch, Int64s]]


def steps_of(
    items: Batches,
    prepare: Callable[[FlatMessageFile, MessageBatch, Int64s], Callable[[], None] | None],
    many: Callable[[Batches], Sequence[Callable[[], None] | None]] | None,
) -> list[Callable[[], None] | None]:
    """What one listener's ``prepare`` returns for each of many queues' batches, by its form
    for ``many`` at once where it has one (one by one where it has none, or that raised); a
    batch whose preparation raised is logged in full and gets None."""
    got = None
    try:
        got = many(items) if many is not None else None
    except Exception:  # a listener's bug must not fail the upload; logged in full
        log.exception("commit listener %r failed on %d batches", many, len(items))
    if got is not None:
        return list(got)
    out: list[Callable[[], None] | None] = []
    for flat, batch, offsets in items:
        try:
            out.append(prepare(flat, batch, offsets))
        except Exception:  # a listener's bug must not fail the upload; logged in full
            log.exception("%s: commit listener %r failed", flat.path, prepare)
            out.append(None)
    return out


def prepare_many(items: Batches, listeners: Sequence[object]) -> None:
    """:func:`prepare_early` of many queues' batches (a wide round's wave), each listener given
    them all at once where it can take them (:meth:`EarlyListener.prepare_many`: the key
    index hashes a wave's keys in one call); the caller knows them all early."""
    for listener in cast("Sequence[EarlyListener]", listeners):
        steps = steps_of(items, listener.prepare, getattr(listener, "prepare_many", None))
        for (flat, _, _), step in zip(items, steps, strict=True):
            if step is not None:
                flat.after_commit(step)


def notify(flat: FlatMessageFile, done: CommitResult, listeners: Sequence[CommitListener]) -> None:
    """Tell ``listeners`` of the batches ``done`` completed: run what their early preparation
    left (:func:`prepare_early`), or call them."""
    for call in done.after:
        try:
            call()
        except Exception:  # a listener's bug must not fail the upload; logged in full
            log.exception("%s: commit listener %r failed", flat.path, call)
    if done.after:
        return
    for batch, offsets in done.batches:
        for listener in listeners:
            try:
                listener(flat, batch, offsets)
            except Exception:  # a listener's bug must not fail the upload; logged in full
                log.exception("%s: commit listener %r failed", flat.path, listener)
