"""checkpoint, lock and abort: real files, round trips, bad input, a live lock held by a child."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered.broker.checkpoint import CHECKPOINT_SIZE
from tiered.broker.checkpoint import Checkpoint
from tiered.broker.checkpoint import broker_running
from tiered.broker.checkpoint import decode_checkpoint
from tiered.broker.checkpoint import encode_checkpoint
from tiered.broker.checkpoint import lock_holder
from tiered.broker.checkpoint import read_abort_pid
from tiered.broker.checkpoint import read_checkpoint
from tiered.errors import CorruptStoreFileError
from tiered.errors import StoreFileNotFoundError

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "real"
I64 = st.integers(-(2**63), 2**63 - 1)

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
sys.stdin.read()
"""


def real() -> Path:
    if not REAL.is_dir():
        pytest.fail(f"{REAL} is missing: the shared test data must sit beside the repo (../shared)")
    return REAL


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A store root whose ``lock`` is held by a child process (as a running broker holds it)."""
    (tmp_path / "lock").write_bytes(b"lock")
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        yield tmp_path, child.pid
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()


# --- checkpoint ---------------------------------------------------------------------------------


def test_every_real_checkpoint_parses() -> None:
    paths = sorted(real().rglob("checkpoint"))
    assert len(paths) >= 10
    for p in paths:
        raw = p.read_bytes()
        cp = read_checkpoint(p)
        assert len(raw) == CHECKPOINT_SIZE
        assert cp.physic_msg_timestamp >= 0
        assert cp.index_msg_timestamp == 0  # all samples (see PROVENANCE.md)
        assert encode_checkpoint(cp) == raw  # nothing beyond the five fields


def test_real_checkpoint_values() -> None:
    cp = read_checkpoint(real() / "gxstax__rocketmq/store/checkpoint")
    assert cp == Checkpoint(1552479276583, 1552479313028, 0, 0, 0)
    cp = read_checkpoint(real() / "super-golden__rocketMq/store/checkpoint")
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == 1567927334354


@given(I64, I64, I64, I64, I64)
def test_checkpoint_round_trip(a: int, b: int, c: int, d: int, e: int) -> None:
    cp = Checkpoint(a, b, c, d, e)
    raw = cp.encode()
    assert len(raw) == CHECKPOINT_SIZE
    assert raw[40:] == bytes(CHECKPOINT_SIZE - 40)
    assert decode_checkpoint(raw) == cp
    assert encode_checkpoint(cp) == raw
    kw = encode_checkpoint(
        physic_msg_timestamp=a,
        logics_msg_timestamp=b,
        index_msg_timestamp=c,
        master_flushed_offset=d,
        confirm_phy_offset=e,
    )
    assert kw == raw


def test_checkpoint_byte_layout() -> None:
    raw = encode_checkpoint(physic_msg_timestamp=0x0102030405060708, confirm_phy_offset=-1)
    assert raw[:8].hex() == "0102030405060708"
    assert raw[32:40] == b"\xff" * 8


@pytest.mark.parametrize("size", [0, 20, 39])
def test_truncated_checkpoint(tmp_path: Path, size: int) -> None:
    p = tmp_path / "checkpoint"
    p.write_bytes(bytes(size))
    with pytest.raises(CorruptStoreFileError, match=f"truncated checkpoint, {size} bytes") as e:
        read_checkpoint(p)
    assert e.value.path == str(p)


def test_short_but_whole_checkpoint_is_read(tmp_path: Path) -> None:
    p = tmp_path / "checkpoint"
    p.write_bytes(Checkpoint(1, 2, 3, 4, 5).encode()[:40])
    assert read_checkpoint(p) == Checkpoint(1, 2, 3, 4, 5)


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(StoreFileNotFoundError, match="no checkpoint file"):
        read_checkpoint(tmp_path / "checkpoint")


# --- lock / abort ---------------------------------------------------------------------------------


def test_every_real_lock_and_abort() -> None:
    locks = sorted(real().rglob("lock"))
    aborts = sorted(real().rglob("abort"))
    assert len(locks) >= 8
    assert len(aborts) >= 6
    for p in locks:
        assert p.read_bytes() == b"lock"
        assert lock_holder(p) is None
    for p in aborts:
        assert read_abort_pid(p) is None  # 4.x brokers leave it empty
    for root in {p.parent for p in locks + aborts}:
        before = snapshot(root)
        live = broker_running(root)
        assert snapshot(root) == before  # nothing created, nothing touched
        assert not live.running
        assert live.lock_exists == (root / "lock").exists()
        assert live.state == ("crashed" if (root / "abort").exists() else "stopped")


def test_lock_held_by_another_process(held_lock: tuple[Path, int]) -> None:
    root, pid = held_lock
    (root / "abort").write_text(str(pid))
    before = snapshot(root)
    live = broker_running(root)
    assert snapshot(root) == before
    assert live.running
    assert live.state == "running"
    assert (live.lock_held, live.lock_holder_pid, live.abort_exists, live.abort_pid) == (
        True,
        pid,
        True,
        pid,
    )
    assert lock_holder(root / "lock") == pid


def test_lock_released(tmp_path: Path) -> None:
    (tmp_path / "lock").write_bytes(b"lock")
    assert broker_running(tmp_path).state == "stopped"
    # the probe took no lock: a "broker" can still lock the file right after
    child = subprocess.run(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / "lock")],
        input="",
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert child.stdout.strip() == "locked"


def test_read_only_store(held_lock: tuple[Path, int]) -> None:
    root, pid = held_lock
    os.chmod(root / "lock", 0o444)
    os.chmod(root, 0o555)
    try:
        assert broker_running(root).lock_holder_pid == pid
    finally:
        os.chmod(root, 0o755)


def test_no_lock_file(tmp_path: Path) -> None:
    live = broker_running(tmp_path)
    assert (live.lock_exists, live.lock_held, live.state) == (False, None, "stopped")
    (tmp_path / "abort").write_text("4242")
    live = broker_running(tmp_path)
    assert (live.abort_pid, live.state) == (4242, "crashed")
    assert not (tmp_path / "lock").exists()


def test_abort_contents(tmp_path: Path) -> None:
    p = tmp_path / "abort"
    for text, pid in [("", None), ("123", 123), ("123\n", 123), ("pid", None)]:
        p.write_text(text)
        assert read_abort_pid(p) == pid


def test_store_root_must_exist(tmp_path: Path) -> None:
    with pytest.raises(StoreFileNotFoundError, match="not a directory"):
        broker_running(tmp_path / "nope")
