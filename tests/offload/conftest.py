"""Fixtures of the offload tests: a small roll-heavy store spec, configurations, an S3 server.

The tier itself is checked with :func:`tiered.testing.tier_check.check_tier`, which shares no code
with the offload path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.config import TieredConfig
from tiered.testing import ConfigFactory
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sample_tier import sample_config


@pytest.fixture
def small_spec() -> GenSpec:
    """A store whose files roll often (256 KiB commitlog files, 400-unit consumequeue files)
    with v1 and v2 messages, IPv6 hosts and compressed bodies."""
    return rolling_spec()


@pytest.fixture
def make_store(tmp_path: Path, small_spec: GenSpec) -> Callable[..., Path]:
    """``make_store(spec=small_spec, name="store")``: generate a broker store, return its root."""

    def make(spec: GenSpec | None = None, name: str = "store") -> Path:
        root = tmp_path / name
        generate_store(root, spec or small_spec)
        return root

    return make


@pytest.fixture
def offload_config(tmp_path: Path, small_spec: GenSpec) -> ConfigFactory:
    """``offload_config(store, provider="memory", spec=small_spec, work=tmp_path, **keys)``.

    Small flat segments (64 KiB commitlog, 200-unit consumequeue) so both roll; group commit of
    128 messages / 32 KiB (32 KiB on object stores too), no hold time; ``keys`` (upstream
    names) override.
    """

    def make(
        store: Path,
        provider: str = "memory",
        *,
        spec: GenSpec | None = None,
        work: Path | None = None,
        **keys: Any,
    ) -> TieredConfig:
        settings: dict[str, Any] = {
            "tieredStoreCommitLogMaxSize": 64 << 10,
            "tieredStoreConsumeQueueMaxSize": 200 * 20,
            "tieredStoreGroupCommitCount": 128,
            "tieredStoreGroupCommitSize": 32 << 10,
            "objectStoreGroupCommitSize": 32 << 10,
        }
        return sample_config(
            store, work or tmp_path, spec or small_spec, provider, **(settings | keys)
        )

    return make


def conf_text(cfg: TieredConfig) -> str:
    """``cfg`` as properties text (for CLI runs), the secret included."""
    props = cfg.as_properties()
    props["objectStoreSecretKey"] = cfg.object_store_secret_key.get_secret_value()
    return "".join(f"{k}={v}\n" for k, v in props.items() if v != "")


@pytest.fixture
def write_conf(tmp_path: Path) -> Callable[[TieredConfig], Path]:
    """``write_conf(cfg)``: ``cfg`` as a properties file for the CLI; returns its path."""
    count = 0

    def write(cfg: TieredConfig) -> Path:
        nonlocal count
        count += 1
        path = tmp_path / f"sidecar-{count}.conf"
        path.write_text(conf_text(cfg), encoding="utf-8")
        return path

    return write
