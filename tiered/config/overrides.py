"""Per-topic overrides (``tieredStorageLevelOverrides``, ``tieredStoreFileReservedTimeOverrides``):
``pattern:value`` entries parsed once, when the configuration is validated, and the one
first-match rule every reader of them uses."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Generic
from typing import TypeVar

__all__ = ["TOPIC_GLOB", "TopicOverride", "first_match", "parse_overrides"]

V = TypeVar("V")

TOPIC_GLOB = re.compile(r"[%|A-Za-z0-9_\-*?\[\]!]+")
"""A topic pattern: topic characters plus the ``fnmatch`` wildcards ``* ? [...]``."""


@dataclass(frozen=True, slots=True)
class TopicOverride(Generic[V]):
    """One ``pattern:value`` entry; its ``str`` is the entry as a properties file spells it (an
    enum by its name), so the configuration prints and reloads unchanged."""

    pattern: str
    value: V

    def __str__(self) -> str:
        value = self.value.name if isinstance(self.value, enum.Enum) else self.value
        return f"{self.pattern}:{value}"


def first_match(overrides: Iterable[TopicOverride[V]], topic: str) -> TopicOverride[V] | None:
    """The first entry whose pattern matches ``topic`` (``fnmatch``, case-sensitive), else None."""
    return next((o for o in overrides if fnmatchcase(topic, o.pattern)), None)


def parse_overrides(
    value: object, unit: str, usage: str, parse: Callable[[str, str], V | None]
) -> tuple[TopicOverride[V], ...]:
    """``pattern:value`` entries from a ``,``-separated string or a sequence (entries already
    parsed are kept). ``parse(entry, text)`` gives the value, None when ``text`` is not one, or
    raises ``ValueError`` with its own message; ``usage`` is the fix a malformed entry is told.

    Raises:
        ValueError: a malformed entry, named with ``!r``.
    """
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise ValueError(f"is not a comma-separated list of topic:{unit}")
    out: list[TopicOverride[V]] = []
    for item in items:
        if isinstance(item, TopicOverride):
            out.append(item)
            continue
        raw = str(item).strip()
        if not raw:
            continue
        pattern, sep, text = raw.rpartition(":")
        parsed = parse(raw, text.strip()) if sep and TOPIC_GLOB.fullmatch(pattern.strip()) else None
        if parsed is None:
            raise ValueError(f"holds {raw!r}; {usage}")
        out.append(TopicOverride(pattern.strip(), parsed))
    return tuple(out)
