"""The watch the real-broker tests rely on to prove the sidecar never writes to the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiered.testing.replay_check import ReadOnlyWatch


def test_a_file_open_for_reading_is_seen_and_not_a_violation(tmp_path: Path) -> None:
    (tmp_path / "commitlog").write_bytes(b"x" * 64)
    fd = os.open(tmp_path / "commitlog", os.O_RDONLY)
    try:
        watch = ReadOnlyWatch(os.getpid(), tmp_path)
        watch.sample()
    finally:
        os.close(fd)
    assert watch.seen == {str((tmp_path / "commitlog").resolve())}
    assert watch.violations == []


def test_a_file_open_for_writing_is_a_violation(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "commitlog", os.O_WRONLY | os.O_CREAT)
    try:
        watch = ReadOnlyWatch(os.getpid(), tmp_path)
        watch.sample()
    finally:
        os.close(fd)
    assert len(watch.violations) == 1 and "commitlog" in watch.violations[0]


def test_an_fd_reused_between_the_link_and_fdinfo_reads_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI failure of stop 35: fd N was the commitlog (read-only) when its link was read and
    a tier file opened for writing when its fdinfo was; the inodes differ, so no violation."""
    store, tier = tmp_path / "store", tmp_path / "tier"
    store.mkdir()
    tier.mkdir()
    (store / "commitlog").write_bytes(b"x")
    fd = os.open(store / "commitlog", os.O_RDONLY)
    real_readlink = os.readlink

    def readlink_then_reuse(path: str | os.PathLike[str]) -> str:
        target = real_readlink(path)
        if str(path).endswith(f"/fd/{fd}"):
            os.close(fd)
            assert os.open(tier / "file", os.O_WRONLY | os.O_CREAT) == fd
        return target

    monkeypatch.setattr(os, "readlink", readlink_then_reuse)
    watch = ReadOnlyWatch(os.getpid(), store)
    try:
        watch.sample()
    finally:
        os.close(fd)
    assert watch.violations == []
