"""NOT_IN_MEM: the tier serves a batch whose local commitlog bytes are not in the page cache.

``posix_fadvise(DONTNEED)`` empties the cache of the broker's files (after a ``sync``, so no page is
dirty); reading the files fills it again. The range asked about is exactly the batch's bytes --
first message's start to last message's end, across commitlog files -- not one message further.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tiered.broker.page_cache import PAGE
from tiered.read.fetcher import GetStatus
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]


def fadvise_all(store: Path, advice: int) -> None:
    os.sync()
    for f in (store / "commitlog").iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, advice)
        finally:
            os.close(fd)


def touch(store: Path) -> None:
    for f in (store / "commitlog").iterdir():
        with f.open("rb") as fh:
            while fh.read(1 << 20):
                pass


def test_cold_pages_route_to_the_tier_and_warm_ones_locally(make_tier: TierFactory) -> None:
    tier = make_tier("memory", deleted_files=0)
    root = tier.cfg.store_path_root_dir
    store = tier.store("NOT_IN_MEM")
    topic, qid = tier.queues[0]
    fadvise_all(root, os.POSIX_FADV_DONTNEED)
    cold = store.explain(topic, qid, 100)
    assert cold["tier"] == "tiered" and cold["residentPages"] < cold["totalPages"]
    r = store.get_message(topic, qid, 100, 16)
    assert (r.status, r.tier) == (GetStatus.FOUND, "tiered")
    assert [u.queue_offset for u in r.units] == list(range(100, 116))
    touch(root)
    warm = store.explain(topic, qid, 100)
    assert warm["tier"] == "local" and warm["residentPages"] == warm["totalPages"] > 0
    r = store.get_message(topic, qid, 100, 16)
    assert (r.status, r.tier) == (GetStatus.FOUND, "local")
    assert [u.data for u in r.units] == [tier.expected[(topic, qid, q)] for q in range(100, 116)]
    # NOT_IN_DISK does not care about the page cache
    fadvise_all(root, os.POSIX_FADV_DONTNEED)
    assert tier.store("NOT_IN_DISK").get_message(topic, qid, 100, 16).tier == "local"


def test_the_range_is_exactly_the_batch_across_file_boundaries(make_tier: TierFactory) -> None:
    tier = make_tier("memory", deleted_files=0)
    local = LocalSource(tier.cfg)
    files = local.commitlog.files
    for topic, qid in tier.queues:
        units = local.read_units(topic, qid, 0, local.max_offset(topic, qid))
        starts = units["offset"].astype(int)
        ends = starts + units["size"].astype(int)
        for offset, batch in [(0, 1), (10, 5), (37, 32), (len(units) - 3, 3)]:
            first, end = int(starts[offset]), int(ends[offset + batch - 1])
            want = 0
            for f in files:  # the pages of each file's piece of [first, end)
                lo, hi = max(first, f.base) - f.base, min(end, f.end) - f.base
                if lo < hi:
                    want += (hi - 1) // PAGE - lo // PAGE + 1
            got = local.residency(topic, qid, offset, batch)
            assert got is not None and got.total_pages == want, (topic, qid, offset, batch)
        spanning = [
            i
            for i in range(len(units) - 1)
            if starts[i] // (256 << 10) != starts[i + 1] // (256 << 10)
        ]
        assert spanning  # the queue's messages are spread over several commitlog files
        i = spanning[0]
        across = local.residency(topic, qid, i, 2)
        assert across is not None and across.total_pages >= 2
    assert local.residency("NoSuchTopic", 0, 0, 4) is None
