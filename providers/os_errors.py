"""One translation of ``OSError`` to the provider error tree, for every provider that works
through file-system calls (posix, fsspec: s3fs and friends translate their own codes to the
built-in ``OSError`` subclasses first)."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from typing import Final

from tiered.errors import AccessDeniedError
from tiered.errors import ProviderError
from tiered.errors import ProviderTimeoutError
from tiered.errors import ProviderUnavailableError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import ThrottledError

BY_TYPE: Final[
    tuple[tuple[type[OSError] | tuple[type[OSError], ...], type[ProviderError]], ...]
] = (
    ((FileNotFoundError, NotADirectoryError, IsADirectoryError), SegmentNotFoundError),
    (FileExistsError, SegmentExistsError),
    (PermissionError, AccessDeniedError),
    (TimeoutError, ProviderTimeoutError),
    (ConnectionError, ProviderUnavailableError),
)
"""``OSError`` subclasses and the error each becomes (the first match wins)."""
BY_ERRNO: Final[dict[int, type[ProviderError]]] = {
    errno.EREMOTEIO: ProviderUnavailableError,
    errno.EBUSY: ThrottledError,
    errno.EAGAIN: ThrottledError,
}
"""Errno values of a plain ``OSError`` and the error each becomes; any other is a ProviderError."""


def translate(e: OSError, key: str, what: str) -> ProviderError:
    """The provider error for ``e`` raised by an operation on ``key`` (``what`` names the
    provider's operation for the message); the caller chains it."""
    message = f"{what} on key {key!r} failed: {e}"
    for types, error in BY_TYPE:
        if isinstance(e, types):
            return error(message, key=key)
    return BY_ERRNO.get(e.errno or 0, ProviderError)(message, key=key)


@contextlib.contextmanager
def translated(key: str, what: str) -> Iterator[None]:
    """Translate ``OSError`` raised inside the block; errors of the tree pass unchanged."""
    try:
        yield
    except ProviderError:
        raise
    except OSError as e:
        raise translate(e, key, what) from e
