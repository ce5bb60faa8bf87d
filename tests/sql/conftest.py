"""Tiers for the SQL tests, built once per run: a generated store (v1/v2 messages, IPv6 hosts,
compressed bodies, non-ASCII properties, two keys a message) offloaded to posix and to moto S3 by
the real dispatcher, its key index sealed, compacted and uploaded -- and what ``fetch`` returns for
every message of each."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tiered.providers.testing.servers import S3Endpoint

from tiered.testing.sample_tier import write_conf
from tiered.testing.sql_tier import SqlTier
from tiered.testing.sql_tier import TierCopy
from tiered.testing.sql_tier import build


@pytest.fixture(scope="session")
def posix_tier(tmp_path_factory: pytest.TempPathFactory) -> SqlTier:
    """The tier on posix (read-only for the tests: copy it before damaging it)."""
    return build(tmp_path_factory.mktemp("sql-posix"), "posix")


@pytest.fixture(scope="session")
def s3_tier(tmp_path_factory: pytest.TempPathFactory, moto_s3: S3Endpoint) -> SqlTier:
    """The same tier in a bucket of the session's moto server."""
    keys = moto_s3.config_keys(moto_s3.new_bucket())
    return build(tmp_path_factory.mktemp("sql-s3"), "s3", **keys)


@pytest.fixture
def posix_copy(posix_tier: SqlTier, tmp_path: Path) -> TierCopy:
    """``copy()``: the posix tier copied under this test's directory (to damage it)."""

    def copy() -> SqlTier:
        root = Path(posix_tier.cfg.tiered_store_file_path)
        shutil.copytree(root, tmp_path / "tier")
        cfg = posix_tier.cfg.model_copy(update={"tiered_store_file_path": str(tmp_path / "tier")})
        return SqlTier(cfg, write_conf(cfg, tmp_path / "tiered.conf"), posix_tier.fetched)

    return copy
