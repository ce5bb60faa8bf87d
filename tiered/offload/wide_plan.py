"""The steps of a wide round's queues planned at once (:func:`plan_many`).

A wide round (thousands of queues, a message or two each) plans every queue as
:func:`~.offload_step.plan` does, but a queue on the common path -- nothing pending, no batch
held from an earlier pass, its next units among those the round's scan just read, no segment
to roll first -- is decided with the others' in a few array operations: the batch sizes, the
group-commit readiness (the first message's store time from what the commitlog feed walked)
and the batch cut. Any other queue is planned by :func:`~.offload_step.plan` itself, so both
give the same plans, results and queue states.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tiered.broker.consumequeue import BLANK_FILL_SIZE
from tiered.errors import TieredStoreError
from tiered.file.flat_message_file import FlatMessageFile
from tiered.offload.dispatch_state import Held
from tiered.offload.dispatch_state import QueueState
from tiered.offload.offload_step import Limits
from tiered.offload.offload_step import Plan
from tiered.offload.offload_step import StepResult
from tiered.offload.offload_step import plan
from tiered.offload.offload_step import set_behind
from tiered.source.local_source import LocalSource
from tiered.source.local_source import Units


def plan_many(
    flats: Sequence[FlatMessageFile],
    states: Sequence[QueueState],
    local: LocalSource,
    limits: Limits,
    now: int,
    *,
    flush: bool,
) -> list[Plan | StepResult]:
    """``[plan(flat, state, local, limits, now, flush=flush) for ...]`` (one batch per queue),
    each queue's state left as that leaves it; see the module docstring."""
    out: list[Plan | StepResult | None] = [None] * len(flats)
    slow: list[tuple[int, int | None]] = []  # (index, its max offset once asked)
    fast: list[tuple[int, int, int, int, int]] = []  # (index, current, lmax, want, cq room)
    keys: list[tuple[str, int]] = []
    counts: list[int] = []
    rooms: list[int] = []
    hours, least, messages = limits.rolling_hours, limits.rolling_min_bytes, limits.messages
    for i, (flat, state) in enumerate(zip(flats, states, strict=True)):
        steady = flat.steady(now, hours, least) if state.held is None else None
        if steady is None:
            slow.append((i, None))
            continue
        current, cl_room, cq_room = steady
        key = (flat.topic, flat.queue_id)
        try:
            lmax = local.max_offset(*key)
        except (TieredStoreError, OSError):  # (the plan asks again, and records why)
            slow.append((i, None))
            continue
        left = lmax - current
        if left <= 0 or cq_room <= 0:
            slow.append((i, lmax))
            continue
        want = min(messages, left)
        fast.append((i, current, lmax, want, cq_room))
        keys.append(key)
        counts.append(min(want + 1, left))
        rooms.append(cl_room)
    tails = local.tails(keys, [f[1] for f in fast], counts)
    if fast:
        _decide(flats, states, local, limits, now, flush, fast, tails, rooms, out, slow)
    for i, known in slow:
        out[i] = plan(flats[i], states[i], local, limits, now, flush=flush, batches=1, lmax=known)
    return [p for p in out if p is not None]


def _decide(
    flats: Sequence[FlatMessageFile],
    states: Sequence[QueueState],
    local: LocalSource,
    limits: Limits,
    now: int,
    flush: bool,
    fast: list[tuple[int, int, int, int, int]],
    tails: list[Units | None],
    rooms: list[int],
    out: list[Plan | StepResult | None],
    slow: list[tuple[int, int | None]],
) -> None:
    """The plans of the ``fast`` queues whose units the round's scan holds (``tails``) and
    that need no roll; the others go to ``slow``."""
    have = [k for k, t in enumerate(tails) if t is not None and len(t)]
    if len(have) < len(fast):
        kept = set(have)
        slow += [(f[0], f[2]) for k, f in enumerate(fast) if k not in kept]
    if not have:
        return
    units: list[Units] = [t for t in tails if t is not None and len(t)]
    got = [fast[k] for k in have]
    room = np.array([rooms[k] for k in have], np.int64)
    dtype = units[0].dtype
    # joined as bytes: np.concatenate promotes structured dtypes in Python, array by array
    if all(u.dtype == dtype for u in units):
        joined = np.frombuffer(b"".join(units), dtype)  # type: ignore[arg-type]  # (buffers)
    else:  # (units read across two files come in a promoted dtype)
        joined = np.concatenate(units)
    lengths = np.array([len(u) for u in units], np.int64)
    starts = np.cumsum(lengths) - lengths
    wants = np.minimum(np.array([f[3] for f in got], np.int64), lengths)
    sizes = joined["size"].astype(np.int64)
    sums = np.concatenate(([0], np.cumsum(sizes)))
    totals = sums[starts + wants] - sums[starts]
    first_offset = joined["offset"][starts].astype(np.int64)
    first_size = sizes[starts]
    blank = (first_offset == 0) & (first_size == BLANK_FILL_SIZE)
    blank &= joined["tags_code"][starts] == 0
    gone = first_offset < local.commitlog.min_offset
    # the common path: one batch of every unit wanted, in the segments as they are
    plain = ~blank & ~gone & (totals < limits.size_bytes) & (totals <= room)
    left = np.array([f[2] - f[1] for f in got], np.int64)
    ready = np.full(len(got), flush or not limits.group_commit or limits.timeout_ms == 0)
    ready |= (left >= limits.messages) | (totals >= limits.size_bytes)
    asked = np.flatnonzero(plain & ~ready)
    firsts: list[int | None] = [None] * len(got)
    times = local.store_times_at(first_offset[asked], first_size[asked])
    for k, t in zip(asked.tolist(), times, strict=True):
        firsts[k] = t
        ready[k] = t is None or t + limits.timeout_ms <= now
    for k, (i, current, lmax, _, cq_room) in enumerate(got):
        if not plain[k]:
            slow.append((i, lmax))
            continue
        flat, state = flats[i], states[i]
        state.error = ""
        state.local_max = lmax
        state.next_physical = int(first_offset[k])
        u = units[k]
        if not ready[k]:
            first = firsts[k]
            assert first is not None
            wanted = sizes[starts[k] : starts[k] + wants[k]]
            set_behind(flat, state, lmax - current, wanted, now - first)
            read = sizes[starts[k] : starts[k] + lengths[k]].copy()
            state.held = Held(current, read, int(first_offset[k]), first)
            out[i] = StepResult()
            continue
        n = min(int(wants[k]), cq_room)
        out[i] = Plan(flat, state, current, lmax, u[:n], u[n:])
