"""The read path's batch operations against the one-message-at-a-time rules they replace: the
compiled tag filter (``TagFilter.match_run``) against decoding each message, and ``take`` (the
count, byte and subscription limits of a read over a run) against a plain loop."""

from __future__ import annotations

import numpy as np
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker import message as msgcodec
from tiered.broker.javautil import java_string_hash
from tiered.read.fetcher import _Want
from tiered.read.fetcher import take
from tiered.read.read_unit import Run
from tiered.read.read_unit import Unit
from tiered.read.tag_filter import TagFilter

T0 = 1_700_000_000_000
# "Aa" and "BB" share a Java hash; CJK, Cyrillic and a surrogate pair; bytes that are not UTF-8
TAG_VALUES = [b"A", b"Aa", b"BB", b"TagA", "\u4e2d\u6587".encode(), "\u0416".encode(),
              "\U0001f680".encode(), b"\xff\xfe", b"A\xc3", None]  # fmt: skip


def _unit(q: int, tags: bytes | None, extra: bytes, v2: bool) -> Unit:
    props = extra + (b"TAGS\x01" + tags + b"\x02" if tags is not None else b"")
    data = msgcodec.encode(
        topic="T", queue_id=0, queue_offset=q, physical_offset=1000 * q, body=b"x" * (q % 7),
        properties=props, born_timestamp=T0, store_timestamp=T0, v2=v2,
    )  # fmt: skip
    code = java_string_hash(tags.decode("utf-8", "replace")) if tags is not None else 0
    return Unit(q, data, code)


_UNITS = st.lists(
    st.tuples(
        st.sampled_from(TAG_VALUES),
        st.sampled_from([b"", b"KEYS\x01k\x02", b"TAGS\x01Old\x02", b"TAGS\x01\x02"]),
        st.booleans(),
    ),
    max_size=40,
)


def _run(shapes: list[tuple[bytes | None, bytes, bool]]) -> tuple[Run, list[Unit]]:
    units = [_unit(100 + i, t, extra, v2) for i, (t, extra, v2) in enumerate(shapes)]
    return Run.of_units(units), units


@settings(max_examples=200, deadline=None)
@given(
    shapes=_UNITS,
    wanted=st.lists(st.sampled_from(["A", "Aa", "BB", "\u4e2d\u6587", "\u0416", "\U0001f680",
                                     "\ufffd\ufffd", "A\ufffd", "Old"]), min_size=1, max_size=3),
)  # fmt: skip
def test_batch_tag_filter_matches_decoding_each_message(
    shapes: list[tuple[bytes | None, bytes, bool]], wanted: list[str]
) -> None:
    run, units = _run(shapes)
    f = TagFilter.parse(" || ".join(wanted))
    expected = [
        bool(f.match_codes([u.tags_code])[0]) and f.match_message(u.message()) for u in units
    ]
    assert f.match_run(run).tolist() == expected


def _take_by_loop(
    units: list[Unit], f: TagFilter, count: int, nbytes: int, kept: bool
) -> tuple[list[int], int | None]:
    """The rules one message at a time: matching units in order, at most ``count``, stopping
    before the one that would pass ``nbytes`` (unless nothing is taken yet and nothing was
    ``kept``); where the next read begins when stopped inside."""
    out: list[int] = []
    size = 0
    matched = [u for u in units if f.match_message(u.message()) and f.match_codes([u.tags_code])[0]]
    for u in matched:
        if len(out) == count:
            return out, out[-1] + 1
        if size + len(u.data) > nbytes and (out or kept):
            return out, u.queue_offset
        out.append(u.queue_offset)
        size += len(u.data)
    return out, None


@settings(max_examples=200, deadline=None)
@given(
    shapes=_UNITS,
    expr=st.sampled_from(["*", "A", "A || BB", "\u4e2d\u6587 || \U0001f680"]),
    count=st.integers(1, 50),
    nbytes=st.integers(1, 6000),
    kept=st.booleans(),
)
# both limits at once: one message over the byte budget taken, which is also the count; the next
# read begins after it, not at the next match (found by hypothesis)
@example(
    shapes=[(b"A", b"", False), (b"Aa", b"", False), (b"A", b"", False)],
    expr="A",
    count=1,
    nbytes=1,
    kept=False,
)
def test_take_keeps_the_limits_of_a_read(
    shapes: list[tuple[bytes | None, bytes, bool]], expr: str, count: int, nbytes: int, kept: bool
) -> None:
    run, units = _run(shapes)
    f = TagFilter.parse(expr)
    taken, stop = take(run, _Want(count, nbytes, f), kept=kept)
    want, want_stop = _take_by_loop(units, f, count, nbytes, kept)
    assert taken.qoffs.tolist() == want
    assert stop == want_stop
    assert bytes(taken.body()) == b"".join(units[q - 100].data for q in want)
    if expr == "*" and want:  # nothing filtered: the units are a view of the read, not a copy
        assert isinstance(taken.body(), memoryview)


def test_run_slices_share_the_read() -> None:
    run, units = _run([(b"A", b"", False), (b"B", b"", True), (None, b"", False)])
    part = run.slice(1, 3)
    assert [u.data for u in part.units()] == [u.data for u in units[1:]]
    body = part.body()
    assert isinstance(body, memoryview) and body.obj is run.data
    picked = run.select(np.array([True, False, True]))
    assert bytes(picked.body()) == units[0].data + units[2].data
    assert picked.qoffs.tolist() == [100, 102] and picked.nbytes == len(bytes(picked.body()))
    assert len(Run.empty()) == 0 and Run.empty().body() == b""
