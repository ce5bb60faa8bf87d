"""A new data volume (an emptyDir after the pod moved): the metadata comes back from the backend
mirror and the key index's progress from its backend copy, so the catch-up at start re-indexes
only what no uploaded index file covers -- at most the lost UNSEALED file's messages -- and every
key is still found exactly once."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

from tiered.broker import message as msgcodec
from tiered.broker.generator import GenSpec, generate_store
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar, build_provider
from tiered.index.progress import backend_key

ConfigFactory = Callable[..., TieredConfig]
KeyTable = dict[tuple[str, str], tuple[int, int, int]]
MAX_ITEMS = 300


def test_a_new_data_volume_reindexes_only_what_no_uploaded_file_covers(
    tmp_path: Path,
    index_spec: GenSpec,
    index_config: ConfigFactory,
    store_keys: Callable[[Path], KeyTable],
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
        for (topic, key), (qid, qoff, _) in sorted(expected.items())[::7]:
            hits = index.query(topic, key)
            assert len(hits) == 1, (topic, key, hits)
            m = msgcodec.decode(hits[0].data)
            assert (m.queue_id, m.queue_offset) == (qid, qoff)
