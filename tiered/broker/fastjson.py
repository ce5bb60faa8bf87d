"""fastjson 1.x's JSON dialect as text: reading its bare integer map keys, writing its pretty
layout. No models here (:mod:`tiered.broker.configjson` has the broker files' models), so the
metadata reader can take a Java broker's file without loading them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from typing import Final

# a whole string literal (kept as is) or a bare integer key right after '{' or ','
_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(?<=[{,])(\s*)(-?\d+)(\s*):')


_INT_KEY_MARK: Final = "\x00int:"  # cannot occur unescaped in JSON text, so never in a real key


def _quote_key(m: re.Match[str]) -> str:
    if m.group(2) is None:
        return m.group(0)
    return f'{m.group(1)}"{m.group(2)}"{m.group(3)}:'


def _mark_key(m: re.Match[str]) -> str:
    if m.group(2) is None:
        return m.group(0)
    return f'{m.group(1)}"\\u0000int:{m.group(2)}"{m.group(3)}:'


def _int_keys_hook(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
    mark = len(_INT_KEY_MARK)
    return {int(k[mark:]) if k.startswith(_INT_KEY_MARK) else k: v for k, v in pairs}


def parse_fastjson(text: str, *, int_keys: bool = False) -> Any:
    """Parse fastjson 1.x output, including unquoted integer map keys.

    Bare integer keys become strings (as if quoted), or ``int`` with ``int_keys=True`` (which
    keeps the difference between ``{0:1}`` and ``{"0":1}`` for a byte-exact re-dump).

    Raises:
        json.JSONDecodeError: the text is not JSON even after quoting bare integer keys.
    """
    if int_keys:
        return json.loads(_TOKEN.sub(_mark_key, text), object_pairs_hook=_int_keys_hook)
    return json.loads(_TOKEN.sub(_quote_key, text))


def dumps_fastjson(obj: Any, *, pretty: bool = True) -> str:
    """Serialize like fastjson 1.2.83: ``int`` keys bare, ``str`` keys quoted, dict order kept.

    Pretty: each string-keyed entry on its own line indented by TABs; integer-keyed entries follow
    ``{`` or ``,`` directly; the closing brace of a non-empty map goes on its own line. Lists are
    written inline (fastjson's collection codec). Bean property order is the caller's: pass dicts
    with keys already sorted alphabetically for plain beans.
    """
    out: list[str] = []
    _dump(obj, 0, pretty, out)
    return "".join(out)


def _dump(obj: Any, level: int, pretty: bool, out: list[str]) -> None:
    if isinstance(obj, Mapping):
        if not obj:
            out.append("{}")
            return
        out.append("{")
        for i, (key, value) in enumerate(obj.items()):
            if i:
                out.append(",")
            if isinstance(key, bool) or not isinstance(key, str | int):
                raise TypeError(f"map key {key!r} must be a str or an int")
            if isinstance(key, int):
                out.append(f"{key}:")
            else:
                if pretty:
                    out.append("\n" + "\t" * (level + 1))
                out.append(json.dumps(key, ensure_ascii=False) + ":")
            _dump(value, level + 1, pretty, out)
        if pretty:
            out.append("\n" + "\t" * level)
        out.append("}")
    elif isinstance(obj, list | tuple):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _dump(item, level + 1, pretty, out)
        out.append("]")
    elif obj is None or isinstance(obj, bool | int | float | str):
        out.append(json.dumps(obj, ensure_ascii=False))
    else:
        raise TypeError(f"cannot serialize {type(obj).__name__} value {obj!r} as fastjson")


def quote_bare_keys(text: str) -> str:
    """``text`` with fastjson's bare integer map keys quoted (``{0:1}`` -> ``{"0":1}``): standard
    JSON when the rest of it is."""
    return _TOKEN.sub(_quote_key, text)
