"""``coalesce.gather``: every queue's units land back to back in its own buffer, byte-equal to
reading each unit alone, whatever the gaps, file boundaries and piece counts of the ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiered.broker import coalesce
from tiered.broker.commitlog import CommitLog
from tiered.broker.consumequeue import ConsumeQueue
from tiered.broker.generator import generate_store
from tiered.errors import CorruptStoreFileError
from tiered.errors import OffsetNotInStoreError
from tiered.testing.sample_tier import rolling_spec

FILE_SIZE = 64 << 10


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coalesce") / "store"
    spec = rolling_spec(seed=5, queues=3, messages=2400, commitlog_file_size=FILE_SIZE)
    generate_store(root, spec)
    return root


def _queues(store: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(offsets, sizes)`` of every unit of every queue, in queue order."""
    out = []
    for topic in sorted(p.name for p in (store / "consumequeue").iterdir()):
        for qid in range(3):
            cq = ConsumeQueue.for_queue(store / "consumequeue", topic, qid, file_size=400 * 20)
            units = cq.read_units(0, cq.max_offset())
            out.append((units["offset"].astype(np.int64), units["size"].astype(np.int64)))
    return out


def _copied_log(store: Path, tmp_path: Path) -> CommitLog:
    """A copy of the store's commitlog under ``tmp_path`` (to tear or delete files of)."""
    copy = tmp_path / "commitlog"
    copy.mkdir()
    for f in sorted((store / "commitlog").iterdir()):
        (copy / f.name).write_bytes(f.read_bytes())
    return CommitLog(copy, FILE_SIZE)


def _expected(log: CommitLog, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
    return b"".join(log.read(int(o), int(s)) for o, s in zip(offsets, sizes, strict=True))


@pytest.mark.parametrize("gap_bytes", [0, 1, 300, coalesce.DEFAULT_GAP_BYTES])
def test_every_queue_gets_its_units_back_to_back(store: Path, gap_bytes: int) -> None:
    log = CommitLog(store / "commitlog", FILE_SIZE)
    queues = _queues(store)
    assert len(log.files) > 3  # ranges are cut at file boundaries
    got = coalesce.gather(log, [o for o, _ in queues], [s for _, s in queues], gap_bytes=gap_bytes)
    assert got.errors == [None] * len(queues)
    for (offsets, sizes), data in zip(queues, got.data, strict=True):
        assert bytes(data) == _expected(log, offsets, sizes)
    assert got.calls >= len(log.files)  # one call per file at least
    if gap_bytes == coalesce.DEFAULT_GAP_BYTES:
        assert got.calls == len(log.files)  # the other queues' messages are read through


def test_units_in_any_order_and_more_pieces_than_iov_max(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's units stay in the order asked, not commitlog order; a range of more pieces
    than IOV_MAX takes several calls and still lands every byte."""
    monkeypatch.setattr(coalesce, "IOV_MAX", 7)
    log = CommitLog(store / "commitlog", FILE_SIZE)
    offsets, sizes = _queues(store)[1]
    order = np.random.default_rng(3).permutation(offsets.size)[:200]
    got = coalesce.gather(log, [offsets[order], offsets[:0]], [sizes[order], sizes[:0]])
    assert got.errors == [None, None]
    assert bytes(got.data[0]) == _expected(log, offsets[order], sizes[order])
    assert got.data[1] == bytearray()
    assert got.calls > len(log.files)


@pytest.mark.parametrize("iov_max", [7, 1024])
def test_a_large_range_read_in_two_halves_lands_every_byte(
    store: Path, monkeypatch: pytest.MonkeyPatch, iov_max: int
) -> None:
    """Every range split (its second half read by a second thread), a preadv per 7 pieces or
    per 1024: every unit lands at its place."""
    monkeypatch.setattr(coalesce, "IOV_MAX", iov_max)
    monkeypatch.setattr(coalesce, "SPLIT_BYTES", 1)
    log = CommitLog(store / "commitlog", FILE_SIZE)
    queues = _queues(store)
    got = coalesce.gather(log, [o for o, _ in queues], [s for _, s in queues])
    assert got.errors == [None] * len(queues)
    for (offsets, sizes), data in zip(queues, got.data, strict=True):
        assert bytes(data) == _expected(log, offsets, sizes)
    pieces = sum(len(o) for o, _ in queues)
    assert got.calls >= -(-pieces // iov_max)  # a preadv per iov_max pieces at least


def test_a_short_split_read_is_an_error(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coalesce, "SPLIT_BYTES", 1)
    log = _copied_log(store, tmp_path)
    offsets, sizes = _queues(store)[0]
    last = log.files[-1]
    in_last = offsets >= last.base
    end = int((offsets[in_last] + sizes[in_last]).max()) - last.base
    with last.path.open("r+b") as fh:  # torn: the end of the last file's range is gone
        fh.truncate(end - 100)
    got = coalesce.gather(log, [offsets[in_last]], [sizes[in_last]])
    assert isinstance(got.errors[0], CorruptStoreFileError)
    assert "short read" in str(got.errors[0])


def test_a_failed_read_raises_naming_the_file(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read the system refuses (here: the file became a directory, EISDIR) raises, split or
    not, naming the commitlog file; both halves are read (and joined) before it closes."""
    log = _copied_log(store, tmp_path)
    offsets, sizes = _queues(store)[0]
    first = log.files[0]
    in_first = offsets < first.end
    first.path.unlink()
    first.path.mkdir()
    for split in (1, 1 << 40):
        monkeypatch.setattr(coalesce, "SPLIT_BYTES", split)
        with pytest.raises(OSError, match="directory") as raised:
            coalesce.gather(log, [offsets[in_first]], [sizes[in_first]])
        assert raised.value.filename == str(first.path)


def test_a_deleted_file_fails_only_the_batches_that_needed_it(store: Path, tmp_path: Path) -> None:
    log = _copied_log(store, tmp_path)
    offsets, sizes = _queues(store)[0]
    first = log.files[0]
    in_first = offsets < first.end
    first.path.unlink()  # the broker deletes its oldest file after the log listed it
    got = coalesce.gather(
        log, [offsets[in_first], offsets[~in_first]], [sizes[in_first], sizes[~in_first]]
    )
    assert isinstance(got.errors[0], OffsetNotInStoreError)
    assert "disappeared" in str(got.errors[0])
    assert got.errors[1] is None
    assert bytes(got.data[1]) == _expected(log, offsets[~in_first], sizes[~in_first])
