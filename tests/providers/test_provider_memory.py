"""The memory provider passes the conformance suite; instances share nothing."""

from __future__ import annotations

import pytest
from tiered.providers import MemoryProvider
from tiered.providers.testing import DictOracle
from tiered.providers.testing import Oracle
from tiered.providers.testing import ProviderTests


class TestMemoryProvider(ProviderTests):
    pickle_shares_backend = False  # a pickled copy carries a snapshot of the dict

    @pytest.fixture
    def provider(self) -> MemoryProvider:
        return MemoryProvider()

    @pytest.fixture
    def oracle(self, provider: MemoryProvider) -> Oracle:
        return DictOracle(provider._objects)


def test_instances_share_nothing() -> None:
    a, b = MemoryProvider(), MemoryProvider()
    a.append("k", b"abc", 0)
    assert not b.exists("k")
    assert "_objects" not in vars(MemoryProvider)


def test_new_objects_start_empty_unlike_upstream() -> None:
    provider = MemoryProvider()
    assert provider.append("k", b"", 0) == 0
    assert provider.size("k") == 0
