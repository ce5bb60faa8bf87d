"""Fixtures of the index tests: one real local Spark session per test run, index file factories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tiered.index import IndexBatch, IndexStoreFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T0 = 1_700_000_000_000
SealedFactory = Callable[..., tuple[Path, bytes]]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A real ``local[2]`` Spark session shared by every Spark test of the run."""
    from tiered.jobs.session import local_spark_session

    session = local_spark_session("local[2]", app_name="rmq-tiered-tests")
    yield session
    session.stop()


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
