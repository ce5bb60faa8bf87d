"""A provider that refuses every write: the safety net of ``tieredStoreReadOnly=true``.

A read-only sidecar starts none of its writers (uploads, expiry, index uploads, the metadata
mirror); this wrapper makes a writer that a later change forgets to gate fail loudly, naming the
object, instead of changing the tier. Refused calls never reach the wrapped provider, so they are
not counted as backend requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from typing import TypeVar

from tiered.errors import TierReadOnlyError

from .wrappers import WrappedProvider

T = TypeVar("T")

WRITES: Final = frozenset({"append", "sync", "seal", "put", "delete", "clean_temporary"})
"""The operations (:meth:`WrappedProvider._around` names) that change the backend."""


class ReadOnlyProvider(WrappedProvider):
    """Passes reads (``size``, ``read``, ``list``, ``exists``) through; every write raises
    :class:`~tiered.errors.TierReadOnlyError` naming its key."""

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        if operation in WRITES:
            what = f"object {key!r}" if key else "the backend"
            raise TierReadOnlyError(
                f"{operation} of {what} refused: tieredStoreReadOnly=true, this sidecar never "
                "writes the tier (set it to false on the one sidecar that offloads this broker)",
                key=key or None,
            )
        return call()
