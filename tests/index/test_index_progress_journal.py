"""The key index's progress copies write in proportion to the queues that moved: a snapshot of
every queue plus a journal of the rows that changed, compacted when the journal would outgrow the
snapshot. A load reads exactly what was saved; a torn journal line, a journal of an earlier
snapshot or a snapshot read from ``.bak`` make the copy lag, never lead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiered.index import progress as progress_mod
from tiered.index.progress import FAST_NAME
from tiered.index.progress import PROGRESS_NAME
from tiered.index.progress import IndexProgress
from tiered.index.progress_journal import SMALL_ROWS

QUEUES = 2000


def _many(tmp_path: Path) -> IndexProgress:
    p = IndexProgress(tmp_path)
    for q in range(QUEUES):
        assert p.advance(f"T{q // 8}", q % 8, 0, 10)
    p.save()
    assert p.save_fast(force=True) == bool(p._boot)
    return p


@pytest.fixture
def durable_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No boot id: only the durable copy is written and read."""
    monkeypatch.setattr(progress_mod, "boot_id", lambda: "")


def _journal(tmp_path: Path, name: str = PROGRESS_NAME) -> Path:
    return tmp_path / name.replace(".json", ".journal")


def _boot(p: IndexProgress) -> None:
    if not p._boot:
        pytest.skip("no boot id: the fast copy is never written")


def test_a_save_after_the_first_appends_only_the_rows_that_moved(tmp_path: Path) -> None:
    p = _many(tmp_path)
    _boot(p)
    snapshot = (tmp_path / PROGRESS_NAME).stat().st_size
    fast_snapshot = (tmp_path / FAST_NAME).stat().st_size
    assert _journal(tmp_path).stat().st_size == 0
    for q in range(10):
        assert p.advance(f"T{q // 8}", q % 8, 10, 20)
    p.forget("T100", 0)
    p.save()
    assert p.save_fast(force=True)
    for name, whole in ((PROGRESS_NAME, snapshot), (FAST_NAME, fast_snapshot)):
        assert (tmp_path / name).stat().st_size == whole  # not rewritten
        line = _journal(tmp_path, name).read_bytes()
        assert 0 < len(line) < whole / 50 and line.count(b"\n") == 1
    for fresh in (IndexProgress(tmp_path),):
        assert fresh.load()
        offsets = fresh.items()
        assert len(offsets) == QUEUES - 1 and ("T100", 0) not in offsets
        assert offsets[("T0", 3)] == 20 and offsets[("T5", 0)] == 10
    p.save()  # nothing moved: nothing written
    assert _journal(tmp_path).read_bytes().count(b"\n") == 1


def test_the_journal_is_compacted_before_it_outgrows_the_snapshot(
    tmp_path: Path, durable_only: None
) -> None:
    p = _many(tmp_path)
    inode = (tmp_path / PROGRESS_NAME).stat().st_ino
    lines = 0
    for round_ in range(1, 6):  # 600 of 2,000 queues move per save
        for q in range(600):
            p.advance(f"T{q // 8}", q % 8, 10 * round_, 10 * round_ + 10)
        p.save()
        lines += 1
        if (tmp_path / PROGRESS_NAME).stat().st_ino != inode:
            break
    assert lines == 4  # 600 + 600 + 600 rows journaled; the fourth save would pass 2,000
    assert _journal(tmp_path).stat().st_size == 0
    fresh = IndexProgress(tmp_path)
    assert fresh.load() and fresh.items() == p.items()


def test_a_torn_journal_line_lags_and_the_owner_writes_a_snapshot_next(
    tmp_path: Path, durable_only: None
) -> None:
    p = _many(tmp_path)
    p.advance("T0", 0, 10, 20)
    p.save()
    p.advance("T0", 0, 20, 30)
    p.save()
    journal = _journal(tmp_path)
    data = journal.read_bytes()
    assert data.count(b"\n") == 2
    journal.write_bytes(data[: len(data) - 5])  # the second line torn by a kill
    fresh = IndexProgress(tmp_path)
    assert fresh.load() and fresh.get("T0", 0) == 20  # the last whole line
    fresh.advance("T0", 1, 10, 11)
    fresh.save()  # a new process's first save: a snapshot, the torn journal emptied
    assert journal.stat().st_size == 0
    again = IndexProgress(tmp_path)
    assert again.load() and again.get("T0", 0) == 20 and again.get("T0", 1) == 11


def test_a_journal_of_another_snapshot_is_ignored(tmp_path: Path, durable_only: None) -> None:
    p = _many(tmp_path)
    p.advance("T0", 0, 10, 20)
    p.save()
    stale = _journal(tmp_path).read_bytes()
    snapshot = json.loads((tmp_path / PROGRESS_NAME).read_bytes())
    # a crash after a new snapshot, before its journal was emptied
    snapshot["generation"] = "0123456789abcdef"
    (tmp_path / PROGRESS_NAME).write_text(json.dumps(snapshot))
    assert _journal(tmp_path).read_bytes() == stale
    fresh = IndexProgress(tmp_path)
    assert fresh.load() and fresh.get("T0", 0) == 10
    # a damaged snapshot: the .bak (an older generation) is read without the journal
    again = IndexProgress(tmp_path)
    assert again.load()
    again.advance("T0", 0, 10, 30)
    again.save()  # a new process's first save: a snapshot (the previous one is now .bak)
    again.advance("T0", 0, 30, 40)
    again.save()  # a journal line
    (tmp_path / PROGRESS_NAME).write_bytes(b"\x00")
    older = IndexProgress(tmp_path)
    assert older.load() and older.get("T0", 0) == 10 and len(older.items()) == QUEUES


def test_the_fast_copy_s_journal_is_used_in_this_boot_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _many(tmp_path)
    _boot(p)
    p.advance("T3", 3, 10, 40)
    assert p.save_fast(force=True)  # a journal line; the durable copy still says 10
    fresh = IndexProgress(tmp_path)
    assert fresh.load() and fresh.get("T3", 3) == 40 and fresh.dirty
    monkeypatch.setattr(progress_mod, "boot_id", lambda: "another-boot")
    rebooted = IndexProgress(tmp_path)
    assert rebooted.load() and rebooted.get("T3", 3) == 10 and not rebooted.dirty


def test_a_small_copy_is_always_written_whole(tmp_path: Path, durable_only: None) -> None:
    p = IndexProgress(tmp_path)
    for q in range(SMALL_ROWS):
        p.advance("T", q, 0, 1)
    p.save()
    for q in range(3):
        p.advance("T", q, 1, 2)
        p.save()
        rows = json.loads((tmp_path / PROGRESS_NAME).read_bytes())["queues"]
        assert ["T", q, 2] in rows
    assert _journal(tmp_path).stat().st_size == 0
