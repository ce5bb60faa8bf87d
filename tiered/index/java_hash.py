"""The Java arithmetic the index's bytes depend on, vectorised: ``String.hashCode`` of many keys,
the hash of ``topic#key``, the sign rule of the tiered index and ``HashSet`` iteration order.

Everything is computed over arrays of keys at once (spec §6.4, §6.8, vectors V3):

- :func:`substring_hashes` is the one ``String.hashCode`` kernel: ``sum(unit[j] * 31**(n-1-j))``
  modulo 2**32 over runs of UTF-16 code units (a byte is one unit for ASCII keys), computed from
  prefix sums (31 is invertible modulo 2**32); :func:`run_hashes` applies it to consecutive runs,
  :func:`string_hashes` to Python strings, :mod:`.numpy_keys` to the keys inside the packed
  property bytes of stored messages;
- :func:`keyed_hashes` extends a key's hash to the hash of ``topic + "#" + key`` (without
  building the string: ``h(p + k) = h(p) * 31**len(k) + h(k)``) and applies :func:`tiered_hash`,
  ``IndexStoreFile.hashCode``: negated when negative, so ``Integer.MIN_VALUE`` stays negative;
- :func:`hashset_order` is the order in which a ``HashSet`` of each message's keys iterates, which
  fixes the order of a message's items in an index file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.broker.javautil import java_string_hash

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]

INT_MIN: Final = -(2**31)
_MASK32: Final = 0xFFFFFFFF
_CHUNK_UNITS: Final = 1 << 22  # UTF-16 units hashed per numpy pass (bounded temporaries)


def powers_of(base: int, count: int) -> U32:
    """``base**i mod 2**32`` for ``i`` in ``0 .. count-1`` (at least one)."""
    powers = np.ones(max(count, 1), dtype=np.uint32)
    step, filled = base & _MASK32, 1
    while filled < count:  # doubling: powers[filled:2*filled] = powers[:filled] * base**filled
        take = min(filled, count - filled)
        powers[filled : filled + take] = powers[:take] * np.uint32(step)
        step = step * step & _MASK32
        filled += take
    return powers


def powers_of_31(count: int) -> U32:
    """``31**i mod 2**32`` for ``i`` in ``0 .. count-1`` (at least one)."""
    return powers_of(31, count)


# 31 is odd, so it has an inverse modulo 2**32: a substring's hash is a difference of prefix sums
# of unit * 31**-position, scaled by 31**(its last position). Positions split into blocks of
# _BLOCK: p = block * _BLOCK + low, so two small tables serve every position.
_BLOCK: Final = 1 << 16
_INV31: Final = pow(31, -1, 2**32)
_POW_LOW: Final = powers_of(31, _BLOCK)
_INV_LOW: Final = powers_of(_INV31, _BLOCK)
_POW_BLOCK: Final = pow(31, _BLOCK, 2**32)
_INV_BLOCK: Final = pow(_INV31, _BLOCK, 2**32)


def substring_hashes(units: npt.NDArray[np.unsignedinteger], start: I64, end: I64) -> U32:
    """``String.hashCode`` (unsigned) of the runs ``units[start[i]:end[i]]`` of one buffer of
    code units (a byte is one unit for ASCII keys); empty runs hash to 0.

    The one hash kernel: a pass of multiply and prefix sum over ``units`` (modulo 2**32, as Java's
    int wraps), then two gathers per run -- no per-unit index arrays, however the runs lie."""
    n = units.size
    blocks = max(-(-n // _BLOCK), 1)
    if blocks == 1:
        terms = _INV_LOW[:n] * units
    else:
        terms = np.zeros(blocks * _BLOCK, dtype=np.uint32)
        terms[:n] = units
        by_block = terms.reshape(blocks, _BLOCK)
        by_block *= _INV_LOW
        by_block *= powers_of(_INV_BLOCK, blocks)[:, None]
    prefix = np.zeros(n + 1, dtype=np.uint32)
    np.cumsum(terms[:n], dtype=np.uint32, out=prefix[1:])
    last = np.maximum(end - 1, 0)
    scale = _POW_LOW[last & (_BLOCK - 1)] * powers_of(_POW_BLOCK, blocks)[last // _BLOCK]
    hashes: U32 = (prefix[end] - prefix[start]) * scale
    return hashes


def run_hashes(units: npt.NDArray[np.unsignedinteger], lengths: I64) -> U32:
    """``String.hashCode`` (unsigned) of consecutive runs of code units: run ``i`` is the next
    ``lengths[i]`` entries of ``units``. Empty runs hash to 0."""
    end = np.cumsum(lengths)
    return substring_hashes(units, end - lengths, end)


def string_hashes(strings: Sequence[str]) -> tuple[U32, I64]:
    """``String.hashCode`` of every string (as unsigned 32-bit) and its length in UTF-16 units.

    The strings are encoded once as UTF-16 and hashed by :func:`run_hashes`, in chunks of bounded
    memory (about :data:`_CHUNK_UNITS` units each)."""
    n = len(strings)
    hashes = np.zeros(n, dtype=np.uint32)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    done = 0
    while done < n:
        ends = np.cumsum(lengths[done:])
        stop = done + max(int(np.searchsorted(ends, _CHUNK_UNITS, side="right")), 1)
        chunk = strings[done:stop]
        units = np.frombuffer("".join(chunk).encode("utf-16-le", "surrogatepass"), dtype="<u2")
        if units.size != int(lengths[done:stop].sum()):  # outside the BMP: two units each
            lengths[done:stop] = [len(s.encode("utf-16-le", "surrogatepass")) // 2 for s in chunk]
        hashes[done:stop] = run_hashes(units.astype(np.uint32), lengths[done:stop])
        done = stop
    return hashes, lengths


def tiered_hash(h: npt.ArrayLike) -> I32:
    """``IndexStoreFile.hashCode``: negate negative hashes in int32 (MIN_VALUE stays negative)."""
    signed = np.asarray(h, dtype=np.int64)
    signed = np.where(signed >= 2**31, signed - 2**32, signed)
    return np.where(signed > INT_MIN, np.abs(signed), signed).astype(np.int32)


def keyed_hashes(topic: str, key_hashes: U32, key_lengths: I64) -> I32:
    """The index hash (:func:`tiered_hash`) of ``topic#key`` for keys of the given
    ``String.hashCode`` and UTF-16 length."""
    prefix = np.uint64(java_string_hash(topic + "#") & _MASK32)
    longest = int(key_lengths.max()) if key_lengths.size else 0
    shift = np.take(powers_of_31(longest + 1), key_lengths).astype(np.uint64)
    return tiered_hash((prefix * shift + key_hashes) & np.uint64(_MASK32))


def index_hashes(topic: str, keys: Sequence[str]) -> I32:
    """Index hashes of ``topic#key`` for each of ``keys`` (one topic)."""
    return keyed_hashes(topic, *string_hashes(keys))


def hashset_order(owner: I64, hashes: U32) -> I64:
    """The order in which Java's ``HashSet`` iterates each owner's keys (``owner`` sorted, keys
    distinct per owner): stable by bucket ``(h ^ (h >>> 16)) & (n - 1)``, ``n`` = 16 doubled
    while ``size > 0.75 n``.

    Exact for every set in which no bucket gets more than 8 keys (a larger bucket makes Java
    resize early or build a tree bin, which is not emulated)."""
    if not owner.size:
        return np.zeros(0, dtype=np.int64)
    size = np.bincount(owner)[owner]
    table = np.full(owner.size, 16, dtype=np.int64)
    while np.any(grow := size > table * 3 // 4):
        table[grow] *= 2
    h = hashes.astype(np.int64)
    bucket = (h ^ (h >> 16)) & (table - 1)
    # owner-major, then bucket; a stable sort keeps insertion order within a bucket
    return np.argsort(owner * (1 << 31) + bucket, kind="stable").astype(np.int64)
