"""dispatch_latency (spec §13): the age of the first message not yet offloaded, 0 when caught up;
its header is read with the batch, in the same preads."""

from __future__ import annotations

import numpy as np
from prometheus_client import REGISTRY
from tiered.providers import MemoryProvider

from tiered.core.sidecar import Sidecar
from tiered.source.batch_request import BatchRequest
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SidecarCase

NOW = 4_000_000_000_000  # later than every generated store time


def latency(topic: str, queue_id: int) -> float:
    labels = {"topic": topic, "queue_id": str(queue_id), "file_type": "consume_queue"}
    value = REGISTRY.get_sample_value("rocketmq_tiered_store_dispatch_latency", labels)
    assert value is not None, labels
    return value


def test_latency_is_the_age_of_the_first_message_left_waiting(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store())  # batches of at most 128 messages / 32 KiB
    local = LocalSource(cfg)
    with Sidecar(cfg, MemoryProvider()) as sidecar:
        dispatcher = sidecar.dispatcher
        dispatcher.clock = lambda: NOW
        results = dispatcher.run_round(flush=True)
        assert len({flat.path for flat, _ in results}) == 6  # a batch or two of each queue
        for flat, step in results:
            assert step.messages and step.more  # most of the queue waits
            waiting = local.store_time(flat.topic, flat.queue_id, flat.commit_offset)
            newest = local.store_time(flat.topic, flat.queue_id, flat.commit_offset - 1)
            assert waiting is not None and newest is not None and waiting > newest
            assert latency(flat.topic, flat.queue_id) == NOW - waiting  # not NOW - newest
        assert not dispatcher.run_pass(flush=True).errors
        for flat in sidecar.flat_store.files():
            assert latency(flat.topic, flat.queue_id) == 0  # caught up
        preads = dispatcher.local.preads
        for flat, step in dispatcher.run_round(flush=True):
            assert not step.messages and latency(flat.topic, flat.queue_id) == 0
        assert dispatcher.local.preads == preads  # caught up: no commitlog read at all


def test_the_next_header_comes_in_the_batches_preads(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store())
    local = LocalSource(cfg)
    queues = local.queues()
    units = {q: local.read_units(*q, 0, 101) for q in queues}

    def requests(after: slice | None) -> list[BatchRequest]:
        """Batches of offsets 0..99, with the units ``after`` as the ones past them."""
        out = []
        for key in queues:
            past = None if after is None else units[key][after]
            out.append(BatchRequest(*key, 0, units[key][:100], past))
        return out

    plain, peeking, last = requests(None), requests(slice(100, None)), requests(slice(0, 0))

    calls = local.preads
    batches, _ = local.read_batches(plain)
    plain_calls, calls = local.preads - calls, local.preads
    with_next, times = local.read_batches(peeking)
    assert local.preads - calls == plain_calls  # the headers cost no extra pread here
    for a, b in zip(batches, with_next, strict=True):
        assert not isinstance(a, Exception) and not isinstance(b, Exception)
        assert bytes(a.data) == bytes(b.data) and np.array_equal(a.timestamps, b.timestamps)
    assert times == [local.store_time(t, qid, 100) for t, qid in queues]
    assert all(t is not None for t in times)
    assert local.read_batches(last)[1] == [None] * len(queues)  # nothing after
    # a unit that is not the one after the batch (a stale or rewritten unit): no time, no error
    read, stale = local.read_batches(requests(slice(99, None)))
    assert stale == [None] * len(queues)
    assert not [b for b in read if isinstance(b, Exception)]
