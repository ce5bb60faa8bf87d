"""A new data volume (an emptyDir after the pod moved): the metadata comes back from the backend
mirror and the key index's progress from its backend copy, so the catch-up at start re-indexes
only what no uploaded index file covers -- at most the lost UNSEALED file's messages -- and every
key is still found exactly once. And a catch-up killed half-way resumes where it was."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from tiered.providers import build_provider

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.core.sidecar import Sidecar
from tiered.index.progress import backend_key
from tiered.index.service import IndexService
from tiered.testing import ConfigFactory
from tiered.testing.index_keys import IndexCase
from tiered.testing.index_keys import assert_all_found
from tiered.testing.index_keys import store_keys

MAX_ITEMS = 300


def test_a_new_data_volume_reindexes_only_what_no_uploaded_file_covers(
    tmp_path: Path,
    index_spec: GenSpec,
    index_config: ConfigFactory,
) -> None:
    store = tmp_path / "big-store"
    generate_store(store, dataclasses.replace(index_spec, messages=3000))
    cfg = index_config(store, provider="posix", tieredStoreIndexFileMaxIndexNum=MAX_ITEMS)
    expected = store_keys(store)
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        index = sidecar.index
        assert index is not None
        results = index.compact_sealed()
        assert len(results) >= 20 and {r.action for r in results} == {"uploaded"}
        assert sidecar.provider.exists(backend_key(cfg.broker_cluster_name, cfg.broker_name))
    shutil.rmtree(cfg.tiered_data_dir)  # the volume is gone; the backend is not

    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        index = sidecar.index
        assert index is not None
        redone = sum(f.item_count for f in index.local.files)  # put by the catch-up at start
        print(f"re-indexed after a lost volume: {redone} of {len(expected)} keys")
        assert 0 < redone <= MAX_ITEMS and redone <= 0.05 * len(expected)
        index.seal()
        index.compact_sealed()
        assert_all_found(index, expected, 7)


class Killed(BaseException):
    """The process died (nothing catches it)."""


def test_a_catch_up_killed_half_way_resumes_where_it_was(index_case: IndexCase) -> None:
    cfg = index_case.config(tieredStoreIndexFileMaxIndexNum=100_000)
    provider = build_provider(cfg)
    off = cfg.model_copy(update={"message_index_enable": False})
    with Sidecar(off, provider) as sidecar:  # offloaded, never indexed: all to catch up
        sidecar.dispatcher.run_pass(flush=True)
    with Sidecar(off, provider) as sidecar:
        index = IndexService(cfg, provider, sidecar.metadata, sidecar.flat_store)
        put = index.put
        done: list[int] = []

        def dying_put(batch: Any, topic: str, queue_id: int, first: int, count: int) -> None:
            if len(done) == 3:  # half of the six queues
                raise Killed
            put(batch, topic, queue_id, first, count)
            done.append(count)

        index.put = dying_put  # type: ignore[method-assign,assignment]
        with pytest.raises(Killed):
            index.start()
        time.sleep(0.1)  # the process lived a moment longer; then nothing is saved any more
        index._saver_stop.set()
        assert index._saver is not None
        index._saver.join()
        total = sum(f.commit_offset for f in sidecar.flat_store.files())
        again = IndexService(cfg, provider, sidecar.metadata, sidecar.flat_store).start(
            catch_up=False
        )
        try:
            redone = again.catch_up()
        finally:
            again.close()
    print(f"catch-up killed after {sum(done)} of {total} messages; the next one indexed {redone}")
    assert redone == total - sum(done)
