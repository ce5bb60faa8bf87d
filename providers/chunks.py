"""Appendable segments on immutable objects: the chunk scheme shared by the s3 and fsspec providers.

An object store cannot append, so an unsealed segment ``K`` is a run of *chunk objects*, one per
append, named ``K~{position:020d}`` (``~`` never occurs in a key, and zero padding makes them list
in position order right after ``K``). Sealing writes the consolidated object ``K`` itself, then
deletes the chunks. One listing of the prefix ``K`` therefore shows the whole state:

==========================  ==================================================================
backend holds               the segment is
==========================  ==================================================================
``K`` (chunks or not)       sealed, content = ``K``; chunks are leftovers of an interrupted seal
                            (or put) and are ignored, then removed by ``seal``/``put``/``delete``
chunk at 0, no ``K``        unsealed, content = the contiguous run of chunks from position 0;
                            chunks that do not continue the run are orphans and are ignored
no ``K``, no chunk at 0     absent; any chunks are orphans of an interrupted delete, removed
                            before the key is created again (so they never join a new run)
==========================  ==================================================================

Every step of ``seal`` (write ``K`` atomically, then delete chunks) and of ``delete`` (chunk 0
first, then ``K``, then the rest) moves between these states, so a crash between any two requests
leaves either the old content or, for ``delete``, an absent object.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass

from .layout import RESERVED_CHAR

_POSITION_DIGITS = 20


def chunk_name(key: str, position: int) -> str:
    """The chunk object that holds the bytes appended at ``position``."""
    return f"{key}{RESERVED_CHAR}{position:0{_POSITION_DIGITS}d}"


def temp_name(key: str, tag: str) -> str:
    """A temporary object beside ``key`` (ignored by listings, removed with the key's chunks)."""
    return f"{key}{RESERVED_CHAR}tmp.{tag}"


def parse_name(name: str) -> tuple[str, int | None] | None:
    """Split a backend name into (key, chunk position), position ``None`` for the object itself.

    Returns ``None`` for a name with ``~`` that is not a chunk (a temporary object).
    """
    key, sep, suffix = name.partition(RESERVED_CHAR)
    if not sep:
        return name, None
    if len(suffix) == _POSITION_DIGITS and suffix.isdigit():
        return key, int(suffix)
    return None


@dataclass(frozen=True)
class Chunk:
    """One chunk object: bytes ``[position, position + size)`` of the segment."""

    name: str
    position: int
    size: int

    @property
    def end(self) -> int:
        """The position just past this chunk."""
        return self.position + self.size


@dataclass(frozen=True)
class SegmentState:
    """What one listing says about a key; see the module docstring for the rules."""

    key: str
    sealed_size: int | None = None
    run: tuple[Chunk, ...] = ()
    strays: tuple[Chunk, ...] = ()
    junk: tuple[str, ...] = ()

    @property
    def sealed(self) -> bool:
        """Whether the consolidated object exists."""
        return self.sealed_size is not None

    @property
    def exists(self) -> bool:
        """Whether the segment exists (sealed, or a run from position 0)."""
        return self.sealed or bool(self.run)

    @property
    def size(self) -> int:
        """The segment's size (0 when absent; check ``exists``)."""
        if self.sealed_size is not None:
            return self.sealed_size
        return self.run[-1].end if self.run else 0

    @property
    def chunk_names(self) -> list[str]:
        """Every chunk and temporary object of this key, chunk 0 first (the deletion order)."""
        names = [c.name for c in self.run] + [c.name for c in self.strays] + [*self.junk]
        return sorted(names, key=lambda n: (n != chunk_name(self.key, 0), n))


def state_from_listing(key: str, entries: Iterable[tuple[str, int]]) -> SegmentState:
    """Build the state of ``key`` from (backend name, size) pairs of a listing of prefix ``key``.

    Names that belong to other keys sharing the prefix are ignored.
    """
    sealed_size: int | None = None
    chunks: list[Chunk] = []
    junk: list[str] = []
    for name, size in entries:
        parsed = parse_name(name)
        if parsed is None:
            if name.startswith(key + RESERVED_CHAR):
                junk.append(name)  # a temporary object of an interrupted write
            continue
        if parsed[0] != key:
            continue
        position = parsed[1]
        if position is None:
            sealed_size = size
        else:
            chunks.append(Chunk(name, position, size))
    chunks.sort(key=lambda c: c.position)
    run: list[Chunk] = []
    strays: list[Chunk] = []
    for chunk in chunks:
        expected = run[-1].end if run else 0
        # an empty chunk can only be the first: an empty append after it creates nothing
        if chunk.position == expected and (not run or run[-1].size > 0):
            run.append(chunk)
        else:
            strays.append(chunk)
    return SegmentState(key, sealed_size, tuple(run), tuple(strays), tuple(junk))


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, end)`` of one chunk object."""

    name: str
    start: int
    end: int


def pieces_for_read(run: Sequence[Chunk], position: int, length: int) -> list[Piece]:
    """The chunk ranges that hold ``[position, position + length)``, clipped to the run."""
    stop = position + length
    return [
        Piece(c.name, max(position, c.position) - c.position, min(stop, c.end) - c.position)
        for c in run
        if c.end > position and c.position < stop and c.size > 0
    ]


@dataclass(frozen=True)
class Part:
    """One part of a consolidating multipart upload.

    ``copy`` parts are a single piece copied server-side (``UploadPartCopy``); the others are
    downloaded and uploaded (``UploadPart``), at most ``part_size`` bytes in memory.
    """

    pieces: tuple[Piece, ...]
    copy: bool

    @property
    def size(self) -> int:
        """The part's size in bytes."""
        return sum(p.end - p.start for p in self.pieces)


MAX_PARTS = 10_000


def plan_parts(
    run: Sequence[Chunk], *, min_part_bytes: int, part_bytes: int, max_copy_bytes: int
) -> list[Part]:
    """Plan the parts that rebuild ``run`` as one object; every part but the last ≥ min_part.

    A chunk (or its remainder) of at least ``min_part_bytes`` that starts a part is copied
    server-side (in pieces of at most ``max_copy_bytes``); smaller chunks are gathered into
    uploaded parts of ``part_bytes`` (raised if needed to stay under 10 000 parts).
    """
    total = sum(c.size for c in run)
    target = max(part_bytes, min_part_bytes, math.ceil(total / (MAX_PARTS - 1)))
    parts: list[Part] = []
    gathered: list[Piece] = []
    gathered_size = 0
    for chunk in run:
        offset = 0
        while offset < chunk.size:
            remaining = chunk.size - offset
            if not gathered and remaining >= min_part_bytes:
                step = min(remaining, max_copy_bytes)
                parts.append(Part((Piece(chunk.name, offset, offset + step),), copy=True))
                offset += step
                continue
            step = min(remaining, target - gathered_size)
            gathered.append(Piece(chunk.name, offset, offset + step))
            gathered_size += step
            offset += step
            if gathered_size >= target:
                parts.append(Part(tuple(gathered), copy=False))
                gathered, gathered_size = [], 0
    if gathered:
        parts.append(Part(tuple(gathered), copy=False))
    return parts
