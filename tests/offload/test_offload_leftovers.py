"""Leftovers of a ``kill -9``: a posix put killed between its temporary file and the rename
leaves ``.{name}.{uuid}.tmp``; the next start removes every such file under the broker's part of
the backend, and nothing else."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

from tiered.providers import PosixProvider
from tiered.providers import build_provider

from tiered.core.clean_stop import CLEAN_STOP_NAME
from tiered.core.sidecar import Sidecar
from tiered.metadata import mirror_key_for
from tiered.testing.sample_tier import SidecarCase


def leftover(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    path.write_bytes(b"half a put")
    return path


def test_clean_temporary_removes_only_interrupted_puts_under_the_prefix(tmp_path: Path) -> None:
    p = PosixProvider(tmp_path)
    p.put("c/b/config/meta.json", b"{}")
    p.put("c/b/T/0/COMMIT_LOG/x", b"data")
    inside = [leftover(tmp_path / "c/b/config", "meta.json"), leftover(tmp_path / "c/b/T/0", "y")]
    outside = leftover(tmp_path / "c/other", "meta.json")
    foreign = tmp_path / "c/b/config/.keep.tmp"  # not the put's pattern
    foreign.write_bytes(b"")
    assert p.clean_temporary("c/b/") == 2
    assert not any(path.exists() for path in inside)
    assert outside.exists() and foreign.exists()
    assert sorted(p.list("c/b/")) == ["c/b/T/0/COMMIT_LOG/x", "c/b/config/meta.json"]


def test_start_removes_a_killed_mirror_put(offload_case: SidecarCase) -> None:
    cfg = offload_case.config(offload_case.store(), "posix")
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
    mirror = Path(cfg.tiered_store_file_path) / mirror_key_for("DefaultCluster", "broker-a")
    assert mirror.exists()
    # what a kill -9 during the mirror put leaves: a torn put, and no record of a clean stop
    torn = leftover(mirror.parent, mirror.name)
    (cfg.tiered_data_dir / CLEAN_STOP_NAME).unlink()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        assert sidecar.wait_cleaned(30)
        assert not torn.exists()
    assert mirror.exists()


def test_clean_temporary_leaves_a_put_in_progress_alone(tmp_path: Path) -> None:
    """The start cleans beside the running sidecar: a put of the same provider, half written
    when the clean walks past its temporary file, still completes."""
    p = PosixProvider(tmp_path)
    stale = leftover(tmp_path / "c/b/config", "meta.json")
    seen: list[list[Path]] = []

    class Halves(io.RawIOBase):
        """Half the body, then (the clean walks past) the other half."""

        def __init__(self) -> None:
            self.parts = [b"first half, ", b"second half"]

        def readable(self) -> bool:
            return True

        def readinto(self, buf: Any) -> int:
            if not self.parts:
                return 0
            if len(self.parts) == 1:  # the first half is in the temporary file
                seen.append(sorted((tmp_path / "c/b/config").glob(".meta.json.*.tmp")))
                assert p.clean_temporary("c/b/") == 1  # the stale one only
            part = self.parts.pop(0)
            buf[: len(part)] = part
            return len(part)

    p.put("c/b/config/meta.json", io.BufferedReader(Halves()), overwrite=True)
    assert p.read("c/b/config/meta.json", 0, 100) == b"first half, second half"
    assert len(seen[0]) == 2 and stale in seen[0]  # the put's own and the stale one
    assert not stale.exists()
    assert list((tmp_path / "c/b/config").glob("*.tmp")) == []


def test_clean_temporary_does_not_look_into_pruned_directories(tmp_path: Path) -> None:
    p = PosixProvider(tmp_path)
    kept = leftover(tmp_path / "c/b/T/0/COMMIT_LOG", "x")
    gone = [leftover(tmp_path / "c/b/T", "y"), leftover(tmp_path / "c/b/T/1x/INDEX", "z")]
    looked: list[str] = []

    def prune(prefix: str) -> bool:
        looked.append(prefix)
        return prefix == "c/b/T/0/"

    assert p.clean_temporary("c/b/", prune) == 2
    assert kept.exists() and not any(path.exists() for path in gone)
    assert "c/b/T/0/" in looked and not any(
        x.startswith("c/b/T/0/") and x != "c/b/T/0/" for x in looked
    )


def test_start_looks_for_leftovers_beside_the_queues_not_in_them(
    offload_case: SidecarCase,
) -> None:
    """Queue directories are only appended to; the metadata mirror's and the key index's
    directories (``rmq_sys_INDEX`` is laid out as a queue) are put into."""
    cfg = offload_case.config(offload_case.store(), "posix")
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
    broker = Path(cfg.tiered_store_file_path) / mirror_key_for("DefaultCluster", "broker-a")
    broker = broker.parent.parent
    queue = next(d for d in sorted(broker.glob("*/0/COMMIT_LOG")))
    in_queue = leftover(queue, "00000000000000000000")
    in_index = leftover(broker / "rmq_sys_INDEX" / "0" / "INDEX", "00000000000000000000")
    (cfg.tiered_data_dir / CLEAN_STOP_NAME).unlink()  # as the kill -9 that left them
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        assert sidecar.wait_cleaned(30)
        assert in_queue.exists() and not in_index.exists()


def test_a_start_after_a_clean_stop_walks_nowhere(offload_case: SidecarCase) -> None:
    """A clean stop's puts all finished: the next start does not look for leftovers."""
    cfg = offload_case.config(offload_case.store(), "posix")
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        assert sidecar._cleaning is not None  # the first start walked
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        assert sidecar.clean_start and sidecar._cleaning is None
