"""Leftovers of a ``kill -9``: a posix put killed between its temporary file and the rename
leaves ``.{name}.{uuid}.tmp``; the next start removes every such file under the broker's part of
the backend, and nothing else."""

from __future__ import annotations

import uuid
from pathlib import Path

from tiered.providers import PosixProvider
from tiered.providers import build_provider

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
    torn = leftover(mirror.parent, mirror.name)
    with Sidecar(cfg, build_provider(cfg)):
        assert not torn.exists()
    assert mirror.exists()
