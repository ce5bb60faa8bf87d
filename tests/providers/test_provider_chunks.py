"""The chunk scheme: state from a listing, read pieces, and the consolidation plan."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tiered.providers.chunks import Chunk
from tiered.providers.chunks import chunk_name
from tiered.providers.chunks import parse_name
from tiered.providers.chunks import pieces_for_read
from tiered.providers.chunks import plan_parts
from tiered.providers.chunks import state_from_listing
from tiered.providers.chunks import temp_name

K = "a/b/seg"
MIB = 1 << 20


def test_names_list_in_position_order() -> None:
    names = [chunk_name(K, p) for p in (0, 9, 10, 100, 10**15)]
    assert names == sorted(names)
    assert parse_name(chunk_name(K, 42)) == (K, 42)
    assert parse_name(K) == (K, None)
    assert parse_name(temp_name(K, "x")) is None


def test_states() -> None:
    absent = state_from_listing(K, [])
    assert not absent.exists
    unsealed = state_from_listing(K, [(chunk_name(K, 0), 5), (chunk_name(K, 5), 3)])
    assert (unsealed.exists, unsealed.sealed, unsealed.size) == (True, False, 8)
    sealed = state_from_listing(K, [(K, 8), (chunk_name(K, 0), 5)])
    assert (sealed.sealed, sealed.size) == (True, 8)
    assert sealed.chunk_names == [chunk_name(K, 0)]
    orphans = state_from_listing(K, [(chunk_name(K, 5), 3), (temp_name(K, "t"), 1)])
    assert not orphans.exists
    assert orphans.chunk_names == [chunk_name(K, 5), temp_name(K, "t")]
    gap = state_from_listing(K, [(chunk_name(K, 0), 5), (chunk_name(K, 6), 3)])
    assert gap.size == 5
    assert [c.position for c in gap.strays] == [6]
    other = state_from_listing(K, [(K + "x", 1), (K + "/y", 1), (K + ".bak", 1)])
    assert not other.exists
    assert other.chunk_names == []


def test_chunk_zero_goes_first_when_deleting() -> None:
    state = state_from_listing(K, [(chunk_name(K, p), 1) for p in range(5)])
    assert state.chunk_names[0] == chunk_name(K, 0)


def test_read_pieces() -> None:
    run = (Chunk("c0", 0, 10), Chunk("c10", 10, 5), Chunk("c15", 15, 20))
    pieces = pieces_for_read(run, 8, 10)
    assert [(p.name, p.start, p.end) for p in pieces] == [
        ("c0", 8, 10),
        ("c10", 0, 5),
        ("c15", 0, 3),
    ]


@given(
    sizes=st.lists(
        st.one_of(st.integers(1, 3 * MIB), st.integers(5 * MIB, 13 * MIB)), min_size=1, max_size=12
    ),
    part=st.sampled_from([5 * MIB, 8 * MIB]),
)
def test_plans_make_valid_multipart_uploads(sizes: list[int], part: int) -> None:
    run, position = [], 0
    for i, size in enumerate(sizes):
        run.append(Chunk(f"c{i}", position, size))
        position += size
    parts = plan_parts(run, min_part_bytes=5 * MIB, part_bytes=part, max_copy_bytes=12 * MIB)
    assert all(p.size >= 5 * MIB for p in parts[:-1])
    assert sum(p.size for p in parts) == position
    covered = [(piece.name, piece.start, piece.end) for p in parts for piece in p.pieces]
    offset_in: dict[str, int] = {}
    for name, start, end in covered:
        assert start == offset_in.get(name, 0)
        offset_in[name] = end
    assert offset_in == {c.name: c.size for c in run}
    for p in parts:
        if p.copy:
            assert len(p.pieces) == 1
            assert 5 * MIB <= p.size <= 12 * MIB
        else:
            assert p.size <= max(part, 5 * MIB)


def test_small_chunks_are_gathered_and_big_ones_copied() -> None:
    run = [Chunk("a", 0, 6 * MIB), Chunk("b", 6 * MIB, 100), Chunk("c", 6 * MIB + 100, 6 * MIB)]
    parts = plan_parts(run, min_part_bytes=5 * MIB, part_bytes=8 * MIB, max_copy_bytes=5 << 30)
    assert [p.copy for p in parts] == [True, False]
    assert parts[1].size == 6 * MIB + 100
