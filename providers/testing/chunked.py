"""Crash-point tests for providers that keep unsealed segments as chunk objects.

A crash is simulated by a request listener that raises :class:`CrashPoint` (a ``BaseException``,
so no ``except Exception`` cleanup runs, as in a killed process) before the Nth backend request.
For every N within a seal (and a delete), the state left behind must read correctly and the
operation must complete when called again.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import ClassVar

import pytest
from tiered.providers.base import Provider

from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError

from .oracle import Oracle
from .suite import ProviderTests
from .suite import fill
from .suite import seg


class CrashPoint(BaseException):
    """Raised before a chosen backend request, like a crash between two requests."""


@contextlib.contextmanager
def crash_before_request(provider: Provider, number: int) -> Iterator[None]:
    """Raise :class:`CrashPoint` before the ``number``-th request (1-based) inside the block."""
    counter = itertools.count(1)

    def listener(operation: str) -> None:
        if next(counter) == number:
            raise CrashPoint(f"crash before request {number} ({operation})")

    provider.add_request_listener(listener)
    try:
        yield
    finally:
        provider.remove_request_listener(listener)


def requests_of(provider: Provider, call: Callable[[], object]) -> list[str]:
    """The backend requests ``call`` sends."""
    seen: list[str] = []
    provider.add_request_listener(seen.append)
    try:
        call()
    finally:
        provider.remove_request_listener(seen.append)
    return seen


class ChunkedProviderTests(ProviderTests):
    """The contract plus the chunk scheme's crash points; the oracle must be ``chunked``."""

    seal_layouts: ClassVar[tuple[tuple[int, ...], ...]] = ((4096,), (3000, 1, 5000))
    """Chunk sizes whose seals are interrupted at every step (one chunk: a copy)."""

    def test_unsealed_segment_is_chunk_objects(self, provider: Provider, oracle: Oracle) -> None:
        assert oracle.chunked
        key = seg(30)
        fill(provider, key, (10, 1, 300))
        assert oracle.names_of(key) == {
            f"{key}~00000000000000000000",
            f"{key}~00000000000000000010",
            f"{key}~00000000000000000011",
        }

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "seal_layout" in metafunc.fixturenames:
            ids = ["+".join(map(str, sizes)) for sizes in self.seal_layouts]
            metafunc.parametrize("seal_layout", self.seal_layouts, ids=ids)

    def test_seal_interrupted_after_each_step(
        self, provider: Provider, oracle: Oracle, seal_layout: tuple[int, ...]
    ) -> None:
        sizes = seal_layout
        probe = seg(40)
        fill(provider, probe, sizes)
        steps = len(requests_of(provider, lambda: provider.seal(probe)))
        assert steps >= 3
        for number in range(1, steps + 1):
            key = seg(41 + number)
            content = fill(provider, key, sizes, seed=number)
            with pytest.raises(CrashPoint), crash_before_request(provider, number):
                provider.seal(key)
            self._check_readable(provider, oracle, key, content)
            if key in oracle.names():  # the consolidated object exists: sealed
                with pytest.raises(SegmentSealedError):
                    provider.append(key, b"x", len(content))
            else:
                assert provider.append(key, b"", len(content)) == len(content)
            provider.seal(key)
            self._check_readable(provider, oracle, key, content)
            assert oracle.names_of(key) == {key}

    @staticmethod
    def _check_readable(provider: Provider, oracle: Oracle, key: str, content: bytes) -> None:
        assert provider.size(key) == len(content)
        assert provider.read(key, 0, len(content) + 7) == content
        assert provider.read(key, len(content) // 3, 100) == content[len(content) // 3 :][:100]
        assert list(provider.list(key)) == [key]
        assert oracle.content(key) == content

    @pytest.mark.parametrize("sealed", [False, True])
    def test_delete_interrupted_after_each_step(
        self, provider: Provider, oracle: Oracle, sealed: bool
    ) -> None:
        sizes = (100, 200, 300)
        probe = seg(60)
        fill(provider, probe, sizes)
        if sealed:
            provider.seal(probe)
        steps = len(requests_of(provider, lambda: provider.delete(probe)))
        for number in range(1, steps + 1):
            key = seg(61 + number)
            content = fill(provider, key, sizes, seed=number)
            if sealed:
                provider.seal(key)
            with pytest.raises(CrashPoint), crash_before_request(provider, number):
                provider.delete(key)
            try:
                size = provider.size(key)
            except SegmentNotFoundError:
                assert list(provider.list(key)) == []
                # orphan chunks must not join the new segment
                assert provider.append(key, b"n" * 100, 0) == 100
                assert provider.read(key, 0, 1000) == b"n" * 100
                assert oracle.content(key) == b"n" * 100
            else:
                assert size == len(content)
                assert provider.read(key, 0, 1000) == content
            provider.delete(key)
            assert oracle.names_of(key) == set()

    def test_leftover_chunks_of_a_sealed_segment_are_ignored(
        self, provider: Provider, oracle: Oracle
    ) -> None:
        key = seg(80)
        oracle.put(key, b"consolidated")
        oracle.put(f"{key}~00000000000000000000", b"stale chunk")
        assert provider.read(key, 0, 100) == b"consolidated"
        assert provider.size(key) == 12
        assert list(provider.list(key)) == [key]
        assert list(provider.list_sizes(key)) == [(key, 12)]
        with pytest.raises(SegmentSealedError):
            provider.append(key, b"x", 12)
        provider.seal(key)
        assert oracle.names_of(key) == {key}

    def test_orphan_chunks_do_not_make_a_segment(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(81)
        oracle.put(f"{key}~00000000000000000005", b"orphan")
        with pytest.raises(SegmentNotFoundError):
            provider.size(key)
        assert list(provider.list("")) == []
        assert list(provider.list_sizes("")) == []
        assert provider.append(key, b"12345", 0) == 5
        assert provider.read(key, 0, 100) == b"12345"
        assert oracle.names_of(key) == {f"{key}~00000000000000000000"}

    def test_reads_while_a_seal_runs(self, provider: Provider) -> None:
        key = seg(82)
        content = fill(provider, key, (500,) * 8)
        errors: list[BaseException] = []
        done = threading.Event()

        def reader() -> None:
            try:
                while not done.is_set():
                    assert provider.read(key, 0, len(content)) == content
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            provider.seal(key)
            assert provider.read(key, 0, len(content)) == content
        finally:
            done.set()
            thread.join()
        assert not errors, errors

    def test_big_chunks_survive_the_seal(self, provider: Provider, oracle: Oracle) -> None:
        key = seg(83)
        content = fill(provider, key, (70_000, 3, 90_000))
        provider.seal(key)
        assert oracle.content(key) == content
        assert provider.read(key, 69_990, 20) == content[69_990:70_010]
