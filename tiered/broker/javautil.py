"""Java semantics the on-disk formats depend on: ``String.hashCode``, ``split(" ")``, ``%``."""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF


def to_i32(value: int) -> int:
    """Wrap ``value`` to a signed 32-bit integer, as Java's ``int`` arithmetic does."""
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(text: str) -> int:
    """``java.lang.String.hashCode``: ``31*h + unit`` over UTF-16 code units, signed 32-bit."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def java_rem(a: int, b: int) -> int:
    """Java's ``a % b``: truncating, the result takes the sign of the dividend."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def java_split_space(text: str) -> list[str]:
    """Java ``String.split(" ")``: leading and interior empty strings kept, trailing dropped."""
    parts = text.split(" ")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def tags_code(tags: str | None) -> int:
    """The consumequeue tag code of ``TAGS``: its Java hash, sign-extended to i64; 0 if empty."""
    if not tags:
        return 0
    return java_string_hash(tags)
