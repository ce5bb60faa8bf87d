"""``java.util.Properties`` text, as the broker reads ``broker.conf``."""

from __future__ import annotations

import re
from collections.abc import Iterator

from tiered.errors import ConfigError

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, source: str) -> dict[str, str]:
    """Parse ``java.util.Properties`` text into a dict; a repeated key keeps its last value.

    ``key=value``, ``key: value`` and ``key value``; ``#`` and ``!`` comment lines; backslash line
    continuation; ``\\t \\n \\r \\f \\uXXXX`` escapes. Whitespace around the key and the value is
    dropped (trailing whitespace unless escaped; Java keeps it, which is almost always an accident).
    ``source`` names the text in error messages.

    Raises:
        ConfigError: a line has no key or a malformed ``\\uXXXX`` escape.
    """
    return {key: value for key, value, _ in entries(text, source)}


def entries(text: str, source: str) -> Iterator[tuple[str, str, int]]:
    """``(key, value, line number)`` for each logical line of ``text``."""
    for lineno, line in _logical_lines(text):
        end = 0
        while end < len(line) and line[end] not in "=:" + _WS:
            end += 2 if line[end] == "\\" else 1
        end = min(end, len(line))
        rest = line[end:]
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        else:
            rest = rest.lstrip(_WS)
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
        key = _unescape(line[:end], source, lineno)
        if not key:
            raise ConfigError(f"{source}:{lineno}: line {line!r} has no key before its value")
        yield key, _unescape(_rstrip_unescaped(rest.lstrip(_WS)), source, lineno), lineno


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Non-comment, non-blank lines with continuations joined, each with its first line number."""
    lines = re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff"))
    i = 0
    while i < len(lines):
        lineno, line = i + 1, lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _odd_backslashes(line):
            line = line[:-1]
            if i < len(lines):
                line += lines[i].lstrip(_WS)
                i += 1
        yield lineno, line


def _odd_backslashes(s: str) -> bool:
    return (len(s) - len(s.rstrip("\\"))) % 2 == 1


def _rstrip_unescaped(s: str) -> str:
    end = len(s)
    while end > 0 and s[end - 1] in _WS and not _odd_backslashes(s[: end - 1]):
        end -= 1
    return s[:end]


def _unescape(s: str, source: str, lineno: int) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        i += 1
        if c != "\\" or i == len(s):
            out.append(c)
            continue
        c = s[i]
        i += 1
        if c == "u":
            digits = s[i : i + 4]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(f"{source}:{lineno}: malformed \\uXXXX escape '\\u{digits}'")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)
