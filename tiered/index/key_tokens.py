"""The keys of a whole batch of stored units at once, with numpy (spec §6.4, §6.8).

What :func:`tiered.index.keys.message_key_sets` does message by message in Python -- parse the
properties, take ``UNIQ_KEY`` and the ``KEYS.split(" ")`` tokens unless blank, deduplicate, order
them as Java's ``HashSet`` iterates, hash ``topic#key`` -- is done here on the property bytes of
every unit together: separators, names, value spans, spaces and Java hashes are array operations
over the batch's property bytes, so the cost per message is a few array elements, not a few
Python calls. A message whose key values hold a non-ASCII byte (where bytes and UTF-16 units
differ) takes the Python path; the results are identical (a test holds them to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.javautil import java_string_hash

Int64s = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_MASK32: Final = 0xFFFFFFFF
_ITEM_SEPARATOR: Final = 2
_SPACE: Final = 0x20
_UNIQ_NAME: Final = np.frombuffer(b"UNIQ_KEY\x01", np.uint8)
_KEYS_NAME: Final = np.frombuffer(b"KEYS\x01", np.uint8)
# Character.isWhitespace below 0x80: \t \n \x0b \x0c \r, \x1c..\x1f and the space
_BLANK: Final = np.zeros(256, dtype=np.bool_)
_BLANK[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


class Tokens:
    """Key tokens of a batch, by message, in insertion order (UNIQ_KEY first, then the KEYS
    tokens): spans ``[start, end)`` of the batch buffer."""

    def __init__(self, msg: Int64s, start: Int64s, end: Int64s) -> None:
        self.msg = msg
        self.start = start
        self.end = end

    def take(self, keep: npt.NDArray[np.bool_] | Int64s) -> Tokens:
        """The tokens selected by ``keep`` (a mask or indexes)."""
        return Tokens(self.msg[keep], self.start[keep], self.end[keep])


class _Regions:
    """The property regions of the messages that have properties, in buffer order."""

    def __init__(self, buf: U8, at: Int64s, length: Int64s) -> None:
        valid = length > 0
        self.buf = buf
        self.msg = np.flatnonzero(valid)
        self.at = at[valid]
        self.end = self.at + length[valid]

    def of(self, positions: Int64s) -> tuple[Int64s, npt.NDArray[np.bool_]]:
        """The region of each position and whether the position is inside it."""
        region = np.searchsorted(self.at, positions, side="right") - 1
        inside = (region >= 0) & (positions < self.end[np.maximum(region, 0)])
        return np.maximum(region, 0), inside

    def find(self, byte: int) -> Int64s:
        """Positions of ``byte`` inside a region."""
        lo, hi = (int(self.at[0]), int(self.end[-1])) if self.at.size else (0, 0)
        found = np.flatnonzero(self.buf[lo:hi] == byte) + lo
        return found[self.of(found)[1]]


def _values(regions: _Regions, seps: Int64s, n: int, name: U8) -> Int64s:
    """Per message ``(start, end)`` of the last valid ``name`` property's value, -1 if none.

    Properties are ``name\\x01value\\x02``; an item is a property only with a non-empty value
    (``string2messageProperties``); a later one replaces an earlier one."""
    spans = np.full((n, 2), -1, dtype=np.int64)
    buf = regions.buf
    starts = np.concatenate((regions.at, seps + 1))
    if not starts.size:
        return spans
    cand = starts[buf[np.minimum(starts, buf.size - 1)] == name[0]]
    region, _ = regions.of(cand)
    k = name.size
    fits = cand + k <= regions.end[region]
    cand, region = cand[fits], region[fits]
    ok = np.ones(cand.size, dtype=np.bool_)
    for j in range(1, k):
        ok &= buf[cand + j] == name[j]
    value, region = cand[ok] + k, region[ok]
    nxt = np.searchsorted(seps, value)
    stop = seps[np.minimum(nxt, max(seps.size - 1, 0))] if seps.size else value
    stop = np.where((nxt < seps.size) & (stop < regions.end[region]), stop, regions.end[region])
    valid = stop > value
    value, stop, region = value[valid], stop[valid], region[valid]
    order = np.lexsort((value, region))  # the last occurrence of each region wins
    value, stop, region = value[order], stop[order], region[order]
    last = np.concatenate((region[1:] != region[:-1], [True])) if region.size else valid[:0]
    who = regions.msg[region[last]]
    spans[who, 0] = value[last]
    spans[who, 1] = stop[last]
    return spans


def _split(regions: _Regions, keys: Int64s) -> Tokens:
    """``KEYS.split(" ")`` of every message with a KEYS value: trailing empty tokens dropped."""
    km = np.flatnonzero(keys[:, 0] >= 0)
    spaces = regions.find(_SPACE)
    inside = np.zeros(spaces.size, dtype=np.bool_)
    who = np.zeros(spaces.size, dtype=np.int64)
    if km.size and spaces.size:  # the KEYS value (sorted, disjoint) each space falls in
        j = np.searchsorted(keys[km, 0], spaces, side="right") - 1
        inside = (j >= 0) & (spaces < keys[km[np.maximum(j, 0)], 1])
        who = km[np.maximum(j, 0)]
    spaces, who = spaces[inside], who[inside]
    cut_at = np.concatenate((keys[km, 0] - 1, spaces, keys[km, 1]))
    cut_msg = np.concatenate((km, who, km))
    order = np.lexsort((cut_at, cut_msg))
    cut_at, cut_msg = cut_at[order], cut_msg[order]
    pair = cut_msg[1:] == cut_msg[:-1]
    tokens = Tokens(cut_msg[1:][pair], cut_at[:-1][pair] + 1, cut_at[1:][pair])
    if not tokens.msg.size:
        return tokens
    heads = np.flatnonzero(np.concatenate(([True], tokens.msg[1:] != tokens.msg[:-1])))
    sizes = np.diff(np.append(heads, tokens.msg.size))
    rank = np.arange(tokens.msg.size) - np.repeat(heads, sizes)
    last = np.maximum.reduceat(np.where(tokens.end > tokens.start, rank, -1), heads)
    return tokens.take(rank <= np.repeat(last, sizes))


def find_tokens(buf: U8, at: Int64s, length: Int64s) -> tuple[Tokens, Tokens]:
    """The UNIQ_KEY token and the KEYS tokens of every message, before the blank checks."""
    regions = _Regions(buf, at, length)
    seps = regions.find(_ITEM_SEPARATOR)
    n = at.size
    uniq = _values(regions, seps, n, _UNIQ_NAME)
    keys = _values(regions, seps, n, _KEYS_NAME)
    um = np.flatnonzero(uniq[:, 0] >= 0)
    return Tokens(um, uniq[um, 0], uniq[um, 1]), _split(regions, keys)


@dataclass(frozen=True)
class TokenFacts:
    """Per token: its Java hash (unsigned), whether it has a non-ASCII byte, whether it is
    all Java whitespace (empty tokens are)."""

    hashes: npt.NDArray[np.uint32]
    high: npt.NDArray[np.bool_]
    blank: npt.NDArray[np.bool_]


def token_facts(buf: U8, start: Int64s, end: Int64s) -> TokenFacts:
    """:class:`TokenFacts` of the byte spans ``[start, end)`` of ``buf``, in one pass over
    their bytes (``String.hashCode`` = ``sum(b[j] * 31**(len-1-j))`` modulo 2**32)."""
    length = end - start
    m = start.size
    hashes = np.zeros(m, dtype=np.uint32)
    high = np.zeros(m, dtype=np.bool_)
    blank = np.ones(m, dtype=np.bool_)
    total = int(length.sum())
    if not total:
        return TokenFacts(hashes, high, blank)
    firsts = np.cumsum(length) - length
    index = np.repeat(start - firsts, length) + np.arange(total, dtype=np.int64)
    data = buf[index]
    powers = _powers(int(length.max())).astype(np.uint32)
    terms = data.astype(np.uint32) * powers[np.repeat(end, length) - index - 1]
    filled = np.flatnonzero(length)
    at = firsts[filled]
    hashes[filled] = np.add.reduceat(terms, at, dtype=np.uint32)
    high[filled] = np.maximum.reduceat(data, at) >= 0x80
    blank[filled] = np.logical_and.reduceat(_BLANK[data], at)
    return TokenFacts(hashes, high, blank)


def _powers(count: int) -> npt.NDArray[np.uint64]:
    """``31**i`` for ``i < count + 1``, wrapped modulo 2**64 (hence right modulo 2**32)."""
    powers = np.full(count + 1, 31, dtype=np.uint64)
    powers[0] = 1
    return np.cumprod(powers, dtype=np.uint64)


def dedupe(buf: U8, tokens: Tokens, hashes: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
    """Keep-mask of the tokens: a token equal to an earlier one of its message is dropped.

    Only tokens sharing message, length and hash are compared (in Python: that is duplicates
    and rare collisions)."""
    keep = np.ones(tokens.msg.size, dtype=np.bool_)
    if tokens.msg.size < 2:
        return keep
    length = tokens.end - tokens.start
    order = np.lexsort((np.arange(length.size), hashes, length, tokens.msg))
    key = np.stack((tokens.msg[order], length[order], hashes[order].astype(np.int64)), axis=1)
    same = np.all(key[1:] == key[:-1], axis=1)
    if not same.any():
        return keep
    bounds = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
    for lo, hi in zip(bounds[::2].tolist(), bounds[1::2].tolist(), strict=True):
        seen: set[bytes] = set()
        for t in order[lo : hi + 1].tolist():  # by position within the run
            content = buf[tokens.start[t] : tokens.end[t]].tobytes()
            if content in seen:
                keep[t] = False
            seen.add(content)
    return keep


def hashset_order(msg: Int64s, hashes: npt.NDArray[np.uint32]) -> Int64s:
    """The order in which Java's ``HashSet`` iterates each message's keys: stable by bucket
    ``(h ^ (h >>> 16)) & (n - 1)``, ``n`` = 16 doubled while ``size > 0.75 n``."""
    if not msg.size:
        return np.zeros(0, dtype=np.int64)
    size = np.bincount(msg)[msg]
    table = np.full(msg.size, 16, dtype=np.int64)
    while np.any(grow := size > table * 3 // 4):
        table[grow] *= 2
    h = hashes.astype(np.int64)
    bucket = (h ^ (h >> 16)) & (table - 1)
    return np.lexsort((np.arange(msg.size), bucket, msg))


def composite_hashes(
    topic: str, key_hashes: npt.NDArray[np.uint32], lengths: Int64s
) -> npt.NDArray[np.uint64]:
    """``String.hashCode(topic + "#" + key)`` (unsigned) from each key's hash and length."""
    prefix = np.uint64(java_string_hash(topic + "#") & _MASK32)
    shift = _powers(int(lengths.max()) if lengths.size else 0)[lengths]
    return (prefix * shift + key_hashes.astype(np.uint64)) & np.uint64(_MASK32)


def batch_tokens(
    buf: U8, at: Int64s, length: Int64s
) -> tuple[Tokens, npt.NDArray[np.uint32], npt.NDArray[np.bool_]]:
    """The keys of every message as Java's ``HashSet`` iterates them (their hashes, unsigned),
    and the mask of the messages left to the Python path (a non-ASCII byte in a key value)."""
    n = at.size
    uniq, keys = find_tokens(buf, at, length)
    uf = token_facts(buf, uniq.start, uniq.end)
    kf = token_facts(buf, keys.start, keys.end)
    slow = np.zeros(n, dtype=np.bool_)
    slow[uniq.msg[uf.high]] = True
    slow[keys.msg[kf.high]] = True
    keys_used = np.zeros(n, dtype=np.bool_)
    keys_used[keys.msg[~kf.blank]] = True  # KEYS is blank when every token is
    use_u = ~slow[uniq.msg] & ~uf.blank
    use_k = ~slow[keys.msg] & keys_used[keys.msg]
    tokens = Tokens(
        np.concatenate((uniq.msg[use_u], keys.msg[use_k])),
        np.concatenate((uniq.start[use_u], keys.start[use_k])),
        np.concatenate((uniq.end[use_u], keys.end[use_k])),
    )
    hashes = np.concatenate((uf.hashes[use_u], kf.hashes[use_k]))
    rank = np.concatenate((np.full(int(use_u.sum()), -1), np.flatnonzero(use_k)))
    order = np.lexsort((rank, tokens.msg))  # UNIQ_KEY first, then the KEYS tokens
    tokens, hashes = tokens.take(order), hashes[order]
    keep = dedupe(buf, tokens, hashes)
    tokens, hashes = tokens.take(keep), hashes[keep]
    order = hashset_order(tokens.msg, hashes)
    return tokens.take(order), hashes[order], slow
