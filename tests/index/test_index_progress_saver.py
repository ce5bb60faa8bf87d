"""An idle index costs nothing: the fast progress copy's saver writes what a burst of puts left
unsaved one interval later and sleeps while nothing moves (it used to wake every 20 ms: ~6 CPU-ms
per second of an idle sidecar), and a checkpoint syncs an index file only when something was
written to it since the last one."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from tiered.providers import MemoryProvider

from tiered.index import IndexBatch
from tiered.index import IndexStoreFile
from tiered.index import progress as progress_mod
from tiered.index.progress import FAST_NAME
from tiered.index.progress import IndexProgress
from tiered.index.service import IndexService
from tiered.metadata import MetadataStore
from tiered.testing import ConfigFactory


def _fast_rows(directory: Path) -> list[list[object]]:
    rows: list[list[object]] = json.loads((directory / FAST_NAME).read_text())["queues"]
    return rows


def test_moved_is_set_by_a_move_and_cleared_by_the_write_that_holds_it(tmp_path: Path) -> None:
    p = IndexProgress(tmp_path)
    if not p._boot:
        pytest.skip("no boot id: the fast copy is never written")
    assert not p.moved.is_set()
    assert p.advance("T", 0, 0, 10)
    assert p.moved.is_set()
    assert p.save_fast(force=True)
    assert not p.moved.is_set()
    assert p.advance("T", 0, 10, 20)
    assert not p.save_fast()  # within the interval: still to be written
    assert p.moved.is_set()
    assert p.advance("T", 0, 15, 18) and p.moved.is_set()  # no move, but the last is unsaved
    time.sleep(progress_mod.FAST_SAVE_INTERVAL_S * 2)
    assert p.save_fast() and not p.moved.is_set()
    assert not p.save_fast(force=True) and not p.moved.is_set()
    p.forget("T", 0)
    assert p.moved.is_set()


def test_the_saver_writes_a_burst_s_tail_and_then_sleeps(
    tmp_path: Path, index_store: Path, index_config: ConfigFactory
) -> None:
    cfg = index_config(index_store)
    metadata = MetadataStore(cfg.tiered_data_dir)
    metadata.load()
    index = IndexService(cfg, MemoryProvider(), metadata).start(catch_up=False)
    try:
        if not index.progress._boot:
            pytest.skip("no boot id: the fast copy is never written")
        directory = index.directory
        index.progress.advance("T", 0, 0, 10)
        index.progress.save_fast(force=True)  # a put's own write
        index.progress.advance("T", 0, 10, 20)  # the burst's last put, within the interval
        deadline = time.monotonic() + 5
        while _fast_rows(directory) != [["T", 0, 20]]:
            assert time.monotonic() < deadline, "the saver did not write the burst's tail"
            time.sleep(0.01)
        assert not index.progress.moved.is_set()
        written = (directory / FAST_NAME).stat().st_ino
        saves = []
        save_fast = index.progress.save_fast

        def counted(*, force: bool = False) -> bool:
            saves.append(force)
            return save_fast(force=force)

        index.progress.save_fast = counted  # type: ignore[method-assign]
        time.sleep(0.3)  # idle: the saver does not wake
        assert saves == [] and (directory / FAST_NAME).stat().st_ino == written
        assert index._saver is not None and index._saver.is_alive()
    finally:
        started = time.monotonic()
        index.close()
    assert time.monotonic() - started < 2  # the stop wakes the sleeping saver
    assert index._saver is None


def test_a_flush_with_nothing_written_since_the_last_one_syncs_nothing(
    tmp_path: Path, synced: list[int]
) -> None:
    f = IndexStoreFile.create(tmp_path, 1_700_000_000_000, slots=97, max_items=500)
    f.flush()  # a new (or reopened) file: whatever is in the page cache is synced once
    assert len(synced) == 1
    f.flush()
    assert len(synced) == 1
    batch = IndexBatch.of_rows(
        np.arange(5) * 7919, 1, 0, np.arange(5) * 100, 100, 1_700_000_000_000 + np.arange(5)
    )
    assert f.put_many(batch) == 5
    f.flush()
    f.flush()
    assert len(synced) == 2
    f.seal()
    f.flush()
    assert len(synced) == 3
    f.close()
    reopened = IndexStoreFile.open(f.path, slots=97, max_items=500)
    reopened.flush()
    assert len(synced) == 4
    assert reopened.item_count == 5
    reopened.close()
