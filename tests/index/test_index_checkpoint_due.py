"""A maintenance run checkpoints (syncs the index files, writes ``progress.json``) only when due:
a minute after the last checkpoint with something put since, or after a million items -- a
tail's slot table is all dirty within seconds, so each sync writes its 38 MiB back whatever the
interval. The fast copy still follows every put; the contract (the saved offsets never lead the
synced files) is the checkpoint's, unchanged."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from tiered.providers import MemoryProvider

from tiered.index import IndexBatch
from tiered.index import IndexStoreFile
from tiered.index import service as service_mod
from tiered.index.progress import PROGRESS_NAME
from tiered.index.service import IndexService
from tiered.metadata import MetadataStore
from tiered.testing import ConfigFactory


def _batch(n: int, first: int) -> IndexBatch:
    return IndexBatch.of_rows(
        np.arange(first, first + n) * 7919, 1, 0, np.arange(n) * 100, 100,
        1_700_000_000_000 + np.arange(n),
    )  # fmt: skip


def _offsets(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_maintenance_checkpoints_when_due_not_at_every_run(
    index_store: Path,
    index_config: ConfigFactory,
    monkeypatch: pytest.MonkeyPatch,
    synced: list[int],
) -> None:
    cfg = index_config(index_store)
    metadata = MetadataStore(cfg.tiered_data_dir)
    metadata.load()
    index = IndexService(cfg, MemoryProvider(), metadata).start(catch_up=False)
    progress = index.directory / PROGRESS_NAME
    try:
        assert not index.checkpoint_due()  # nothing put: never due
        index.put(_batch(5, 0), "T", 0, 0, 5)
        before = _offsets(progress)
        index.maintain()
        assert synced == [] and _offsets(progress) == before  # put, but not due yet
        monkeypatch.setattr(service_mod, "CHECKPOINT_MAX_ITEMS", 8)
        index.put(_batch(5, 5), "T", 0, 5, 5)  # 10 items since the checkpoint
        assert index.checkpoint_due()
        index.maintain()
        assert len(synced) >= 1 and '["T",0,10]' in _offsets(progress).replace(" ", "")
        assert not index.checkpoint_due()
        synced.clear()
        index.maintain()
        assert synced == []  # nothing since: nothing synced
        index.put(_batch(1, 10), "T", 0, 10, 1)
        assert not index.checkpoint_due()
        monkeypatch.setattr(service_mod, "CHECKPOINT_MAX_S", 0.0)
        assert index.checkpoint_due()  # old enough, and something was put
        index.maintain()
        assert len(synced) >= 1 and '["T",0,11]' in _offsets(progress).replace(" ", "")
    finally:
        index.close()
    assert '["T",0,11]' in _offsets(progress).replace(" ", "")  # close checkpoints


def test_a_flush_is_one_fdatasync_of_the_whole_file(tmp_path: Path, synced: list[int]) -> None:
    """The slot table written through the map reaches the disk by the file's ``fdatasync``
    (Linux), which releases the GIL; what a reopened file reads is what was put."""
    f = IndexStoreFile.create(tmp_path, 1_700_000_000_000, slots=97, max_items=500)
    assert f.put_many(_batch(20, 0)) == 20
    f.flush()
    assert len(synced) == 1
    f.close()
    reopened = IndexStoreFile.open(f.path, slots=97, max_items=500, readonly=True)
    assert reopened.item_count == 20
    reopened.close()


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:
            inside = len(head) >= 6 and head[-1] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_a_new_file_s_slot_table_is_faulted_in_at_once(tmp_path: Path) -> None:
    """One madvise instead of one write fault per page as keys land; the bytes stay zeros."""
    if tuple(int(p) for p in os.uname().release.split(".")[:2] if p.isdigit()) < (5, 14):
        pytest.skip("MADV_POPULATE_WRITE needs Linux 5.14")
    slots = 1_000_000  # an 8 MB table
    f = IndexStoreFile.create(tmp_path, 1_700_000_000_000, slots=slots, max_items=500)
    try:
        assert _resident_kib(f.path) >= slots * 8 // 1024
        view = f.buffer()
        assert not np.frombuffer(view, np.uint8, slots * 8, 28).any()
        view.release()
        assert f.put_many(_batch(20, 0)) == 20
    finally:
        f.close()
