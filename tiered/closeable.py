"""One base for everything a ``with`` block closes: providers, index files, the sidecar, the read
store, clients."""

from __future__ import annotations

from typing import Self


class Closeable:
    """Closed by :meth:`close`; ``with obj:`` closes it on the way out (also on an error)."""

    def close(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
