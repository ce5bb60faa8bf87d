"""The provider contract: object storage with positional append, documented once, here.

A provider stores segment objects under slash-separated keys (built by :mod:`.layout`; every
method checks its key there and raises :class:`~tiered.errors.InvalidKeyError` for an unsafe one).
It knows nothing of messages. Every provider is

- synchronous and safe for concurrent use from many threads **on different keys** (one writer per
  key: the container layer never appends to, seals or deletes one key from two threads at once);
- picklable (Spark executors receive providers): SDK clients and open handles are dropped by
  ``__getstate__`` and recreated lazily;
- a context manager: ``close()`` releases clients and handles; a closed provider may be reused
  (it reconnects lazily).

Object lifecycle. ``append(key, data, 0)`` creates an *unsealed* object; further appends must name
its exact current size, which makes a retried upload after a crash safe: a retry of an append that
did land fails with :class:`~tiered.errors.PositionMismatchError` whose ``expected`` is the real
size. ``seal(key)`` promises the object will not grow again; a provider may consolidate it (object
stores merge their chunk objects) and, when ``enforces_seal`` is true, rejects later appends with
:class:`~tiered.errors.SegmentSealedError`. ``put`` writes a whole object at once (index files,
the metadata mirror); a put object counts as sealed. An object of size 0 exists. An ``append``
is durable when it returns (``append_deferred`` waits for ``sync``), and every backend request is
reported to the request listeners (:meth:`Provider.add_request_listener`).
"""

from __future__ import annotations

import abc
import threading
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import BinaryIO
from typing import ClassVar

from tiered.closeable import Closeable
from tiered.errors import InvalidRangeError
from tiered.errors import SegmentNotFoundError
from tiered.errors import TieredStoreError

if TYPE_CHECKING:
    from tiered.config import TieredConfig

BytesLike = bytes | bytearray | memoryview
"""What ``append`` accepts (and ``put``, besides a readable binary file object)."""

Payload = bytes | bytearray | memoryview | BinaryIO
"""What ``put`` accepts: bytes, or a binary file object read to its end (bounded memory)."""

RequestListener = Callable[[str], None]
"""Called with an operation name before each backend request (``RETRY_<REASON>`` before a
request is resent after a retriable failure); may raise to abort the request."""
RETRY_PREFIX = "RETRY_"


class RequestCounts:
    """A request listener that counts requests by operation (safe from many threads): pass it
    to :meth:`Provider.add_request_listener` and read :attr:`counts`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, operation: str) -> None:
        with self._lock:
            self.counts[operation] += 1

    def many(self, operation: str, n: int) -> None:
        """``n`` requests of ``operation`` at once (see :meth:`Provider._request_many`)."""
        with self._lock:
            self.counts[operation] += n


class Provider(Closeable, abc.ABC):
    """Segment object storage with positional append; see the module docstring for the rules."""

    name: ClassVar[str] = ""
    """The registry name (``posix``, ``memory``, ``s3``, ``fsspec``, or a third-party name)."""

    def __init__(self) -> None:
        self._listeners: tuple[RequestListener, ...] = ()
        self._listeners_lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> Provider:
        """A provider built from the sidecar's configuration (the registry calls this for every
        provider, built-in or third-party); the default takes no settings."""
        return cls()

    @property
    def defers_sync(self) -> bool:
        """Whether :meth:`append_deferred` leaves durability to :meth:`sync` (a file backend);
        False where every append is durable when it returns."""
        return False

    @property
    def leaves_temporary(self) -> bool:
        """Whether an interrupted put can leave something behind that :meth:`clean_temporary`
        removes (a file backend's temporary file); False where there is nothing to clean."""
        return False

    @property
    def enforces_seal(self) -> bool:
        """Whether an append after ``seal`` (or to a ``put`` object) raises SegmentSealedError.

        Providers without a durable place for a seal mark (plain files the Java broker also
        reads) return False: there, sealing is the caller's promise alone.
        """
        return True

    @property
    def object_per_append(self) -> bool:
        """Whether every ``append`` creates one backend object (object stores: a chunk object).

        Such a backend bills per request, so callers should append seldom and in large pieces
        (the dispatcher then uses ``objectStoreGroupCommitSize``/``Timeout``). False for files.
        """
        return False

    # --- the contract -----------------------------------------------------------------------------

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """The object's size in bytes.

        Raises:
            SegmentNotFoundError: the object does not exist (also a ``FileNotFoundError``).
            InvalidKeyError: the key is unsafe.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """

    def sizes_many(self, keys: Sequence[str]) -> list[int | None]:
        """The size of each key's object, None where it does not exist, at once where the
        backend can (posix: a directory found absent answers for every key below it); by
        default one :meth:`size` after the other.

        Raises:
            InvalidKeyError: a key is unsafe.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """
        out: list[int | None] = []
        for key in keys:
            try:
                out.append(self.size(key))
            except SegmentNotFoundError:
                out.append(None)
        return out

    @abc.abstractmethod
    def read(self, key: str, position: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``position``; shorter only where the object ends.

        Raises:
            SegmentNotFoundError: the object does not exist.
            ReadPastEndError: ``position >= size`` (also an ``EOFError``); an empty object has no
                readable position.
            InvalidRangeError: ``position`` or ``length`` is negative.
            InvalidKeyError: the key is unsafe.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """

    def read_view(self, key: str, position: int, length: int) -> BytesLike:
        """:meth:`read`, where the answer may be a read-only view of memory the provider holds
        (a read-ahead window: no copy of its bytes), valid for as long as the caller holds it.
        The memory stays the provider's to reuse once every view of it is gone: hold a view
        only as long as its bytes are needed. By default :meth:`read`.

        Raises:
            As :meth:`read`.
        """
        return self.read(key, position, length)

    def readinto(self, key: str, position: int, into: memoryview) -> int:
        """Read up to ``len(into)`` bytes from ``position`` into the caller's buffer ``into`` (a
        writable byte view); returns how many, fewer only where the object ends. By default
        :meth:`read_view`, copied in once.

        Raises:
            As :meth:`read`.
        """
        data = self.read_view(key, position, len(into))
        n = len(data)
        into[:n] = data
        return n

    @abc.abstractmethod
    def append(self, key: str, data: BytesLike, position: int) -> int:
        """Write ``data`` at ``position``, which must be the object's current size.

        ``position == 0`` on an absent key creates the object (even with empty ``data``). Data is
        durable when this returns (fsync'd, or acknowledged by the object store).

        Returns:
            The new size, ``position + len(data)``.

        Raises:
            PositionMismatchError: ``position`` is not the current size; ``expected`` holds it.
            SegmentNotFoundError: the object does not exist and ``position > 0``.
            SegmentSealedError: the object was sealed or put (when ``enforces_seal``).
            InvalidRangeError: ``position`` is negative.
            InvalidKeyError: the key is unsafe.
            ProviderError: the backend failed; after a failure whose outcome is unknown, call
                ``size`` (or retry and read ``PositionMismatchError.expected``).
        """

    def append_deferred(self, key: str, data: BytesLike, position: int) -> int:
        """:meth:`append`, durable only once :meth:`sync` of the key has returned where the
        provider says ``defers_sync`` (a file backend writes the bytes and leaves the
        ``fdatasync`` to ``sync``, so that the syncs of many files are made side by side instead
        of one per append). The bytes are readable at once. By default this is :meth:`append`,
        durable when it returns."""
        return self.append(key, data, position)

    def append_deferred_many(
        self, appends: Sequence[tuple[str, BytesLike, int]]
    ) -> list[int | TieredStoreError | OSError]:
        """:meth:`append_deferred` of every ``(key, data, position)``, in order, at once where
        the backend can (posix: no kept descriptors, one request count per write). Returns, for
        each append, the new size, or the error it raised: an append that fails leaves the
        others done, as separate calls would. By default one call after the other."""
        out: list[int | TieredStoreError | OSError] = []
        for key, data, position in appends:
            try:
                out.append(self.append_deferred(key, data, position))
            except (TieredStoreError, OSError) as e:
                out.append(e)
        return out

    def sync(self, key: str) -> None:
        """Make the bytes of the key's earlier :meth:`append_deferred` calls durable (a no-op
        where every append is durable when it returns).

        Raises:
            SegmentNotFoundError: the object does not exist.
            ProviderError: the backend failed; the bytes are written but not known durable.
        """

    def sync_many(self, keys: Sequence[str]) -> None:
        """:meth:`sync` every key, at once where the backend can (posix: one ``syncfs`` of the
        tier's file system for many keys); by default one key after the other.

        Raises:
            SegmentNotFoundError: an object does not exist.
            ProviderError: the backend failed for some key (which is not said: sync them one by
                one to learn it); none is known durable.
        """
        for key in keys:
            self.sync(key)

    def expect_unsealed(self, key: str, size: int) -> None:
        """A reader's hint: the records say ``key`` is a segment not yet sealed, of ``size``
        bytes, so a provider that keeps such a segment in another shape than a sealed one (S3:
        chunk objects) may read it that way without looking for the sealed object first or
        listing it. Nothing is promised (a seal may have run since); providers that store both
        alike ignore it."""

    @abc.abstractmethod
    def seal(self, key: str) -> None:
        """Declare that the object will not grow again; the provider may consolidate it.

        Idempotent, and resumable: a seal interrupted at any step leaves the object readable
        with its full content, and calling ``seal`` again completes it.

        Raises:
            SegmentNotFoundError: the object does not exist.
            InvalidKeyError: the key is unsafe.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """

    @abc.abstractmethod
    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        """Write a whole object at once; it replaces any earlier object only with ``overwrite``.

        The object appears whole or not at all. A file object is read to its end in bounded
        memory.

        Raises:
            SegmentExistsError: the object exists (sealed or not) and ``overwrite`` is false.
            InvalidKeyError: the key is unsafe.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; an absent object is not an error (idempotent).

        Raises:
            InvalidKeyError: the key is unsafe.
            ProviderError: the backend failed; retrying is always safe.
        """

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Every existing key that starts with ``prefix``, sorted, each once.

        ``prefix`` is a plain string prefix (``"a/b/"`` for a directory, ``""`` for all);
        sealed, unsealed and put objects are all listed, internal objects never.

        Raises:
            InvalidKeyError: the prefix holds an unsafe component.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """

    # --- conveniences built on the contract -------------------------------------------------------

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """``(key, size)`` of every key :meth:`list` gives, sorted, each size as :meth:`size`
        says it: from the listing itself where the backend's listing carries sizes (one request
        per page of objects, not one per object: the scrubber walks a whole tier this way). The
        default asks :meth:`size` of each key; a key deleted meanwhile is left out.

        Raises:
            InvalidKeyError: the prefix holds an unsafe component.
            ProviderError: the backend failed; ``retriable`` says whether to try again.
        """
        found: list[tuple[str, int]] = []
        for key in self.list(prefix):
            try:
                found.append((key, self.size(key)))
            except SegmentNotFoundError:
                continue
        return iter(found)

    def exists(self, key: str) -> bool:
        """Whether the object exists (a ``size`` call)."""
        try:
            self.size(key)
        except SegmentNotFoundError:
            return False
        return True

    def clean_temporary(self, prefix: str = "", prune: Callable[[str], bool] | None = None) -> int:
        """Remove what interrupted puts (a ``kill -9`` mid-write) left under ``prefix``: call it
        at start, when no other process can be putting there (this provider's own puts in
        progress are left alone, so it may run beside them); returns how many were removed.
        ``prune(directory prefix)`` (``"a/b/"``) True: nothing below it is put, so it is not
        looked into (a file backend walks directories). The default does
        nothing: the provider's puts leave nothing behind, or it removes a key's leftovers at
        the key's next put (incomplete S3 multipart uploads are the bucket lifecycle rule's).

        Raises:
            InvalidKeyError: ``prefix`` is not a safe listing prefix.
            ProviderError: the backend failed.
        """
        return 0

    def close(self) -> None:
        """Release clients and handles; the provider reconnects lazily if used again."""

    # --- request accounting -----------------------------------------------------------------------

    def add_request_listener(self, listener: RequestListener) -> None:
        """Call ``listener(operation)`` before every backend request (not pickled).

        Each request (an HTTP request, a system call group, a dict access) is reported as an
        operation name (``GET``, ``PUT``, ``LIST``, ``DELETE``, ``COPY``, ``HEAD``, ``MPU_PART``,
        ...), *before* it is sent, once per attempt. The metrics wrapper turns them into
        ``rocketmq_tiered_store_provider_requests_total``; the conformance suite uses the hook to
        stop a provider between any two requests, as a crash would."""
        with self._listeners_lock:
            self._listeners = (*self._listeners, listener)

    def remove_request_listener(self, listener: RequestListener) -> None:
        """Stop calling ``listener``; unknown listeners are ignored."""
        with self._listeners_lock:
            self._listeners = tuple(x for x in self._listeners if x != listener)

    def _request(self, operation: str) -> None:
        """Report one backend request about to be sent (implementations call this)."""
        for listener in self._listeners:
            listener(operation)

    def _request_many(self, operation: str, n: int) -> None:
        """Report ``n`` requests of ``operation`` that a bulk call made (a wide round's
        thousands of appends by one call of the kernel): a listener with a ``many(operation,
        n)`` method is told once, any other ``n`` times."""
        for listener in self._listeners:
            many = getattr(listener, "many", None)
            if many is not None:
                many(operation, n)
            else:
                for _ in range(n):
                    listener(operation)

    def _retried(self, reason: str) -> None:
        """Report that a request failed retriably and is about to be sent again: listeners get
        ``RETRY_{REASON}`` (``RETRY_THROTTLED``, ``RETRY_UNAVAILABLE``, ``RETRY_TIMEOUT``), which
        is not a request (the resend reports its own)."""
        self._request(f"{RETRY_PREFIX}{reason.upper()}")

    # --- pickling ---------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_listeners"] = ()
        state.pop("_listeners_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._listeners_lock = threading.Lock()


def check_range(position: int, length: int | None = None, *, key: str | None = None) -> None:
    """Raise :class:`InvalidRangeError` (naming ``key``) for a negative position or length."""
    if position < 0:
        raise InvalidRangeError(f"position {position!r} is negative; positions start at 0", key=key)
    if length is not None and length < 0:
        raise InvalidRangeError(f"length {length!r} is negative; ask for 0 or more bytes", key=key)


def iter_payload(data: Payload, piece_bytes: int) -> Iterator[BytesLike]:
    """``data`` in pieces of at most ``piece_bytes`` (views of a buffer; reads of a file).

    At least one piece is yielded, empty only for empty data; no other piece is empty. A file is
    read one piece ahead (two pieces in memory at most).
    """
    if isinstance(data, bytes | bytearray | memoryview):
        view = as_bytes_view(data)
        for start in range(0, max(len(view), 1), piece_bytes):
            yield view[start : start + piece_bytes]
        return
    piece = _read_full(data, piece_bytes)
    while len(piece) == piece_bytes:
        following = _read_full(data, piece_bytes)
        if not following:
            break
        yield piece
        piece = following
    yield piece


def _read_full(stream: BinaryIO, size: int) -> bytes:
    """``size`` bytes from ``stream``, fewer only at its end (raw streams may return short)."""
    first = stream.read(size)
    if len(first) == size or not first:
        return first
    parts = [first]
    got = len(first)
    while got < size:
        more = stream.read(size - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_payload(data: Payload) -> bytes:
    """All of ``data`` as bytes (for small objects and in-memory backends)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(as_bytes_view(data))
    return data.read()


def as_bytes_view(data: BytesLike) -> memoryview:
    """A flat byte view of ``data`` without copying."""
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
