"""Fixtures of the index tests: index file factories, generated stores and their configurations."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.index import IndexBatch
from tiered.index import IndexStoreFile
from tiered.testing import ConfigFactory
from tiered.testing.index_keys import IndexCase
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sample_tier import sample_config

T0 = 1_700_000_000_000
SealedFactory = Callable[..., tuple[Path, bytes]]


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The file descriptors ``os.fdatasync`` is called with from now on (each call still syncs)."""
    calls: list[int] = []
    fdatasync = os.fdatasync

    def counted(fd: int) -> None:
        calls.append(fd)
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    return calls


@pytest.fixture
def sealed_file(tmp_path: Path) -> SealedFactory:
    """``make(items, slots, max_items, seed=0, topics=4)``: a SEALED file of random items put with
    ``put_many`` (several batches), returned as its path and its bytes."""

    def make(
        items: int, slots: int, max_items: int, *, seed: int = 0, topics: int = 4
    ) -> tuple[Path, bytes]:
        rng = np.random.default_rng(seed)
        f = IndexStoreFile.create(tmp_path, T0 + seed, slots=slots, max_items=max_items)
        done = 0
        while done < items:
            n = min(int(rng.integers(1, 5000)), items - done)
            batch = IndexBatch.of_rows(
                rng.integers(0, 2**31 - 1, n),
                rng.integers(0, topics, n),
                rng.integers(0, 8, n),
                (done + np.arange(n)) * 1000,
                rng.integers(100, 5000, n),
                T0 + seed + (done + np.arange(n)) * 7,
            )
            assert f.put_many(batch) == n
            done += n
        f.seal()
        view = f.buffer()
        data = bytes(view)
        view.release()
        f.close()
        return f.path, data

    return make


# --- the index service end to end: generated broker stores, configurations, an S3 server --------


@pytest.fixture
def index_spec() -> GenSpec:
    """A small store with two keys per message (plus UNIQ_KEY): v1 and v2 messages, IPv6 hosts
    and compressed bodies, commitlog and consumequeue files that roll."""
    return rolling_spec(
        seed=23, topics=3, queues=2, messages=900, min_body=8, max_body=300,
        commitlog_file_size=128 << 10, cq_file_entries=200, compress_fraction=0.2,
        keys_per_message=2,
    )  # fmt: skip


@pytest.fixture
def index_store(tmp_path: Path, index_spec: GenSpec) -> Path:
    """The generated broker store of ``index_spec``."""
    root = tmp_path / "store"
    generate_store(root, index_spec)
    return root


@pytest.fixture
def index_config(tmp_path: Path, index_spec: GenSpec) -> ConfigFactory:
    """``index_config(store, provider="memory", **keys)``: a sidecar configuration with small
    index files (97 slots, 500 items: a few hundred messages seal a file), small flat segments
    and no group-commit hold; ``keys`` (upstream names) override."""

    def make(store: Path, provider: str = "memory", **keys: Any) -> TieredConfig:
        settings: dict[str, Any] = {
            "tieredStoreCommitLogMaxSize": 64 << 10,
            "tieredStoreConsumeQueueMaxSize": 150 * 20,
            "tieredStoreGroupCommitCount": 100,
            "tieredStoreGroupCommitSize": 32 << 10,
            "tieredStoreIndexFileMaxHashSlotNum": 97,
            "tieredStoreIndexFileMaxIndexNum": 500,
            "tieredIndexCompactionIntervalMs": 0,
        }
        return sample_config(store, tmp_path, index_spec, provider, **(settings | keys))

    return make


@pytest.fixture
def index_case(index_store: Path, index_spec: GenSpec, index_config: ConfigFactory) -> IndexCase:
    """The generated store of ``index_spec`` with ``index_config``'s configurations."""
    return IndexCase(index_store, index_spec, index_config)
