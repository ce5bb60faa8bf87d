"""What every read returns, from the tier or from the broker: :class:`Run`, stored message units
read in one go and handed on without per-message objects, and :class:`Unit`, one of them with its
queue offset and tags code, made only where a caller asks for decoded messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec

Int64s = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview
_total = np.add.reduce  # ``ndarray.sum`` without its Python wrapper: asked on every read


@dataclass(frozen=True, slots=True)
class Unit:
    """One message unit as read (tier: physical offset = flat offset; local: broker offset),
    with its queue offset and consumequeue tag code."""

    queue_offset: int
    data: bytes
    tags_code: int

    def message(self) -> msgcodec.Message:
        """The decoded message."""
        return msgcodec.decode(self.data)


@dataclass(slots=True, eq=False)
class Run:
    """Units read in one go: unit ``i`` is ``data[rel[i]:rel[i]+sizes[i]]`` at queue offset
    ``qoffs[i]`` with tag code ``tags[i]``. Slices and selections share ``data``: a bulk reader
    hands views of it to the socket and makes no object per message. Never changed once made
    (not frozen: a frozen dataclass costs several times as much to make, and a pull makes a few)."""

    data: Buffer
    rel: Int64s
    sizes: Int64s
    tags: Int64s
    qoffs: Int64s
    _nbytes: int = field(default=-1, init=False, repr=False)

    @classmethod
    def empty(cls) -> Run:
        none = np.zeros(0, np.int64)
        return cls(b"", none, none, none, none)

    @classmethod
    def of_units(cls, units: Sequence[Unit]) -> Run:
        """The units back to back in one buffer (one copy of each; the broker's local reads)."""
        sizes = np.fromiter((len(u.data) for u in units), np.int64, len(units))
        rel = np.zeros(len(units), np.int64)
        np.cumsum(sizes[:-1], out=rel[1:])
        return cls(
            b"".join(u.data for u in units),
            rel,
            sizes,
            np.fromiter((u.tags_code for u in units), np.int64, len(units)),
            np.fromiter((u.queue_offset for u in units), np.int64, len(units)),
        )

    def __len__(self) -> int:
        return len(self.rel)

    @property
    def nbytes(self) -> int:
        """Bytes of its units (not of the buffer they are cut from); summed once."""
        n = self._nbytes
        if n < 0:
            n = self._nbytes = int(_total(self.sizes))
        return n

    def slice(self, start: int, stop: int) -> Run:
        """Units ``start`` to ``stop`` (no copy)."""
        return Run(
            self.data,
            self.rel[start:stop],
            self.sizes[start:stop],
            self.tags[start:stop],
            self.qoffs[start:stop],
        )

    def select(self, mask: npt.NDArray[np.bool_]) -> Run:
        """The units where ``mask`` is true (the buffer is shared)."""
        return Run(self.data, self.rel[mask], self.sizes[mask], self.tags[mask], self.qoffs[mask])

    def body(self) -> Buffer:
        """The units back to back: a view of the read when they lie contiguously in it (no copy
        of a catch-up's megabytes), else one joined copy."""
        n = len(self.rel)
        if not n:
            return b""
        start, end = int(self.rel[0]), int(self.rel[-1] + self.sizes[-1])
        mv = memoryview(self.data)
        if end - start == self.nbytes:
            return mv[start:end]
        rel, sizes = self.rel.tolist(), self.sizes.tolist()
        return b"".join(mv[a : a + z] for a, z in zip(rel, sizes, strict=True))

    def units(self) -> list[Unit]:
        """One :class:`Unit` per message (a copy of its bytes each)."""
        mv = memoryview(self.data)
        return [
            Unit(q, bytes(mv[a : a + n]), t)
            for q, a, n, t in zip(
                self.qoffs.tolist(),
                self.rel.tolist(),
                self.sizes.tolist(),
                self.tags.tolist(),
                strict=True,
            )
        ]
