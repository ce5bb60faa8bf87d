"""Fixtures of the offload tests: a small roll-heavy store spec, configurations, an S3 server.

The tier itself is checked with :func:`tiered.testing.tier_check.check_tier`, which shares no code
with the offload path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered.broker.generator import GenSpec
from tiered.testing.sample_tier import SMALL_SEGMENTS
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sample_tier import rolling_spec


@pytest.fixture
def small_spec() -> GenSpec:
    """A store whose files roll often (256 KiB commitlog files, 400-unit consumequeue files)
    with v1 and v2 messages, IPv6 hosts and compressed bodies."""
    return rolling_spec()


@pytest.fixture
def offload_case(tmp_path: Path, small_spec: GenSpec) -> SidecarCase:
    """Stores of ``small_spec`` and small-segment configurations (:data:`SMALL_SEGMENTS`) under
    ``tmp_path``."""
    return SidecarCase(tmp_path, small_spec, dict(SMALL_SEGMENTS))
