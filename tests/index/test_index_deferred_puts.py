"""A wide dispatch round tells the key index of thousands of small batches on one thread; inside
``deferred_puts`` their puts are gathered and made at the block's end at once (one put into the
file, one progress move, one fast save), the progress still moving only after the items are in
the file. Puts from other threads are not gathered; a failed gathered put is logged, not raised."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from tiered.providers import MemoryProvider

from tiered.core.sidecar import Sidecar
from tiered.index import IndexBatch
from tiered.index.service import IndexService
from tiered.metadata import MetadataStore
from tiered.offload import dispatcher as dispatcher_mod
from tiered.testing import ConfigFactory
from tiered.testing.index_keys import IndexCase
from tiered.testing.index_keys import assert_all_found


def _batch(n: int, queue_id: int, first: int) -> IndexBatch:
    return IndexBatch.of_rows(
        np.arange(first, first + n) * 7919 + queue_id, 1, queue_id, np.arange(n) * 100, 100,
        1_700_000_000_000 + np.arange(n),
    )  # fmt: skip


def _items(index: IndexService) -> int:
    return sum(f.item_count for f in index.local.files)


def _started(index_store: Path, index_config: ConfigFactory) -> IndexService:
    cfg = index_config(index_store)
    metadata = MetadataStore(cfg.tiered_data_dir)
    metadata.load()
    return IndexService(cfg, MemoryProvider(), metadata).start(catch_up=False)


def test_puts_in_the_block_are_made_at_its_end_at_once(
    index_store: Path, index_config: ConfigFactory
) -> None:
    index = _started(index_store, index_config)
    try:
        saves = []
        save_fast = index.progress.save_fast

        def counted(*, force: bool = False) -> bool:
            saves.append(force)
            return save_fast(force=force)

        index.progress.save_fast = counted  # type: ignore[method-assign]
        with index.deferred_puts():
            for q in range(50):
                index.put(_batch(3, q, 0), "T", q, 0, 3)
            index.put(_batch(2, 7, 3), "T", 7, 3, 2)  # a queue's second batch, after its first
            index.put(_batch(2, 9, 5), "T", 9, 5, 2)  # a gap: [3, 5) not indexed
            other = threading.Thread(target=index.put, args=(_batch(4, 99, 0), "T", 99, 0, 4))
            other.start()
            other.join()
            assert _items(index) == 4 and index.progress.get("T", 99) == 4  # not gathered
            assert index.progress.get("T", 0) is None
        assert _items(index) == 4 + 50 * 3 + 2 + 2
        assert saves == [False, False]  # the other thread's put, then the gathered one
        assert index.progress.get("T", 7) == 5 and index.progress.get("T", 9) == 3
        assert all(index.progress.get("T", q) == 3 for q in range(50) if q not in (7, 9))
    finally:
        index.close()


def test_a_failed_gathered_put_is_logged_and_moves_no_progress(
    index_store: Path,
    index_config: ConfigFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = _started(index_store, index_config)
    try:

        def broken(batch: IndexBatch) -> list[object]:
            raise OSError("disk full")

        monkeypatch.setattr(index.local, "put", broken)
        with caplog.at_level(logging.ERROR), index.deferred_puts():
            index.put(_batch(3, 0, 0), "T", 0, 0, 3)
        assert "a gathered put failed" in caplog.text
        assert index.progress.get("T", 0) is None
        monkeypatch.undo()
        with index.deferred_puts():
            index.put(_batch(3, 0, 0), "T", 0, 0, 3)
        assert index.progress.get("T", 0) == 3
    finally:
        index.close()


def test_a_wide_round_gathers_its_puts_and_every_key_is_found(
    index_case: IndexCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatcher_mod, "WIDE_ROUND_QUEUES", 2)  # the case's 6 queues: wide
    gathered: list[int] = []
    put_deferred = IndexService._put_deferred

    def counted(self: IndexService) -> None:
        gathered.append(len(self._deferred))
        put_deferred(self)

    monkeypatch.setattr(IndexService, "_put_deferred", counted)
    cfg = index_case.config("posix", tieredStoreGroupCommitCount=64)
    with Sidecar(cfg) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
        assert report.messages == 900 and report.rounds > 1
        index = sidecar.index
        assert index is not None
        assert {
            (f.topic, f.queue_id): f.commit_offset for f in sidecar.flat_store.files()
        } == index.progress.items()
        assert_all_found(index, index_case.keys(), 7)
    assert max(gathered) == 6  # a round's batches of every queue in one put
