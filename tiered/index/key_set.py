"""The keys a message is indexed under, message by message, as upstream computes them.

A message is indexed under ``UNIQ_KEY`` (unless blank) and every token of ``KEYS.split(" ")``
(unless ``KEYS`` is blank), deduplicated; upstream iterates that ``HashSet``, which fixes the order
of the message's items in the file (spec §6.4, §6.8). This module is the reference: the query path
uses :func:`key_set`, :class:`IndexBatch.for_queue` uses :func:`message_key_sets`, and the bulk
path (:mod:`.bulk_keys`) hands it the rare message whose keys are not valid UTF-8.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.javautil import java_split_space
from tiered.broker.unit_fields import property_spans
from tiered.index.java_hash import hashset_order
from tiered.index.java_hash import string_hashes

I64 = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview

# Character.isWhitespace (StringUtils.isBlank): Zs/Zl/Zp except no-break spaces, plus controls.
_JAVA_BLANK: Final = re.compile(
    "[\t\n\x0b\x0c\r\x1c-\x1f \u1680\u2000-\u2006\u2008-\u200a\u2028\u2029\u205f\u3000]*"
)
_KEYS_MARK: Final = (msgcodec.PROPERTY_KEYS + msgcodec.NAME_VALUE_SEPARATOR).encode()
_UNIQ_MARK: Final = (msgcodec.PROPERTY_UNIQ_KEY + msgcodec.NAME_VALUE_SEPARATOR).encode()


def is_java_blank(text: str | None) -> bool:
    """``StringUtils.isBlank``: None, empty, or only Java whitespace characters."""
    return text is None or _JAVA_BLANK.fullmatch(text) is not None


def key_set(uniq: str | None, joined: str | None) -> list[str]:
    """The keys of one message in insertion order, each once: ``UNIQ_KEY`` then the ``KEYS``
    tokens (blank values left out)."""
    members: list[str] = []
    if uniq is not None and not is_java_blank(uniq):
        members.append(uniq)
    if joined is not None and not is_java_blank(joined):
        members.extend(java_split_space(joined))
    return list(dict.fromkeys(members)) if len(members) > 1 else members


def message_key_sets(
    uniq_keys: Sequence[str | None], keys: Sequence[str | None]
) -> tuple[list[str], I64]:
    """The key set of each message, flattened, in Java ``HashSet`` iteration order.

    Returns ``(keys, counts)``: message ``i`` owns ``counts[i]`` consecutive entries of ``keys``.
    """
    flat: list[str] = []
    counts = np.zeros(len(uniq_keys), dtype=np.int64)
    for i, (uniq, joined) in enumerate(zip(uniq_keys, keys, strict=True)):
        members = key_set(uniq, joined)
        counts[i] = len(members)
        flat.extend(members)
    if not counts.size or int(counts.max()) < 2:
        return flat, counts
    owner = np.repeat(np.arange(counts.size), counts)
    order = hashset_order(owner, string_hashes(flat)[0])
    return [flat[j] for j in order.tolist()], counts


def key_properties(
    data: Buffer, starts: I64, sizes: I64
) -> tuple[list[str | None], list[str | None]]:
    """``UNIQ_KEY`` and ``KEYS`` of each unit held in ``data`` (None when absent), as the broker
    decodes them (``string2messageProperties``)."""
    at, length = property_spans(data, starts, sizes)
    view = memoryview(data)
    uniq: list[str | None] = []
    keys: list[str | None] = []
    for a, n in zip(at.tolist(), length.tolist(), strict=True):
        raw = bytes(view[a : a + n]) if n > 0 else b""
        if _KEYS_MARK not in raw and _UNIQ_MARK not in raw:
            uniq.append(None)
            keys.append(None)
            continue
        props = msgcodec.decode_properties(raw)
        uniq.append(props.get(msgcodec.PROPERTY_UNIQ_KEY))
        keys.append(props.get(msgcodec.PROPERTY_KEYS))
    return uniq, keys
