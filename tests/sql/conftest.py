"""Tiers for the SQL tests, built once per run: a generated store (v1/v2 messages, IPv6 hosts,
compressed bodies, non-ASCII properties, two keys a message) offloaded to posix and to moto S3 by
the real dispatcher, its key index sealed, compacted and uploaded -- and what ``fetch`` returns for
every message of each."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tiered.providers.testing.servers import S3Endpoint

from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.core.message_store import TieredMessageStore
from tiered.http.app import message_json
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sample_tier import write_conf

SPEC = rolling_spec(
    seed=5, topics=3, queues=3, messages=2400, java_client=True, user_property_fraction=0.3,
    client_ipv6_fraction=0.2, keys_per_message=2, max_body=500,
)  # fmt: skip
INDEX_KEYS = {
    "tieredStoreIndexFileMaxHashSlotNum": 97,
    "tieredStoreIndexFileMaxIndexNum": 2000,
    "tieredIndexCompactionIntervalMs": 0,
}


@dataclass
class SqlTier:
    """A tier to query: its configuration file, what fetch returns per (topic, queue, offset)."""

    cfg: TieredConfig
    conf: Path
    fetched: dict[tuple[str, int, int], dict[str, Any]]

    @property
    def options(self) -> dict[str, str]:
        return {"config": str(self.conf)}


def fetch_everything(cfg: TieredConfig) -> dict[tuple[str, int, int], dict[str, Any]]:
    """What ``rmq-tiered fetch --json`` returns for every message the tier holds (FORCE)."""
    out = {}
    forced = cfg.model_copy(update={"tiered_storage_level": StorageLevel.FORCE})
    with TieredMessageStore.open_read_only(forced) as store:
        for flat in store.flat_store.files():
            offset = flat.min_offset()
            while offset < flat.commit_offset:
                result = store.get_message(flat.topic, flat.queue_id, offset, 1000)
                assert result.tier == "tiered" and result.units, (flat.path, offset, result)
                for u in result.units:
                    out[(flat.topic, flat.queue_id, u.queue_offset)] = message_json(u.data, "t")
                offset = result.next_begin_offset
    return out


def build(work: Path, backend: str, **keys: Any) -> SqlTier:
    tier = build_sample_tier(work, SPEC, backend, **INDEX_KEYS, **keys)
    try:
        index = tier.sidecar.index
        assert index is not None
        index.seal()
        assert {r.action for r in index.compact_sealed()} == {"uploaded"}
    finally:
        tier.sidecar.close()
    shutil.rmtree(work / "store")  # the broker is gone: only the tier answers
    return SqlTier(tier.cfg, write_conf(tier.cfg, work / "tiered.conf"), fetch_everything(tier.cfg))


@pytest.fixture(scope="session")
def posix_tier(tmp_path_factory: pytest.TempPathFactory) -> SqlTier:
    """The tier on posix (read-only for the tests: copy it before damaging it)."""
    return build(tmp_path_factory.mktemp("sql-posix"), "posix")


@pytest.fixture(scope="session")
def s3_tier(tmp_path_factory: pytest.TempPathFactory, moto_s3: S3Endpoint) -> SqlTier:
    """The same tier in a bucket of the session's moto server."""
    keys = moto_s3.config_keys(moto_s3.new_bucket())
    return build(tmp_path_factory.mktemp("sql-s3"), "s3", **keys)


TierCopy = Callable[[], SqlTier]


@pytest.fixture
def posix_copy(posix_tier: SqlTier, tmp_path: Path) -> TierCopy:
    """``copy()``: the posix tier copied under this test's directory (to damage it)."""

    def copy() -> SqlTier:
        root = Path(posix_tier.cfg.tiered_store_file_path)
        shutil.copytree(root, tmp_path / "tier")
        cfg = posix_tier.cfg.model_copy(update={"tiered_store_file_path": str(tmp_path / "tier")})
        return SqlTier(cfg, write_conf(cfg, tmp_path / "tiered.conf"), posix_tier.fetched)

    return copy
