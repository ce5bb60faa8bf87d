"""Bodies as upstream's ``RemotingSerializable.encode`` (fastjson 1.x) writes them, and reads them.

fastjson writes a bean's properties in alphabetical order (callers pass dicts built that way),
``null`` properties not at all, enums by name, doubles with a fraction (``0.0``), and a map whose
keys are beans with the key written as a JSON object: ``TopicStatsTable.offsetTable`` (a
``Map<MessageQueue, TopicOffset>``) is ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``.
That is not standard JSON, but it is what every broker sends and what the Java client's
``RemotingSerializable.decode`` reads; :class:`ObjectKeyMap` writes it and :func:`loads` reads
it back (an object key becomes a sorted tuple of its ``(name, value)`` pairs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

__all__ = ["ObjectKeyMap", "dumps", "loads", "message_queue"]


class ObjectKeyMap:
    """A Java map whose keys are beans (written as JSON objects), in the given order."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[tuple[Mapping[str, Any], Any]]) -> None:
        self.items = list(items)


def message_queue(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    """A ``MessageQueue`` bean (properties alphabetical)."""
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def dumps(value: Any) -> bytes:
    """``value`` as compact fastjson text, UTF-8 (``None`` properties of a dict are dropped)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, ObjectKeyMap):
        out.append("{")
        for i, (key, item) in enumerate(value.items):
            out.append("," if i else "")
            _write(key, out)
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in value.items():
            if item is None:
                continue
            out.append("" if first else ",")
            first = False
            out.append(json.dumps(str(key), ensure_ascii=False) + ":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple | set | frozenset):
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            _write(item, out)
        out.append("]")
    elif value is None or isinstance(value, bool | int | float | str):
        out.append(json.dumps(value, ensure_ascii=False))
    else:
        raise TypeError(f"cannot write {type(value).__name__} value {value!r} as a body")


_SCALAR = json.JSONDecoder()
_SPACE = " \t\n\r"


def loads(data: bytes | str) -> Any:
    """Parse a body, accepting object (and bare number) map keys.

    Raises:
        ValueError: the text is not (fastjson's) JSON; ``json.JSONDecodeError`` is one.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    value, end = _value(text, _skip(text, 0))
    if _skip(text, end) != len(text):
        raise ValueError(f"extra data at {end} of {len(text)} characters")
    return value


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos


def _expect(text: str, pos: int, chars: str) -> tuple[str, int]:
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] not in chars:
        raise ValueError(f"expected one of {chars!r} at {pos}")
    return text[pos], pos + 1


def _value(text: str, pos: int) -> tuple[Any, int]:
    if text.startswith("{", pos):
        return _object(text, pos + 1)
    if text.startswith("[", pos):
        return _array(text, pos + 1)
    return _SCALAR.raw_decode(text, pos)


def _hashable(key: Any) -> Any:
    if isinstance(key, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in key.items()))
    if isinstance(key, list):
        return tuple(_hashable(v) for v in key)
    return key


def _object(text: str, pos: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    pos = _skip(text, pos)
    if text.startswith("}", pos):
        return out, pos + 1
    while True:
        key, pos = _value(text, _skip(text, pos))
        _, pos = _expect(text, pos, ":")
        out[_hashable(key)], pos = _value(text, _skip(text, pos))
        sep, pos = _expect(text, pos, ",}")
        if sep == "}":
            return out, pos


def _array(text: str, pos: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    pos = _skip(text, pos)
    if text.startswith("]", pos):
        return out, pos + 1
    while True:
        item, pos = _value(text, _skip(text, pos))
        out.append(item)
        sep, pos = _expect(text, pos, ",]")
        if sep == "]":
            return out, pos
