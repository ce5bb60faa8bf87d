"""Fixtures of the read tests: generated broker stores offloaded to a tier, an S3 (moto) server.

A "tier" here is a real offload (:func:`tiered.testing.sample_tier.build_sample_tier`): a generated
store, one flushing dispatcher pass, then the broker's oldest commitlog files deleted as its
cleanup would, so that the oldest offsets exist only in the tier. What every message must read
back as is captured from the broker's files before anything is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiered.broker.generator import GenSpec
from tiered.core.sidecar import Sidecar
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec


@pytest.fixture(scope="session")
def read_spec() -> GenSpec:
    """2400 messages in 2 topics x 2 queues, 256 KiB commitlog files (about 6), v1/v2, IPv6
    hosts and compressed bodies mixed in."""
    return rolling_spec(seed=21, queues=2, messages=2400)


TierFactory = Callable[..., SampleTier]


@pytest.fixture
def read_case(tmp_path: Path, read_spec: GenSpec) -> SidecarCase:
    """Stores of ``read_spec`` and sidecar configurations (:func:`sample_config`) under
    ``tmp_path``."""
    return SidecarCase(tmp_path, read_spec)


@pytest.fixture
def make_tier(tmp_path: Path, read_spec: GenSpec) -> Iterator[TierFactory]:
    """``make_tier(backend="memory", spec=read_spec, deleted_files=2, wrap=None, **keys)``: see
    :func:`build_sample_tier` (sidecars are closed at the end of the test)."""
    opened: list[Sidecar] = []

    def make(
        backend: str = "memory", *, spec: GenSpec | None = None, name: str = "t", **kw: Any
    ) -> SampleTier:
        tier = build_sample_tier(tmp_path / name, spec or read_spec, backend, **kw)
        opened.append(tier.sidecar)
        return tier

    yield make
    for sidecar in opened:
        sidecar.close()


@pytest.fixture(scope="module")
def module_tier(
    tmp_path_factory: pytest.TempPathFactory, read_spec: GenSpec
) -> Iterator[SampleTier]:
    """One posix tier for a whole test module (read-only tests share it)."""
    tier = build_sample_tier(tmp_path_factory.mktemp("tier"), read_spec, "posix")
    yield tier
    tier.sidecar.close()
