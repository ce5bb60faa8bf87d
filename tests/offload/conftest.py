"""Fixtures of the offload tests: a small roll-heavy store spec, configurations, an S3 server.

The tier itself is checked with :func:`tiered.testing.tier_check.check_tier`, which shares no code
with the offload path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tiered.broker.generator import GenSpec
from tiered.config import TieredConfig
from tiered.testing.sample_tier import OffloadCase
from tiered.testing.sample_tier import rolling_spec


@pytest.fixture
def small_spec() -> GenSpec:
    """A store whose files roll often (256 KiB commitlog files, 400-unit consumequeue files)
    with v1 and v2 messages, IPv6 hosts and compressed bodies."""
    return rolling_spec()


@pytest.fixture
def offload_case(tmp_path: Path, small_spec: GenSpec) -> OffloadCase:
    """Stores of ``small_spec`` and small-segment configurations under ``tmp_path``."""
    return OffloadCase(tmp_path, small_spec)


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
