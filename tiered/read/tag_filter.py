"""Tag subscriptions (``*``, ``TagA || TagB``), matched by tag code and then by the ``TAGS`` value.

The consumequeue's tag code is the Java hash of ``TAGS``; two different tags can share a hash, so a
code match is confirmed against the message's own ``TAGS`` property (the broker leaves that to the
client; a cold read answers exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tiered.broker import message as msgcodec
from tiered.broker.javautil import java_string_hash
from tiered.broker.message import Message
from tiered.errors import InvalidRequestError
from tiered.process.native import kernel
from tiered.read.read_unit import Run

SUB_ALL = "*"
ASK = 2  # the kernel's tags_in verdict for a unit it leaves to Python


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed subscription; ``tags`` is ``None`` for "everything"."""

    tags: frozenset[str] | None = None

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """``None``, ``""`` or ``"*"`` match all; otherwise tags separated by ``||``.

        Raises:
            InvalidRequestError: an empty tag between separators (``"A || || B"``).
        """
        if expression is None or expression.strip() in ("", SUB_ALL):
            return cls(None)
        parts = [p.strip() for p in expression.split("||")]
        if any(not p for p in parts):
            raise InvalidRequestError(
                f"tags={expression!r} has an empty tag; write tags separated by ' || ' or '*'"
            )
        if SUB_ALL in parts:
            return cls(None)
        return cls(frozenset(parts))

    @property
    def codes(self) -> npt.NDArray[np.int32]:
        """The Java hashes of the subscribed tags."""
        return np.array(sorted(java_string_hash(t) for t in self.tags or ()), dtype=np.int32)

    def match_codes(self, tags_codes: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which consumequeue tag codes can match (low 32 bits compared, as the broker does)."""
        codes = np.asarray(tags_codes, dtype=np.int64)
        if self.tags is None:
            return np.ones(codes.shape, dtype=np.bool_)
        return np.isin(codes.astype(np.int32), self.codes)

    def match_message(self, message: Message) -> bool:
        """The message's own ``TAGS`` is one of the subscribed tags."""
        return self.tags is None or message.tags in self.tags

    def match_run(self, run: Run) -> npt.NDArray[np.bool_]:
        """Which units of a run the subscription takes: tag codes over the batch, then each
        code match's ``TAGS`` (one compiled pass; a unit it cannot decide -- ``TAGS`` not
        valid UTF-8, or a torn unit -- is decoded here)."""
        ok = self.match_codes(run.tags)
        if self.tags is None or not ok.any():
            return ok
        at = np.flatnonzero(ok)
        rel, sizes = run.rel[at], run.sizes[at]
        wanted = [t.encode("utf-8", "surrogatepass") for t in sorted(self.tags)]
        verdicts = np.frombuffer(kernel().tags_in(run.data, rel, sizes, wanted), np.uint8)
        ask = np.flatnonzero(verdicts == ASK).tolist()
        if ask:
            verdicts = verdicts.copy()
        mv = memoryview(run.data)
        for i in ask:
            a, n = int(rel[i]), int(sizes[i])
            verdicts[i] = self.match_message(msgcodec.decode(bytes(mv[a : a + n])))
        ok[at] = verdicts == 1
        return ok

    def __str__(self) -> str:
        return SUB_ALL if self.tags is None else " || ".join(sorted(self.tags))
