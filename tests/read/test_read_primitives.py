"""Read-path building blocks: page-cache residency, tag filters, the read-ahead cache."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tiered.broker import message as msgcodec
from tiered.broker.javautil import tags_code
from tiered.broker.page_cache import PAGE
from tiered.broker.page_cache import residency
from tiered.errors import InvalidRequestError
from tiered.read.read_cache import ReadAheadCache
from tiered.read.read_cache import memory_limit_bytes
from tiered.read.read_unit import Run
from tiered.read.read_unit import Unit
from tiered.read.tag_filter import TagFilter


def drop_pages(path: Path, position: int, length: int) -> None:
    """``posix_fadvise(DONTNEED)``: the kernel drops the clean cached pages of a range."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, position, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_residency_follows_fadvise_and_reads(tmp_path: Path) -> None:
    f = tmp_path / "data"
    f.write_bytes(os.urandom(64 * PAGE))
    os.sync()
    drop_pages(f, 0, 64 * PAGE)
    cold = residency(f, 10 * PAGE + 5, 3 * PAGE)
    assert cold.total_pages == 4  # the range straddles 4 pages
    assert not cold.all_resident
    with f.open("rb") as fh:
        fh.seek(10 * PAGE)
        fh.read(4 * PAGE)
    assert residency(f, 10 * PAGE + 5, 3 * PAGE).all_resident
    assert residency(f, 0, 0).total_pages == 0


def _msg(tags: str | None) -> msgcodec.Message:
    props = {"TAGS": tags} if tags is not None else {}
    unit = msgcodec.encode(topic="T", queue_id=0, queue_offset=0, physical_offset=0, body=b"x",
                           properties=props, born_timestamp=1, store_timestamp=1)  # fmt: skip
    return msgcodec.decode(unit)


def test_tag_filter_by_code_then_by_tags() -> None:
    f = TagFilter.parse("TagA || TagB")
    codes = np.array([tags_code("TagA"), tags_code("TagC"), tags_code("TagB"), 0])
    assert f.match_codes(codes).tolist() == [True, False, True, False]
    assert f.match_message(_msg("TagA"))
    assert not f.match_message(_msg("TagC"))
    assert not f.match_message(_msg(None))
    # "Aa" and "BB" share a Java hash: the code matches, the TAGS value does not
    collide = TagFilter.parse("Aa")
    assert collide.match_codes([tags_code("BB")]).tolist() == [True]
    assert not collide.match_message(_msg("BB"))


@pytest.mark.parametrize("expr", [None, "", "*", " * ", "TagA || *"])
def test_everything_subscriptions(expr: str | None) -> None:
    f = TagFilter.parse(expr)
    assert f.tags is None
    assert f.match_codes([1, 2]).all()
    assert f.match_message(_msg(None))


def test_bad_tag_expression_names_itself() -> None:
    with pytest.raises(InvalidRequestError, match="tags='A \\|\\| \\|\\| B' has an empty tag"):
        TagFilter.parse("A || || B")


def test_cache_weighs_bytes_and_expires_after_access() -> None:
    now = [0.0]
    cache = ReadAheadCache(1000, expire_ms=1000, clock=lambda: now[0])
    cache.put_many("T", 0, [Unit(i, b"x" * 100, 0) for i in range(3)])  # one window
    cache.put_window("T", 0, 10, Run.of_units([Unit(i, b"w" * 100, 0) for i in (10, 11)]))
    assert (cache.used_bytes, len(cache), cache.windows) == (500, 5, 2)
    busy_before = cache.busy
    assert not busy_before
    now[0] = 0.9
    assert cache.get("T", 0, 0) is not None  # re-arms its window until 1.9
    now[0] = 1.5
    assert [u.data[:1] for u in cache.run("T", 0, 1, 10).units()] == [b"x", b"x"]  # the rest
    assert cache.get("T", 0, 10) is None  # the other window expired at 1.0
    assert cache.get("T", 0, 3) is None and cache.get("T", 1, 0) is None  # past it; other queue
    assert (len(cache), cache.windows) == (3, 1)
    cache.put_window("T", 0, 20, Run.of_units([Unit(i, b"y" * 100, 0) for i in range(20, 26)]))
    assert cache.used_bytes == 900 and cache.busy
    cache.put_window(
        "T", 0, 30, Run.of_units([Unit(i, b"z" * 100, 0) for i in range(30, 35)])
    )  # evicts the oldest window
    assert cache.used_bytes <= 1000 and cache.get("T", 0, 0) is None
    assert cache.stats.hits == 2
    assert cache.stats.accesses == 6


def test_oversized_units_are_not_cached() -> None:
    cache = ReadAheadCache(100, expire_ms=1000)
    cache.put_many("T", 0, [Unit(0, b"z" * 101, 0)])
    assert len(cache) == 0


def test_concurrent_misses_share_one_load() -> None:
    cache = ReadAheadCache(1 << 20, expire_ms=10_000)
    loads = []
    started = threading.Event()

    def loader() -> None:
        loads.append(1)
        started.set()
        time.sleep(0.2)
        cache.put_many("T", 1, [Unit(i, b"m", 0) for i in range(100, 200)])

    def reader(offset: int) -> None:
        if cache.get("T", 1, offset) is None:
            cache.load_once("T", 1, offset, 100, loader)
        assert cache.get("T", 1, offset) is not None

    first = threading.Thread(target=reader, args=(100,))
    first.start()
    started.wait()
    others = [threading.Thread(target=reader, args=(o,)) for o in (100, 150, 199)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join()
    assert len(loads) == 1
    assert cache.stats.waits == 3


def test_memory_limit_is_positive() -> None:
    assert memory_limit_bytes() > 1 << 20
