"""Reading a request's ``extFields`` (all strings, as a Java client sends them)."""

from __future__ import annotations

from tiered.errors import InvalidRequestError


def field(ext: dict[str, str], name: str) -> str:
    """The non-empty field ``name``.

    Raises:
        InvalidRequestError: it is missing or empty.
    """
    value = ext.get(name)
    if value is None or value == "":
        raise InvalidRequestError(f"the request has no {name} field")
    return value


def int_field(ext: dict[str, str], name: str, default: int | None = None) -> int:
    """The whole-number field ``name`` (``default`` when missing or empty, if given).

    Raises:
        InvalidRequestError: it is missing without a default, or not a whole number.
    """
    raw = ext.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidRequestError(f"the request has no {name} field")
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise InvalidRequestError(f"{name}={raw!r} is not a whole number") from e
