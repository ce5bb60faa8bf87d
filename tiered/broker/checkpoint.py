"""The broker's ``checkpoint`` file and its liveness markers ``lock`` and ``abort`` (spec §1.4).

``checkpoint`` is 4096 bytes; the first five big-endian i64 are the fields of :class:`Checkpoint`
(4.x brokers leave the last two zero). ``lock`` holds an exclusive POSIX lock on byte [0, 1) while a
broker runs; ``abort`` exists from broker start until a clean shutdown and may hold its PID.

The sidecar never writes here: files are opened ``O_RDONLY``, the lock is only TESTED with
``F_GETLK`` (taking it would make a starting broker fail with "Lock failed, MQ already started"),
and nothing is ever created.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys
from dataclasses import astuple
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from typing import Literal

from tiered.broker.read_only import pread_file
from tiered.errors import CorruptStoreFileError
from tiered.errors import StoreFileNotFoundError

CHECKPOINT_SIZE: Final = 4096
_FIELDS: Final = struct.Struct(">qqqqq")

# struct flock: Linux puts l_type/l_whence first; the BSDs (macOS) put them last.
_FLOCK: Final = struct.Struct("hhqqi4x" if sys.platform.startswith("linux") else "qqihh")


@dataclass(frozen=True)
class Checkpoint:
    """The five fields of ``StoreCheckpoint`` (timestamps in ms, offsets in bytes)."""

    physic_msg_timestamp: int = 0  # store time of the last message flushed to the commitlog
    logics_msg_timestamp: int = 0  # store time of the last message dispatched to a consume queue
    index_msg_timestamp: int = 0  # end timestamp of the last flushed (full) index file
    master_flushed_offset: int = 0  # HA / controller mode
    confirm_phy_offset: int = 0  # controller / duplication mode confirm offset

    def encode(self) -> bytes:
        """The 4096 bytes a broker would write (the writer side, for the generator)."""
        return _FIELDS.pack(*astuple(self)).ljust(CHECKPOINT_SIZE, b"\0")


def decode_checkpoint(buf: bytes, *, path: str | os.PathLike[str] | None = None) -> Checkpoint:
    """Decode a checkpoint from its bytes (at least the 40 bytes of the five fields).

    Raises:
        CorruptStoreFileError: fewer than 40 bytes.
    """
    if len(buf) < _FIELDS.size:
        where = str(path) if path is not None else "checkpoint"
        raise CorruptStoreFileError(
            f"{where}: truncated checkpoint, {len(buf)} bytes but the fields need {_FIELDS.size} "
            f"(a broker writes {CHECKPOINT_SIZE}); restore it from the broker or delete the store",
            path=str(path) if path is not None else None,
            offset=len(buf),
        )
    return Checkpoint(*_FIELDS.unpack_from(buf))


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read ``{storePathRootDir}/checkpoint`` (read-only).

    Raises:
        StoreFileNotFoundError: the file does not exist.
        CorruptStoreFileError: it is shorter than 40 bytes.
    """
    buf = pread_file(
        path,
        CHECKPOINT_SIZE,
        0,
        lambda: StoreFileNotFoundError(
            f"{path}: no checkpoint file; point storePathRootDir at the broker's store"
        ),
    )
    return decode_checkpoint(buf, path=path)


def encode_checkpoint(
    checkpoint: Checkpoint | None = None,
    *,
    physic_msg_timestamp: int = 0,
    logics_msg_timestamp: int = 0,
    index_msg_timestamp: int = 0,
    master_flushed_offset: int = 0,
    confirm_phy_offset: int = 0,
) -> bytes:
    """The 4096-byte checkpoint a broker would write: of ``checkpoint`` if given, else of the
    keyword fields (see :class:`Checkpoint`)."""
    if checkpoint is None:
        checkpoint = Checkpoint(
            physic_msg_timestamp,
            logics_msg_timestamp,
            index_msg_timestamp,
            master_flushed_offset,
            confirm_phy_offset,
        )
    return checkpoint.encode()


BrokerState = Literal["running", "crashed", "stopped", "unknown"]


@dataclass(frozen=True)
class BrokerLiveness:
    """What the ``lock`` and ``abort`` files say about the broker owning a store.

    ``lock_held`` is ``None`` when it could not be tested (no ``lock`` file, or it is unreadable);
    ``lock_holder_pid`` is the holder's PID as the kernel reports it (0 when the holder lives in
    another PID namespace).
    """

    store_root: Path
    lock_exists: bool
    lock_held: bool | None
    lock_holder_pid: int | None
    abort_exists: bool
    abort_pid: int | None

    @property
    def running(self) -> bool:
        """A process holds the broker's lock right now."""
        return self.lock_held is True

    @property
    def state(self) -> BrokerState:
        """``running`` (lock held), ``crashed`` (``abort`` left behind, lock free), ``stopped``
        (clean shutdown or never started), or ``unknown`` (the lock could not be tested)."""
        if self.lock_held:
            return "running"
        if self.lock_held is None and self.lock_exists:
            return "unknown"
        return "crashed" if self.abort_exists else "stopped"


def lock_holder(lock_path: str | os.PathLike[str]) -> int | None:
    """PID of the process holding an exclusive lock on byte [0, 1) of ``lock_path``, else ``None``.

    Asks the kernel with ``F_GETLK`` whether a shared lock could be taken, which is refused exactly
    when someone holds an exclusive one; no lock is ever acquired and the file is opened read-only.

    Raises:
        FileNotFoundError: ``lock_path`` does not exist.
        PermissionError: it cannot be opened for reading.
    """
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        if _FLOCK.format.startswith("hh"):
            probe = _FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, 0, 1, 0)
            l_type, _, _, _, l_pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, probe))
        else:  # pragma: no cover - BSD layout
            probe = _FLOCK.pack(0, 1, 0, fcntl.F_RDLCK, os.SEEK_SET)
            _, _, l_pid, l_type, _ = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, probe))
    finally:
        os.close(fd)
    return None if l_type == fcntl.F_UNLCK else int(l_pid)


def read_abort_pid(abort_path: str | os.PathLike[str]) -> int | None:
    """The PID written into ``abort`` by 5.x brokers, or ``None`` (4.x leaves it empty).

    Raises:
        FileNotFoundError: ``abort_path`` does not exist.
    """
    fd = os.open(abort_path, os.O_RDONLY)
    try:
        text = os.pread(fd, 64, 0).strip()
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def broker_running(store_root: str | os.PathLike[str]) -> BrokerLiveness:
    """Test ``{store_root}/lock`` and ``{store_root}/abort`` without taking or creating anything.

    Raises:
        StoreFileNotFoundError: ``store_root`` is not a directory.
    """
    root = Path(store_root)
    if not root.is_dir():
        raise StoreFileNotFoundError(
            f"{root}: not a directory; point storePathRootDir at the broker's store"
        )
    lock_exists, lock_held, holder = False, None, None
    try:
        holder = lock_holder(root / "lock")
        lock_exists, lock_held = True, holder is not None
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EINVAL, errno.ENOLCK):
            raise
        lock_exists = True
    abort_exists, abort_pid = False, None
    try:
        abort_pid = read_abort_pid(root / "abort")
        abort_exists = True
    except FileNotFoundError:
        pass
    return BrokerLiveness(root, lock_exists, lock_held, holder, abort_exists, abort_pid)
