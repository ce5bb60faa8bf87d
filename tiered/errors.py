"""The one error tree of rocketmq-tiered.

Every error raised by this package derives from :class:`TieredStoreError`. Leaves also inherit the
matching built-in exception (``FileNotFoundError``, ``ValueError``, ...) so callers that only know
the standard library still catch them. ``retriable`` tells a caller whether trying the same
operation again may succeed (throttling, 5xx, timeouts) or not (bad input, corrupt data).
"""

from __future__ import annotations


class TieredStoreError(Exception):
    """Raised when anything in rocketmq-tiered fails; the root of the tree."""

    retriable: bool = False


# --- configuration -------------------------------------------------------------------------------


class ConfigError(TieredStoreError, ValueError):
    """Raised when a configuration file, key or value is invalid."""


# --- the broker's local store (read-only) --------------------------------------------------------


class BrokerStoreError(TieredStoreError):
    """Raised when a file of the broker's local store cannot be used."""


class CorruptStoreFileError(BrokerStoreError, ValueError):
    """Raised when a broker store file has bytes that do not decode (bad magic, length or CRC).

    ``path`` and ``offset`` name where the bad bytes are; ``offset`` is the absolute offset when the
    file belongs to an offset-named queue (commitlog physical offset, consumequeue byte offset).
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.path = path
        self.offset = offset


class StoreFileNotFoundError(BrokerStoreError, FileNotFoundError):
    """Raised when a broker store file or directory that must exist does not."""


class OffsetNotInStoreError(BrokerStoreError, LookupError):
    """Raised when a physical or queue offset lies outside the files the broker still holds."""


class UnsupportedStoreFeatureError(BrokerStoreError, NotImplementedError):
    """Raised when a store uses a feature the sidecar cannot read (e.g. RocksDB consume queues)."""


class ReadOnlyViolationError(BrokerStoreError, PermissionError):
    """Raised when a write inside the broker's store directory is attempted."""


# --- driver layer (providers) --------------------------------------------------------------------


class ProviderError(TieredStoreError):
    """Raised when a storage backend operation fails.

    ``key`` names the object the operation was about (the provider key, without any backend
    prefix; for a listing, its prefix), ``None`` when nothing names it; log lines about the
    failure carry it as ``objectKey``.
    """

    key: str | None = None

    def __init__(self, message: str = "", *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class SegmentNotFoundError(ProviderError, FileNotFoundError):
    """Raised when a segment object does not exist in the backend."""


class SegmentExistsError(ProviderError, FileExistsError):
    """Raised when a whole-object put would replace an existing object without ``overwrite``."""


class PositionMismatchError(ProviderError, ValueError):
    """Raised when an append's position is not the object's current size.

    ``expected`` is the backend's real size, so a caller can resume exactly where the object ends.
    """

    def __init__(self, message: str, *, key: str, expected: int, given: int):
        super().__init__(message, key=key)
        self.expected = expected
        self.given = given


class ReadPastEndError(ProviderError, EOFError):
    """Raised when a read starts at or beyond the end of an object."""


class InvalidRangeError(ProviderError, ValueError):
    """Raised when a read or append names a negative position or length."""


class SegmentSealedError(ProviderError, PermissionError):
    """Raised when an append targets a segment that was sealed."""


class InvalidKeyError(ProviderError, ValueError):
    """Raised when a key or key component would escape the backend root or is otherwise unusable."""


class ProviderUnavailableError(ProviderError, ConnectionError):
    """Raised when the backend cannot be reached or answers with a server error."""

    retriable = True


class ThrottledError(ProviderError, ConnectionError):
    """Raised when the backend asks the client to slow down."""

    retriable = True


class ProviderTimeoutError(ProviderError, TimeoutError):
    """Raised when a backend request times out."""

    retriable = True


class AccessDeniedError(ProviderError, PermissionError):
    """Raised when the backend refuses the credentials or the operation."""


class TierReadOnlyError(ProviderError, PermissionError):
    """Raised when something tries to write a tier the sidecar must only read
    (``tieredStoreReadOnly=true``); ``key`` names the object."""


class MissingDependencyError(TieredStoreError, ImportError):
    """Raised when an optional dependency is not installed; the message carries the pip hint."""


class InjectedFaultError(ProviderError, ConnectionError):
    """Raised by the fault-injection wrapper in place of a real backend failure."""

    retriable = True


# --- container / access layers -------------------------------------------------------------------


class MetadataError(TieredStoreError, ValueError):
    """Raised when the tiered metadata JSON cannot be parsed or is inconsistent."""


class IntegrityError(TieredStoreError, ValueError):
    """Raised when bytes read back from the tier fail a check (body CRC, size, queue offset)."""

    def __init__(self, message: str, *, key: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.key = key
        self.offset = offset


class InvalidRequestError(TieredStoreError, ValueError):
    """Raised when a read request names an impossible value (negative offset, bad tag filter)."""


class ReadBusyError(TieredStoreError):
    """Raised when a cold read would wait behind ``tieredReadMaxPending`` others for the backend:
    refused at once rather than queued. Retry after a moment (the HTTP API answers 503 with
    ``Retry-After``, the replay port ``SYSTEM_BUSY``), or raise ``tieredReadMaxPending``."""

    retriable = True

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class PopStateFullError(TieredStoreError, RuntimeError):
    """Raised when a POP consumer would start on a queue while the replay endpoint already keeps
    POP state for its cap of queues; answered ``SYSTEM_BUSY`` (groups that finish, or whose
    state is forgotten, make room)."""

    retriable = True


class IndexFileError(TieredStoreError, ValueError):
    """Raised when an index file (the broker's or a tiered one) is malformed."""


# --- the replay endpoint (RocketMQ remoting protocol) --------------------------------------


class ProtocolError(TieredStoreError, ValueError):
    """Raised when a remoting frame or header does not decode (the connection cannot go on).

    ``reason`` is a short fixed word for the metric label (``too_large``, ``bad_length``,
    ``bad_header``, ``serialize_type``, ``not_json``).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class AclError(TieredStoreError, PermissionError):
    """Raised when a request does not carry an account's credentials, or the account may not
    read what it names. ``reason`` is ``no_credentials``, ``bad_credentials`` or ``forbidden``;
    ``access_key`` the account named (never the secret)."""

    def __init__(self, message: str, *, reason: str, access_key: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.access_key = access_key
