"""What every read returns, from the tier or from the broker: :class:`Unit`, one stored message
unit with its queue offset and tags code."""

from __future__ import annotations

from dataclasses import dataclass

from tiered.broker import message as msgcodec


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
