"""MetadataStore's backend mirror: its key, a put per persist or spaced, recovery from it (§7.5)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tiered.providers.faults import FaultInjectingProvider
from tiered.providers.faults import FaultPlan
from tiered.providers.layout import check_key
from tiered.providers.memory import MemoryProvider

from tiered.errors import InvalidKeyError
from tiered.errors import MetadataError
from tiered.errors import ProviderError
from tiered.errors import ProviderUnavailableError
from tiered.metadata.metadata_store import FILE_NAME
from tiered.metadata.metadata_store import MetadataStore
from tiered.metadata.metadata_store import mirror_key_for
from tiered.metadata.models import parse_metadata

# --- load / persist ------------------------------------------------------------------------------
from .conftest import KEY
from .conftest import disk_document
from .conftest import fill
from .conftest import open_store

# --- mirror --------------------------------------------------------------------------------------


def test_mirror_key_layout() -> None:
    assert KEY == "212d6b50_DefaultCluster/broker-a/config/tieredStoreMetadata.json"
    assert check_key(KEY) == KEY
    with pytest.raises(InvalidKeyError):
        mirror_key_for("DefaultCluster", "a/b")
    with pytest.raises(InvalidKeyError):
        mirror_key_for("", "broker-a")


def test_mirror_needs_a_key(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match="mirror_key"):
        MetadataStore(tmp_path, mirror=MemoryProvider())
    with pytest.raises(InvalidKeyError):
        MetadataStore(tmp_path, mirror=MemoryProvider(), mirror_key="../escape")


def test_mirror_equals_the_local_file_after_each_persist(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)
    for step in range(4):
        store.add_topic(f"T{step}")
        local = store.path.read_bytes()
        assert mirror.read(KEY, 0, mirror.size(KEY)) == local
    fill(store, 6)
    assert mirror.read(KEY, 0, mirror.size(KEY)) == store.path.read_bytes()
    assert store.mirror_count == store.persist_count == 5
    assert list(mirror.list()) == [KEY]


def test_mirror_spaced_puts_at_the_interval_and_at_the_end_once_due(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)

    def mirrored() -> bytes:
        return mirror.read(KEY, 0, mirror.size(KEY))

    store.add_topic("Before")  # mirrored as every persist outside the block
    with store.mirror_spaced(3600):
        for step in range(3):
            store.add_topic(f"T{step}")
            assert store.path.read_bytes() != mirrored()
        assert (store.persist_count, store.mirror_count) == (4, 1)
    assert store.mirror_count == 1  # the interval has not passed: still behind after the block
    with store.batch():  # a batch outside a block (as at close) puts a mirror left behind
        pass
    assert store.mirror_count == 2 and mirrored() == store.path.read_bytes()
    with store.mirror_spaced(0.05):
        store.add_topic("Soon")
        assert store.mirror_count == 2
        time.sleep(0.06)
    assert store.mirror_count == 3 and mirrored() == store.path.read_bytes()  # due at the end
    with store.mirror_spaced(0):  # no interval: every persist mirrors
        store.add_topic("Each")
        assert store.mirror_count == 4
    store.add_topic("After")
    assert (store.persist_count, store.mirror_count) == (7, 5)
    assert mirrored() == store.path.read_bytes()


def test_mirror_spaced_end_failure_is_retried_by_the_next_persist(tmp_path: Path) -> None:
    inner = MemoryProvider()
    mirror = FaultInjectingProvider(inner)
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)
    store.add_topic("First")
    spaced = store.mirror_spaced(0.05)
    spaced.__enter__()
    store.add_topic("Second")  # not mirrored: the interval has not passed
    mirror.set_plan(FaultPlan(rate=1.0, operations={"put"}, error=ProviderUnavailableError))
    time.sleep(0.06)  # due at the end
    with pytest.raises(ProviderUnavailableError):
        spaced.__exit__(None, None, None)
    assert store.mirror_failures == 1
    assert inner.read(KEY, 0, inner.size(KEY)) != store.path.read_bytes()
    mirror.set_plan(FaultPlan())
    store.add_topic("Third")
    assert inner.read(KEY, 0, inner.size(KEY)) == store.path.read_bytes()


def test_mirror_spaced_never_puts_an_older_document_after_a_failed_put(tmp_path: Path) -> None:
    inner = MemoryProvider()
    mirror = FaultInjectingProvider(inner)
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)
    store.add_topic("First")
    with store.mirror_spaced(0.05):
        store.add_topic("Deferred")  # not due: left behind
        time.sleep(0.06)
        mirror.set_plan(FaultPlan(rate=1.0, operations={"put"}, error=ProviderUnavailableError))
        with pytest.raises(ProviderUnavailableError):
            store.add_topic("Newest")  # due, and its put fails
        mirror.set_plan(FaultPlan())
        time.sleep(0.06)
    assert inner.read(KEY, 0, inner.size(KEY)) == store.path.read_bytes()  # the newest


def test_a_local_file_changed_by_hand_is_written_again_before_its_mirror_put(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The mirror's snapshot is read from the local file at the put (never held in memory); a
    file that is no longer the snapshot the store wrote is rewritten from the document first."""
    mirror = MemoryProvider()
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)
    store.add_topic("First")  # mirrored: the interval below starts here
    with store.mirror_spaced(3600):
        store.add_topic("Deferred")  # written locally, its mirror put left for later
        written = store.path.read_bytes()
        store.path.write_bytes(written.replace(b'"Deferred"', b'"Deferrex"'))
    with store.batch():  # puts the mirror left behind
        pass
    assert "is not the snapshot" in caplog.text
    assert store.path.read_bytes() == written == mirror.read(KEY, 0, mirror.size(KEY))
    with store.mirror_spaced(3600):
        store.add_topic("Gone")
        store.path.unlink()
    with store.batch():
        pass
    assert parse_metadata(store.path.read_text(), source="local").topic_metadata_table.keys() == {
        "First",
        "Deferred",
        "Gone",
    }
    assert mirror.read(KEY, 0, mirror.size(KEY)) == store.path.read_bytes()


def test_recover_from_mirror_rebuilds_identical_documents(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    store = open_store(tmp_path / "a", mirror=mirror, mirror_key=KEY)
    fill(store, 5)
    store.update_topic(store.add_topic("Reserved").model_copy(update={"reserve_time": 24}))

    rebuilt = MetadataStore.recover_from_mirror(tmp_path / "b", mirror, KEY)
    assert rebuilt.document() == store.document()
    assert rebuilt.path.read_bytes() == store.path.read_bytes()
    assert rebuilt.mirror is mirror
    rebuilt.add_topic("Continues")  # a loaded store, mirrored again
    assert rebuilt.get_topic("Continues") is not None
    assert rebuilt.topic_serial_number == 6
    assert mirror.read(KEY, 0, mirror.size(KEY)) == rebuilt.path.read_bytes()


def test_recover_refuses_a_valid_local_file_unless_forced(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    remote = open_store(tmp_path / "remote", mirror=mirror, mirror_key=KEY)
    fill(remote, 3)
    local = open_store(tmp_path / "local")
    local.add_topic("LocalOnly")
    before = local.path.read_bytes()
    with pytest.raises(MetadataError, match=r"exists and is valid.*force"):
        MetadataStore.recover_from_mirror(tmp_path / "local", mirror, KEY)
    assert local.path.read_bytes() == before

    forced = MetadataStore.recover_from_mirror(tmp_path / "local", mirror, KEY, force=True)
    assert forced.document() == remote.document()
    assert forced.bak_path.read_bytes() == before  # the replaced local copy is kept


def test_recover_moves_a_damaged_local_file_aside(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    remote = open_store(tmp_path / "remote", mirror=mirror, mirror_key=KEY)
    fill(remote, 2)
    damaged = tmp_path / "local" / "config" / FILE_NAME
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"\x00torn")
    rebuilt = MetadataStore.recover_from_mirror(tmp_path / "local", mirror, KEY)
    assert rebuilt.document() == remote.document()
    aside = list(damaged.parent.glob(f"{FILE_NAME}.corrupt-*"))
    assert len(aside) == 1
    assert aside[0].read_bytes() == b"\x00torn"


def test_the_advised_recover_restores_when_both_files_are_damaged(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)
    fill(store, 3)
    store.path.write_bytes(b"{broken")
    store.bak_path.write_bytes(b"[]")
    with pytest.raises(MetadataError, match=r"`rmq-tiered recover` \(keeps topic ids\)"):
        MetadataStore(tmp_path).load()
    rebuilt = MetadataStore.recover_from_mirror(tmp_path, mirror, KEY)  # what `recover` runs
    assert rebuilt.document() == store.document()
    assert MetadataStore(tmp_path).load().used == "main"
    assert [p.read_bytes() for p in tmp_path.glob(f"config/{FILE_NAME}.corrupt-*")] == [b"{broken"]


def test_recover_without_a_mirror_object_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match=r"no metadata mirror .*brokerClusterName"):
        MetadataStore.recover_from_mirror(tmp_path, MemoryProvider(), KEY)
    assert not (tmp_path / "config" / FILE_NAME).exists()


def test_recover_rejects_a_damaged_mirror(tmp_path: Path) -> None:
    mirror = MemoryProvider()
    mirror.put(KEY, b'{"not":"metadata"}')
    with pytest.raises(MetadataError, match=f"memory:{KEY}: missing top-level keys"):
        MetadataStore.recover_from_mirror(tmp_path, mirror, KEY)
    mirror.put(KEY, b"", overwrite=True)
    with pytest.raises(MetadataError, match="empty"):
        MetadataStore.recover_from_mirror(tmp_path, mirror, KEY)
    assert not (tmp_path / "config" / FILE_NAME).exists()


def test_failing_mirror_keeps_the_local_file_persisted_and_raises(tmp_path: Path) -> None:
    inner = MemoryProvider()
    mirror = FaultInjectingProvider(inner)
    store = open_store(tmp_path, mirror=mirror, mirror_key=KEY)
    store.add_topic("A")
    mirror.set_plan(FaultPlan(rate=1.0, operations={"put"}, error=ProviderUnavailableError))

    with pytest.raises(ProviderUnavailableError) as info:
        store.add_topic("B")
    assert info.value.retriable
    assert "B" in disk_document(store).topic_metadata_table  # durable locally
    assert not store.dirty
    assert store.mirror_failures == 1
    mirrored = parse_metadata(inner.read(KEY, 0, inner.size(KEY)).decode(), source="m")
    assert list(mirrored.topic_metadata_table) == ["A"]

    with pytest.raises(ProviderError), store.batch():  # nothing changed, the mirror is retried
        pass
    assert store.mirror_failures == 2

    mirror.set_plan(FaultPlan())
    with store.batch():
        pass
    assert inner.read(KEY, 0, inner.size(KEY)) == store.path.read_bytes()
    with store.batch():  # up to date: no request at all
        pass
    assert mirror.calls == 1
