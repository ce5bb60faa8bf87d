"""A hypothesis state machine: random append/read/seal/put/delete/list against a dict model.

The model is a ``dict[str, bytes]`` of object contents plus the set of sealed keys; every rule
performs one provider call and checks its result (or its error) against the model.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import precondition
from hypothesis.stateful import rule
from tiered.providers.base import Provider
from tiered.providers.layout import FileType
from tiered.providers.layout import segment_key

from tiered.errors import PositionMismatchError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError

KEYS = (
    segment_key("DefaultCluster", "broker-a", "TopicTest", 0, FileType.COMMIT_LOG, 0),
    segment_key("DefaultCluster", "broker-a", "TopicTest", 0, FileType.COMMIT_LOG, 1000),
    segment_key("DefaultCluster", "broker-a", "TopicTest", 0, FileType.CONSUME_QUEUE, 0),
    segment_key("DefaultCluster", "broker-a", "%RETRY%g", 1, FileType.COMMIT_LOG, 0),
    "212d6b50_DefaultCluster/meta/tieredStoreMetadata.json",
)
PREFIXES = (
    "",
    "212d6b50_DefaultCluster/",
    "212d6b50_DefaultCluster/broker-a/TopicTest/0/COMMIT_LOG/",
    "212d6b50_DefaultCluster/broker-a/TopicTest/0/C",
    "212d6b50_DefaultCluster/m",
    KEYS[0],
)

keys = st.sampled_from(KEYS)
payloads = st.binary(max_size=48)


def wipe(provider: Provider) -> None:
    """Delete every key the provider lists."""
    for key in list(provider.list("")):
        provider.delete(key)


def make_state_machine(provider: Provider) -> type[RuleBasedStateMachine]:
    """A state machine class whose every run starts from ``provider`` wiped clean."""

    class ProviderMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.provider = provider
            wipe(provider)
            self.model: dict[str, bytes] = {}
            self.sealed: set[str] = set()

        def _sealed(self, key: str) -> bool:
            return self.provider.enforces_seal and key in self.sealed

        @rule(key=keys, data=payloads)
        def append_at_end(self, key: str, data: bytes) -> None:
            position = len(self.model.get(key, b""))
            if self._sealed(key):
                try:
                    self.provider.append(key, data, position)
                except SegmentSealedError:
                    return
                raise AssertionError(f"append to sealed {key!r} succeeded")
            assert self.provider.append(key, data, position) == position + len(data)
            self.model[key] = self.model.get(key, b"") + data

        @rule(key=keys, data=payloads, delta=st.integers(-3, 3).filter(bool))
        def append_at_wrong_position(self, key: str, data: bytes, delta: int) -> None:
            current = self.model.get(key)
            position = max(0, len(current or b"") + delta)
            if current is not None and position == len(current):
                return
            try:
                self.provider.append(key, data, position)
            except SegmentSealedError:
                assert self._sealed(key)
            except PositionMismatchError as e:
                expected = e.expected
                assert current is not None and not self._sealed(key)
                assert expected == len(current)
            except SegmentNotFoundError:
                assert current is None and position > 0
            else:
                assert current is None and position == 0, "a wrong position was accepted"
                self.model[key] = data

        @rule(key=keys, position=st.integers(0, 200), length=st.integers(0, 200))
        def read(self, key: str, position: int, length: int) -> None:
            current = self.model.get(key)
            try:
                got = self.provider.read(key, position, length)
            except SegmentNotFoundError:
                assert current is None
            except ReadPastEndError:
                assert current is not None and position >= len(current)
            else:
                assert current is not None
                assert got == current[position : position + length]

        @rule(key=keys)
        def size(self, key: str) -> None:
            current = self.model.get(key)
            try:
                assert self.provider.size(key) == len(current or b"")
            except SegmentNotFoundError:
                assert current is None
            else:
                assert current is not None

        @rule(key=keys)
        def seal(self, key: str) -> None:
            try:
                self.provider.seal(key)
            except SegmentNotFoundError:
                assert key not in self.model
            else:
                assert key in self.model
                self.sealed.add(key)

        @rule(key=keys, data=payloads, overwrite=st.booleans())
        def put(self, key: str, data: bytes, overwrite: bool) -> None:
            try:
                self.provider.put(key, data, overwrite=overwrite)
            except SegmentExistsError:
                assert key in self.model and not overwrite
            else:
                assert overwrite or key not in self.model
                self.model[key] = data
                self.sealed.add(key)

        @rule(key=keys)
        def delete(self, key: str) -> None:
            self.provider.delete(key)
            self.model.pop(key, None)
            self.sealed.discard(key)

        @rule(prefix=st.sampled_from(PREFIXES))
        def list(self, prefix: str) -> None:
            expected = sorted(k for k in self.model if k.startswith(prefix))
            assert [*self.provider.list(prefix)] == expected

        @precondition(lambda self: bool(self.model))
        @rule()
        def read_everything(self) -> None:
            for key, content in self.model.items():
                if content:
                    assert self.provider.read(key, 0, len(content) + 1) == content

        def teardown(self) -> None:
            wipe(self.provider)

    return ProviderMachine
