"""``queue_bounds`` (what ``status`` reads of each queue) answers as ``ConsumeQueue.min_offset``
and ``max_offset`` do, with fewer reads."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tiered.broker import cq_bounds
from tiered.broker.consumequeue import BLANK_FILL_SIZE
from tiered.broker.consumequeue import ConsumeQueue
from tiered.broker.consumequeue import encode_units
from tiered.broker.cq_bounds import queue_bounds
from tiered.errors import CorruptStoreFileError


def make_queue(root: Path, units_per_file: int, files: dict[int, bytes]) -> ConsumeQueue:
    """Queue dir with files {first queue offset: content}; content is padded to the file size."""
    d = root / "T" / "0"
    d.mkdir(parents=True)
    size = units_per_file * 20
    for first, content in files.items():
        (d / f"{first * 20:020d}").write_bytes(content.ljust(size, b"\0"))
    return ConsumeQueue(d, size)


def seq_units(first_phys: int, n: int, size: int = 100) -> bytes:
    phys = first_phys + np.arange(n, dtype=np.int64) * size
    return encode_units(phys, np.full(n, size), np.arange(n))


def expected(cq: ConsumeQueue, clmin: int | None) -> tuple[int, int]:
    files = cq.files()
    return cq.min_offset(clmin, files=files), cq.max_offset(files=files)


@pytest.mark.parametrize("valid", [0, 1, 2, 63, 64, 65, 66, 500, 999, 1000])
@pytest.mark.parametrize("hint", [None, 0, 1, "max-1", "max", "max+1", "end", 5000])
def test_the_answer_is_the_consume_queues_whatever_the_hint(
    tmp_path: Path, valid: int, hint: int | str | None
) -> None:
    """A hint at or below the max reads from there; one past it, or beyond the last file, is
    checked (the unit before it must be valid) and set aside."""
    cq = make_queue(tmp_path, 1000, {1000: seq_units(0, 1000), 2000: seq_units(10**5, valid)})
    top = 2000 + valid
    given = {"max-1": top - 1, "max": top, "max+1": top + 1, "end": 3000}.get(str(hint), hint)
    assert not isinstance(given, str)
    got = queue_bounds(str(cq.directory), cq.file_size, None, given)
    assert got == expected(cq, None) == (1000, top)


def test_one_file_at_rest_costs_one_open_and_two_small_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue the tier has caught up with (hint = max): the min's unit and the max's probe,
    from one descriptor, not the whole file."""
    cq = make_queue(tmp_path, 1000, {0: seq_units(500, 25)})
    calls: list[tuple[int, int]] = []
    real_pread: Callable[[int, int, int], bytes] = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        calls.append((n, pos))
        return real_pread(fd, n, pos)

    monkeypatch.setattr(os, "pread", counting)
    assert queue_bounds(str(cq.directory), cq.file_size, 500, 25) == (0, 25)
    assert calls == [(20, 0), (20 * (1 + cq_bounds.PROBE_UNITS), 24 * 20)]


def test_the_min_skips_blank_fills_and_what_the_commitlog_no_longer_holds(
    tmp_path: Path,
) -> None:
    blank = encode_units([0] * 3, [BLANK_FILL_SIZE] * 3, [0] * 3)
    cq = make_queue(tmp_path, 10, {0: blank + seq_units(0, 7), 10: seq_units(700, 2)})
    for clmin in (None, 0, 250, 700, 10**6):
        assert queue_bounds(str(cq.directory), cq.file_size, clmin, 12) == expected(cq, clmin)
    assert queue_bounds(str(cq.directory), cq.file_size, 250) == (6, 12)


def test_missing_empty_and_odd_queues(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert queue_bounds(str(tmp_path / "missing"), 200) is None
    (tmp_path / "empty").mkdir()
    assert queue_bounds(str(tmp_path / "empty"), 200) == (0, 0)
    cq = make_queue(tmp_path, 10, {0: seq_units(0, 10), 10: seq_units(1000, 3)})
    (cq.directory / f"{400:020d}").write_bytes(b"")  # being created by the broker
    assert queue_bounds(str(cq.directory), cq.file_size, None, 13) == (0, 13)
    (cq.directory / "00000000000000000400.tmp").write_bytes(b"junk")
    with caplog.at_level(logging.WARNING):
        assert queue_bounds(str(cq.directory), cq.file_size, None, 13) == (0, 13)
    assert "00000000000000000400.tmp" in caplog.text
    (cq.directory / f"{400:020d}").write_bytes(bytes(180))
    with pytest.raises(CorruptStoreFileError, match=r"size 180 .*not the configured size"):
        queue_bounds(str(cq.directory), cq.file_size, None, 13)


def test_many_bounds_answers_as_queue_bounds_or_leaves_the_queue_to_it(tmp_path: Path) -> None:
    """The kernel's answer for each usual queue, (-1, -1, -1) for a missing one, None for those it
    leaves to ``queue_bounds`` (a pre-blank fill, a first unit below the commitlog's min, a
    file of another size), in the order given."""
    blank = encode_units([0] * 3, [BLANK_FILL_SIZE] * 3, [0] * 3)
    queues = {
        "usual": {0: seq_units(500, 10)},
        "two-files": {0: seq_units(500, 10), 10: seq_units(5000, 4)},
        "blank": {0: blank + seq_units(500, 7)},
        "below": {0: seq_units(0, 10)},
        "empty": {},
    }
    dirs = []
    for name, files in queues.items():
        d = tmp_path / name
        d.mkdir()
        for first, content in files.items():
            (d / f"{first * 20:020d}").write_bytes(content.ljust(200, b"\0"))
        dirs.append(str(d))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / f"{0:020d}").write_bytes(bytes(180))
    dirs += [str(tmp_path / "odd"), str(tmp_path / "missing")]
    hints = [4, 14, None, 10, None, 3, None]
    got = cq_bounds.many_bounds(dirs, 200, 500, hints)
    # the third figure: the bytes of the units from the hint on (six of 100 bytes past 4)
    assert got == [(0, 10, 600), (0, 14, 0), None, None, (0, 0, -1), None, (-1, -1, -1)]
    assert queue_bounds(dirs[2], 200, 500) == (3, 10)
    assert queue_bounds(dirs[3], 200, 500) == (5, 10)
    with pytest.raises(CorruptStoreFileError):
        queue_bounds(dirs[5], 200, 500)
