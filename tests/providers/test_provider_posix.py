"""The posix provider passes the conformance suite and writes upstream's PosixFileSegment layout."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from tiered.providers import BytesLike
from tiered.providers import FileType
from tiered.providers import MemoryProvider
from tiered.providers import MetricsProvider
from tiered.providers import PosixProvider
from tiered.providers import RequestCounts
from tiered.providers import WrappedProvider
from tiered.providers import posix as posix_module
from tiered.providers import segment_key
from tiered.providers.testing import HOSTILE_KEYS
from tiered.providers.testing import DirectoryOracle
from tiered.providers.testing import Oracle
from tiered.providers.testing import ProviderTests

from tiered.errors import InvalidKeyError
from tiered.errors import PositionMismatchError
from tiered.errors import SegmentNotFoundError


class TestPosixProvider(ProviderTests):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> PosixProvider:
        return PosixProvider(tmp_path / "tiered")

    @pytest.fixture
    def oracle(self, provider: PosixProvider) -> Oracle:
        return DirectoryOracle(provider.root)


def test_a_deferred_append_leaves_its_fdatasync_to_sync(tmp_path: Path) -> None:
    """``append_deferred`` writes without an ``fdatasync`` (a new file's directory is still
    synced at once); ``sync`` makes one; an absent key cannot be synced."""
    provider = PosixProvider(tmp_path)
    key = segment_key("C", "broker-a", "T", 0, FileType.CONSUME_QUEUE, 0)
    requests = RequestCounts()
    provider.add_request_listener(requests)
    provider.append(key, b"a" * 20, 0)
    assert requests.counts["FSYNC"] >= 2  # the data and the new name
    requests.counts.clear()
    provider.append_deferred(key, b"b" * 40, 20)
    assert requests.counts == {"WRITE": 1}
    provider.sync(key)
    assert requests.counts["FSYNC"] == 1
    assert provider.read(key, 0, 100) == b"a" * 20 + b"b" * 40
    with pytest.raises(SegmentNotFoundError):
        provider.sync(segment_key("C", "broker-a", "T", 1, FileType.CONSUME_QUEUE, 0))


def test_a_round_of_many_appends_lands_each_alone_as_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hundreds of deferred appends in one call, most to files without a kept descriptor (made
    by the compiled kernel at once): each lands at its file's end or is refused alone, exactly
    as the memory provider answers the same round."""
    posix, memory = PosixProvider(tmp_path / "tier"), MemoryProvider()
    bulk = [0]
    many = posix._append_closed_many

    def counted(closed: Any, out: Any) -> None:
        bulk[0] += len(closed)
        many(closed, out)

    monkeypatch.setattr(posix, "_append_closed_many", counted)
    keys = [segment_key("c", "b", "T", i, FileType.COMMIT_LOG, 0) for i in range(300)]
    for p in (posix, memory):
        for i, k in enumerate(keys):
            p.append(k, bytes([i % 251]) * (1 + i % 9), 0)
    appends: list[tuple[str, BytesLike, int]] = []
    for i, k in enumerate(keys):
        at = 1 + i % 9 + (1 if i % 10 == 3 else 0)  # every tenth at a wrong position
        body = bytes([i % 13]) * (1 + i % 13)
        appends.append((k, memoryview(body) if i % 2 else body, at))
    absent = [segment_key("c", "b", "T", 500 + i, FileType.COMMIT_LOG, 0) for i in range(3)]
    appends += [(k, b"x", 4) for k in absent]
    new = [segment_key("c", "b", f"N{i % 7}", i, FileType.CONSUME_QUEUE, 0) for i in range(90)]
    appends += [(k, b"n" * (1 + i % 5), 0) for i, k in enumerate(new)]  # made, with directories
    appends += [(keys[i], b"z", 0) for i in range(0, 300, 60)]  # at 0 of a file that has bytes
    appends.insert(150, ("../outside", b"x", 4))  # a key no file may have: refused alone
    got = posix.append_deferred_many(appends)
    want = memory.append_deferred_many(appends)
    assert bulk[0] > posix_module.BULK_APPENDS  # past the descriptors kept
    assert isinstance(got[150], InvalidKeyError)
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w) and (not isinstance(w, int) or g == w), (g, w)
        if isinstance(w, PositionMismatchError):
            assert isinstance(g, PositionMismatchError)
            assert (g.key, g.expected, g.given) == (w.key, w.expected, w.given)
    assert sum(isinstance(g, PositionMismatchError) for g in got) == 30 + 5
    assert sum(isinstance(g, SegmentNotFoundError) for g in got) == 3
    assert not any(k in posix._open for k in new)  # no descriptor kept of the files made
    posix.sync_many(keys + new)
    for k in keys + new:
        assert posix.read(k, 0, 100) == memory.read(k, 0, 100)
    assert not any(posix.exists(k) for k in absent)


def test_a_deferred_append_s_new_names_are_synced_with_its_data(tmp_path: Path) -> None:
    """A deferred append that creates a file (and its directories) leaves their directory syncs
    to the key's ``sync``; ``sync_many`` of many keys covers them all with its one ``syncfs``."""
    provider = PosixProvider(tmp_path)
    requests = RequestCounts()
    provider.add_request_listener(requests)
    key = segment_key("C", "broker-a", "T", 0, FileType.COMMIT_LOG, 0)
    provider.append_deferred(key, b"x" * 20, 0)
    assert "FSYNC" not in requests.counts  # no directory synced yet
    provider.sync(key)
    # the data, then the file's directory and each new directory's parent (deepest first)
    assert requests.counts["FSYNC"] == 1 + len(Path(key).parts)
    requests.counts.clear()
    provider.sync(key)
    assert requests.counts["FSYNC"] == 1  # the names are durable: only the data again

    requests.counts.clear()
    keys = [segment_key("C", "broker-a", f"T{t}", q, FileType.COMMIT_LOG, 0)
            for t in range(40) for q in range(4)]  # fmt: skip
    for k in keys:
        provider.append_deferred(k, b"y" * 10, 0)
    provider.sync_many(keys)
    if posix_module._syncfs is not None:
        assert requests.counts["FSYNC"] == 1
    else:  # key by key: each key's data and the directories it created
        assert requests.counts["FSYNC"] > len(keys)
    assert not provider._unsynced_dirs
    assert all(provider.read(k, 0, 10) == b"y" * 10 for k in keys)

    gone = segment_key("C", "broker-a", "Gone", 0, FileType.COMMIT_LOG, 0)
    provider.append_deferred(gone, b"z", 0)
    provider.delete(gone)  # never synced: nothing of it is kept
    assert not provider._unsynced_dirs


def test_a_bulk_round_s_new_files_leave_their_names_to_sync_as_one_by_one(tmp_path: Path) -> None:
    """New files made by the compiled kernel in one bulk call leave the same directories to
    sync as the same appends made one by one: each file's directory with its key, and every
    directory that gained an entry with some key of the round."""
    one, bulk = PosixProvider(tmp_path / "one"), PosixProvider(tmp_path / "bulk")
    for p in (one, bulk):
        p.root.mkdir()
    keys = [segment_key("C", "broker-a", f"T{t}", q, ft, 0)
            for t in range(20) for q in range(4)
            for ft in (FileType.COMMIT_LOG, FileType.CONSUME_QUEUE)]  # fmt: skip
    assert len(keys) >= posix_module.BULK_APPENDS
    for k in keys:
        one.append_deferred(k, k.encode(), 0)
    assert bulk.append_deferred_many([(k, k.encode(), 0) for k in keys]) == [len(k) for k in keys]

    def deferred(p: PosixProvider) -> set[Path]:
        return {Path(d).relative_to(p.root) for dirs in p._unsynced_dirs.values() for d in dirs}

    assert deferred(bulk) == deferred(one)
    for k in keys:
        assert str(bulk.path(k).parent) in bulk._unsynced_dirs[k]
    names = sum(len(dirs) for dirs in bulk._unsynced_dirs.values())
    requests = RequestCounts()
    bulk.add_request_listener(requests)
    for k in keys:
        bulk.sync(k)
    assert requests.counts["FSYNC"] == len(keys) + names  # each key's data, then its names
    assert not bulk._unsynced_dirs
    assert all(bulk.read(k, 0, 200) == k.encode() for k in keys)


def test_which_providers_defer_their_syncs(tmp_path: Path) -> None:
    """Only a file backend defers; a wrapper defers as its inner provider does, unless it
    watches appends and not deferred ones (it then gets every append, durable)."""

    class Watching(WrappedProvider):
        def append(self, key: str, data: BytesLike, position: int) -> int:
            return self.inner.append(key, data, position)

    posix = PosixProvider(tmp_path)
    assert posix.defers_sync and MetricsProvider(posix).defers_sync
    assert not MemoryProvider().defers_sync and not MetricsProvider(MemoryProvider()).defers_sync
    watching = Watching(posix)
    assert not watching.defers_sync
    key = segment_key("C", "broker-a", "T", 0, FileType.CONSUME_QUEUE, 0)
    requests = RequestCounts()
    posix.add_request_listener(requests)
    watching.append_deferred(key, b"x" * 20, 0)  # through its append: synced
    assert requests.counts["FSYNC"] >= 1


def test_files_land_where_the_java_broker_looks(tmp_path: Path) -> None:
    """Spec V2: the same path a Java PosixFileSegment with tieredStoreFilePath opens."""
    root = tmp_path / "mnt" / "tiered"
    provider = PosixProvider(str(root))
    commit_log = segment_key("DefaultCluster", "broker-a", "TopicTest", 3, FileType.COMMIT_LOG, 0)
    cq = segment_key("DefaultCluster", "broker-a", "TopicTest", 3, FileType.CONSUME_QUEUE, 2000)
    index = segment_key("DefaultCluster", "broker-a", "rmq_sys_INDEX", 0, FileType.INDEX, 0)
    provider.append(commit_log, b"units", 0)
    provider.append(cq, b"\x00" * 20, 0)
    provider.put(index, b"compacted")
    base = f"{root}/212d6b50_DefaultCluster/broker-a"
    assert (Path(f"{base}/TopicTest/3/COMMIT_LOG/cfcd208400000000000000000000")).read_bytes() == (
        b"units"
    )
    assert (
        Path(f"{base}/TopicTest/3/CONSUME_QUEUE/08f90c1a00000000000000002000").stat().st_size == 20
    )
    assert Path(f"{base}/rmq_sys_INDEX/0/INDEX/cfcd208400000000000000000000").read_bytes() == (
        b"compacted"
    )
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == [
        "08f90c1a00000000000000002000",
        "cfcd208400000000000000000000",
        "cfcd208400000000000000000000",
    ]


def test_empty_file_path_means_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    provider = PosixProvider("")
    provider.append("a/b", b"x", 0)
    assert (tmp_path / "a" / "b").read_bytes() == b"x"
    assert provider.root == tmp_path


def test_files_are_readable_by_others_as_umask_allows(tmp_path: Path) -> None:
    provider = PosixProvider(tmp_path)
    provider.append("seg", b"x", 0)
    provider.put("whole", b"y")
    umask = os.umask(0o022)
    os.umask(umask)
    for name in ("seg", "whole"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o666 & ~umask


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_hostile_keys_create_nothing_outside_the_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    provider = PosixProvider(root)
    for call in (
        lambda: provider.append(key, b"x", 0),
        lambda: provider.put(key, b"x", overwrite=True),
        lambda: provider.delete(key),
    ):
        with pytest.raises(ValueError, match=r"key|component"):
            call()
    assert [p.name for p in tmp_path.iterdir()] == ["root"]
    assert list(root.iterdir()) == []


def test_a_key_that_names_a_directory_is_not_an_object(tmp_path: Path) -> None:
    provider = PosixProvider(tmp_path)
    provider.append("dir/file", b"x", 0)
    assert not provider.exists("dir")
    provider.delete("dir")
    assert provider.exists("dir/file")


def test_put_leaves_no_temporary_files(tmp_path: Path) -> None:
    provider = PosixProvider(tmp_path)
    provider.put("a/b", b"1")
    provider.put("a/b", b"2", overwrite=True)
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b"]
    assert list(provider.list()) == ["a/b"]


def test_listing_skips_foreign_names(tmp_path: Path) -> None:
    provider = PosixProvider(tmp_path)
    provider.append("q/seg", b"x", 0)
    (tmp_path / "q" / ".hidden").write_bytes(b"")
    (tmp_path / "q" / "with~tilde").write_bytes(b"")
    assert list(provider.list()) == ["q/seg"]


def _open_descriptors(root: Path) -> int:
    """This process's descriptors open on files below ``root`` (other tests' threads and the
    collector open and close others meanwhile)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(root) + os.sep)
    return count


def test_appends_and_syncs_reuse_one_descriptor_per_key(tmp_path: Path) -> None:
    """A key's appends and syncs go through the descriptor its first append opened: the number
    of open files does not grow with the appends, and ``close`` releases it (the provider then
    opens the file again on its next append)."""
    provider = PosixProvider(tmp_path)
    key = segment_key("C", "broker-a", "T", 0, FileType.COMMIT_LOG, 0)
    before = _open_descriptors(tmp_path)
    at = 0
    for i in range(50):
        at = provider.append_deferred(key, bytes([i]) * 100, at)
        provider.sync(key)
    assert _open_descriptors(tmp_path) == before + 1
    provider.close()
    assert _open_descriptors(tmp_path) == before
    assert provider.append(key, b"z" * 10, at) == at + 10
    assert (
        provider.read(key, 0, at + 10) == b"".join(bytes([i]) * 100 for i in range(50)) + b"z" * 10
    )
    provider.seal(key)  # a sealed file grows no more: its descriptor is closed
    assert _open_descriptors(tmp_path) == before


def test_descriptors_kept_open_are_bounded(tmp_path: Path) -> None:
    """At most OPEN_FILES descriptors stay open, the least recently used closed first; a key
    whose descriptor was closed opens its file again."""
    from tiered.providers import posix

    provider = PosixProvider(tmp_path)
    keys = [segment_key("C", "b", "T", q, FileType.CONSUME_QUEUE, 0) for q in range(40)]
    before = _open_descriptors(tmp_path)
    old = posix.OPEN_FILES
    posix.OPEN_FILES = 16
    try:
        for k in keys:
            provider.append(k, b"u" * 20, 0)
        assert _open_descriptors(tmp_path) == before + 16
        for k in keys:
            provider.append_deferred(k, b"v" * 20, 20)
            provider.sync(k)
        assert _open_descriptors(tmp_path) == before + 16
    finally:
        posix.OPEN_FILES = old
        provider.close()
    assert all(provider.read(k, 0, 100) == b"u" * 20 + b"v" * 20 for k in keys)


def test_a_kept_descriptor_never_writes_past_a_change_behind_the_provider(tmp_path: Path) -> None:
    """The file behind a kept descriptor may change without this provider: another writer
    appends (the next append at the old size is refused with the real size), the file is
    deleted (an append into the deleted file would be lost: it fails as for a file never
    opened, and an append at 0 creates a new one) or replaced by a put (the append checks the
    new file)."""
    provider = PosixProvider(tmp_path)
    other = PosixProvider(tmp_path)
    key = segment_key("C", "broker-a", "T", 0, FileType.COMMIT_LOG, 0)
    provider.append(key, b"a" * 10, 0)
    other.append(key, b"b" * 5, 10)
    with pytest.raises(PositionMismatchError) as mismatch:
        provider.append(key, b"c" * 5, 10)
    assert mismatch.value.expected == 15
    assert provider.append(key, b"c" * 5, 15) == 20

    os.unlink(provider.path(key))
    with pytest.raises(SegmentNotFoundError):
        provider.append(key, b"d" * 5, 20)
    assert provider.append(key, b"e" * 3, 0) == 3
    assert provider.read(key, 0, 100) == b"eee"

    other.put(key, b"f" * 7, overwrite=True)
    with pytest.raises(PositionMismatchError):
        provider.append(key, b"g", 3)
    assert provider.append(key, b"g", 7) == 8
    assert provider.read(key, 0, 100) == b"f" * 7 + b"g"


def test_a_provider_with_open_descriptors_pickles(tmp_path: Path) -> None:
    """A Spark executor gets the provider without its descriptors and opens its own."""
    import pickle

    provider = PosixProvider(tmp_path)
    key = segment_key("C", "broker-a", "T", 0, FileType.COMMIT_LOG, 0)
    provider.append(key, b"a" * 10, 0)
    copy = pickle.loads(pickle.dumps(provider))
    assert copy.append(key, b"b" * 10, 10) == 20
    assert provider.append(key, b"c" * 10, 20) == 30
    assert copy.read(key, 0, 30) == b"a" * 10 + b"b" * 10 + b"c" * 10
    copy.close()
    provider.close()


def test_a_provider_dropped_without_close_closes_its_descriptors(tmp_path: Path) -> None:
    import gc

    before = _open_descriptors(tmp_path)
    provider = PosixProvider(tmp_path)
    provider.append(segment_key("C", "b", "T", 0, FileType.COMMIT_LOG, 0), b"x", 0)
    assert _open_descriptors(tmp_path) == before + 1
    del provider
    gc.collect()
    assert _open_descriptors(tmp_path) == before


def test_bulk_deferred_appends_keep_no_descriptor_of_existing_files(tmp_path: Path) -> None:
    """``append_deferred_many`` writes a file that has no kept descriptor through one it opens
    and closes (a round's thousands of files would only push each other out of the kept ones);
    a wrong position, a file replaced since and a file deleted since are reported for their
    append alone, one write is counted per append, and ``sync_many`` makes the rest durable."""
    provider = PosixProvider(tmp_path)
    keys = [segment_key("C", "b", "T", q, FileType.COMMIT_LOG, 0) for q in range(6)]
    for k in keys:
        provider.append(k, b"a" * 10, 0)
    provider.close()
    os.unlink(provider.path(keys[4]))
    provider.path(keys[5]).write_bytes(b"b" * 3)  # replaced: 3 bytes now
    before = _open_descriptors(tmp_path)
    requests = RequestCounts()
    provider.add_request_listener(requests)
    appends = [(k, f"{i}".encode() * 5, 10) for i, k in enumerate(keys)]
    appends[2] = (keys[2], b"x", 7)
    done = provider.append_deferred_many(appends)
    assert done[:2] == [15, 15] and done[3] == 15
    assert isinstance(done[2], PositionMismatchError) and done[2].expected == 10
    assert isinstance(done[4], SegmentNotFoundError)
    assert isinstance(done[5], PositionMismatchError) and done[5].expected == 3
    assert _open_descriptors(tmp_path) == before
    assert requests.counts["WRITE"] == 3
    provider.sync_many([keys[0], keys[1], keys[3]])
    for i in (0, 1, 3):
        assert provider.read(keys[i], 0, 100) == b"a" * 10 + f"{i}".encode() * 5
    assert provider.read(keys[2], 0, 100) == b"a" * 10
