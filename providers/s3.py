"""The s3 provider (boto3): the posix key layout under a bucket and prefix.

Unsealed segments are chunk objects, one per append (see :mod:`.chunks` for the names and for the
state every crash leaves); ``seal`` consolidates them into the segment's single object
(:meth:`S3Provider._consolidate`). Own writes are remembered (:meth:`S3Provider._remembered`), so
the next append to a key sends one conditional PUT instead of a LIST plus a PUT. Reads are in
:mod:`.s3_reads`. Every request goes through :meth:`S3Provider._call`, which retries and
translates botocore errors through the one table of :mod:`.s3_errors`; only these modules see
botocore. Every request that writes or reads object bytes carries the encryption settings
(:mod:`.s3_encryption`: SSE-S3/SSE-KMS, or SSE-C's key).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar

from cachetools import LRUCache

from tiered.errors import ConfigError
from tiered.errors import InvalidKeyError
from tiered.errors import MissingDependencyError
from tiered.errors import PositionMismatchError
from tiered.errors import ProviderError
from tiered.errors import ProviderTimeoutError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import SegmentSealedError
from tiered.errors import ThrottledError

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import as_bytes_view
from .base import check_range
from .base import iter_payload
from .chunks import Chunk
from .chunks import Part
from .chunks import SegmentState
from .chunks import chunk_name
from .chunks import parse_name
from .chunks import plan_parts
from .chunks import state_from_listing
from .layout import RESERVED_CHAR
from .layout import check_key
from .layout import check_prefix
from .layout import is_key
from .object_store import ObjectStoreOptions
from .s3_encryption import S3Encryption
from .s3_errors import INSTALL_HINT
from .s3_errors import boto_errors
from .s3_errors import not_implemented
from .s3_errors import translate
from .s3_reads import S3Reads

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef
    from mypy_boto3_s3.type_defs import CopySourceTypeDef

    from tiered.config import TieredConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

MIB = 1 << 20
MIN_PART_BYTES = 5 * MIB
"""S3's smallest part (all but the last)."""
MAX_COPY_BYTES = 5 << 30
"""S3's largest CopyObject source and UploadPartCopy range."""
MAX_KEY_BYTES = 1024
_DELETE_BATCH = 1000
_KNOWN_KEYS = 65536
"""How many keys' states of own writes are remembered (least recently used forgotten first)."""

_SESSIONS: dict[tuple[str | None, str | None, str], Any] = {}
_SESSIONS_LOCK = threading.Lock()


def _boto() -> Any:
    """Import boto3 and botocore lazily; a missing SDK is a MissingDependencyError."""
    try:
        import boto3
        import botocore.config  # noqa: F401 - fail here, with the hint, if botocore is broken
    except ImportError as e:
        raise MissingDependencyError(f"the s3 provider needs boto3: {INSTALL_HINT}") from e
    return boto3


class S3Provider(S3Reads, Provider):
    """Segments in ``bucket`` under ``prefix``; see the module docstring."""

    name = "s3"

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint: str | None = None,
        region: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
        path_style: bool = False,
        part_size_bytes: int = 8 * MIB,
        max_attempts: int = 6,
        backoff_base_s: float = 0.05,
        backoff_max_s: float = 5.0,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        max_pool_connections: int = 32,
        read_ahead_bytes: int = 64 * MIB,
        read_ahead_max_bytes: int = 256 * MIB,
        encryption: S3Encryption | None = None,
    ) -> None:
        super().__init__()
        if not bucket:
            raise ConfigError("objectStoreBucket is empty; name the bucket the s3 provider uses")
        if bool(access_key) != bool(secret_key):
            raise ConfigError(
                "objectStoreAccessKey and objectStoreSecretKey must be set together; leave both "
                "empty to use the AWS credential chain"
            )
        if part_size_bytes < MIN_PART_BYTES:
            raise ConfigError(f"part size {part_size_bytes!r} is below S3's 5 MiB minimum")
        if max_attempts < 1:
            raise ConfigError(f"max_attempts {max_attempts!r} must be at least 1")
        prefix = prefix.strip("/")
        if prefix:
            check_key(prefix)
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint or None
        self.region = region or "us-east-1"
        self.path_style = path_style
        self.part_size_bytes = part_size_bytes
        self._access_key = access_key or None
        self._secret_key = secret_key or None
        self._max_attempts = max_attempts
        self._backoff = (backoff_base_s, backoff_max_s)
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._max_pool = max_pool_connections
        self._root = f"{prefix}/" if prefix else ""
        self._rng = random.Random()
        self._client_obj: S3Client | None = None
        self._client_lock = threading.Lock()
        self._known: LRUCache[str, SegmentState] = LRUCache(_KNOWN_KEYS)
        self._known_lock = threading.Lock()
        self._conditional = True  # False once the server refused If-None-Match
        self._encryption = encryption or S3Encryption()
        self._copy_objects = True  # False once the server refused to copy an encrypted object
        self._unconfirmed_seen = False  # a write's response did not confirm the encryption
        self._listed: LRUCache[str, SegmentState] = LRUCache(_KNOWN_KEYS)
        """States of keys read (not written) by this instance, as last listed."""
        self._unsealed: LRUCache[str, int] = LRUCache(_KNOWN_KEYS)
        """Keys a reader said are not sealed, with their recorded sizes (:meth:`expect_unsealed`):
        read chunk by chunk, not tried as a sealed object first, when nothing else is known."""
        self.read_ahead_bytes = read_ahead_bytes
        self.read_ahead_max_bytes = read_ahead_max_bytes
        self._ahead = self._new_read_ahead()

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> S3Provider:
        """``objectStoreBucket`` under ``objectStorePrefix``, reached with the ``objectStore*``
        keys (:class:`.object_store.ObjectStoreOptions`); read-ahead from
        ``objectStoreReadAheadSize``/``Memory``; encryption at rest from
        ``objectStoreServerSideEncryption``/``KmsKeyId``/``SseCustomerKeyFile`` (an SSE-C key
        file is read here: a ConfigError names it when it is unusable)."""
        reach = ObjectStoreOptions.from_config(cfg)
        return cls(
            cfg.object_store_bucket,
            prefix=cfg.object_store_prefix,
            endpoint=reach.endpoint,
            region=reach.region,
            access_key=reach.access_key,
            secret_key=reach.secret_key,
            path_style=reach.path_style,
            read_ahead_bytes=cfg.object_store_read_ahead_size_bytes,
            read_ahead_max_bytes=cfg.object_store_read_ahead_memory_bytes,
            encryption=S3Encryption.from_config(cfg),
        )

    def __repr__(self) -> str:
        return (
            f"S3Provider(bucket={self.bucket!r}, prefix={self.prefix!r}, "
            f"endpoint={self.endpoint!r}, region={self.region!r}, "
            f"encryption={self._encryption.describe()!r})"
        )

    # --- client, requests, errors -----------------------------------------------------------------

    @property
    def client(self) -> S3Client:
        """The boto3 client, created on first use (and again after pickling or ``close``)."""
        client = self._client_obj
        if client is None:
            with self._client_lock:
                if self._client_obj is None:
                    self._client_obj = self._new_client()
                client = self._client_obj
        return client

    def _new_client(self) -> S3Client:
        """A client with ``access_key``/``secret_key`` when both are given, else the standard AWS
        chain (environment, shared profile, container or instance role, IRSA web identity)."""
        boto3 = _boto()
        from botocore.config import Config

        config = Config(
            s3={"addressing_style": "path" if self.path_style else "auto"},
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=self._timeouts[0],
            read_timeout=self._timeouts[1],
            max_pool_connections=self._max_pool,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        if self._access_key is None:  # the AWS chain, resolved afresh for every client
            session = boto3.session.Session(region_name=self.region)
            client: S3Client = session.client("s3", endpoint_url=self.endpoint, config=config)
            return client
        # explicit keys: share one session (its loaded service models make clients cheap)
        with _SESSIONS_LOCK:
            ident = (self._access_key, self._secret_key, self.region)
            session = _SESSIONS.get(ident)
            if session is None:
                session = _SESSIONS[ident] = boto3.session.Session(
                    aws_access_key_id=self._access_key,
                    aws_secret_access_key=self._secret_key,
                    region_name=self.region,
                )
            shared: S3Client = session.client("s3", endpoint_url=self.endpoint, config=config)
        return shared

    def _call(self, operation: str, name: str, fn: Callable[[], T]) -> T:
        """Send one request with retries; ``name`` (a backend name) is for messages only.

        Each attempt is reported for accounting; throttling, 5xx and timeouts are retried with
        exponential backoff and full jitter (botocore's own retries are off, so each attempt is
        counted)."""
        errors = boto_errors()
        attempt = 0
        while True:
            attempt += 1
            self._request(operation)
            try:
                return fn()
            except errors as e:
                err = translate(
                    e, operation, name, self.bucket, self._key_of(name), self._encryption
                )
                if not err.retriable or attempt >= self._max_attempts:
                    raise err from e
                self._retried(
                    "throttled"
                    if isinstance(err, ThrottledError)
                    else "timeout"
                    if isinstance(err, ProviderTimeoutError)
                    else "unavailable"
                )
                base, cap = self._backoff
                delay = self._rng.uniform(0, min(cap, base * 2 ** (attempt - 1)))
                log.debug("retrying s3 %s of %r in %.3f s: %s", operation, name, delay, err)
            time.sleep(delay)

    def _key_of(self, name: str) -> str:
        """The provider key a backend name belongs to (a chunk's or temporary object's key)."""
        return name.removeprefix(self._root).partition(RESERVED_CHAR)[0]

    def _full(self, key: str) -> str:
        full = self._root + check_key(key)
        if len(full.encode()) + len(chunk_name("", 0)) > MAX_KEY_BYTES:
            raise InvalidKeyError(
                f"key {key!r} with prefix is longer than S3's 1024 bytes", key=key
            )
        return full

    # --- listing and state ------------------------------------------------------------------------

    def _names(self, raw_prefix: str) -> Iterator[tuple[str, int]]:
        """(relative name, size) of every object whose full name starts with ``raw_prefix``."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": raw_prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(
                "LIST", raw_prefix, functools.partial(self.client.list_objects_v2, **kwargs)
            )
            for obj in page.get("Contents", []):
                yield obj["Key"][len(self._root) :], obj["Size"]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _state(self, key: str) -> SegmentState:
        return state_from_listing(key, self._names(self._full(key)))

    def _listed_state(self, key: str, *, fresh: bool = False) -> SegmentState:
        """The state a reader goes by: its last listing of ``key`` (one LIST when it has none,
        or when ``fresh``). Written bytes never change, so an old listing is right for every
        byte it shows; a read beyond it lists again."""
        with self._known_lock:
            state = None if fresh else self._listed.get(key)
        if state is None:
            state = self._state(key)
            with self._known_lock:
                self._listed[key] = state
        return state

    def _remembered(self, key: str) -> SegmentState | None:
        """The state this instance's own writes left ``key`` in (its chunk run, or its sealed
        size), if it remembers one: the next append then sends one conditional PUT
        (``If-None-Match: *`` on the chunk's name) instead of a LIST plus a PUT, and reads of an
        unsealed segment go straight to its chunks. The condition keeps the check a LIST gave: a
        chunk another writer (or a lost response of ours) already put at that position makes the
        PUT fail with 412, and the provider then answers as a listing says. Any failure forgets
        the key; a pickled copy starts with nothing remembered."""
        with self._known_lock:
            return self._known.get(key)

    def _remember(self, key: str, state: SegmentState | None) -> None:
        """Remember ``state`` for ``key`` (None forgets it)."""
        with self._known_lock:
            self._listed.pop(key, None)
            if state is None:
                self._known.pop(key, None)
            else:
                self._known[key] = state

    # --- object requests --------------------------------------------------------------------------

    def _put_object(self, full: str, body: BytesLike, *, if_absent: bool = False) -> None:
        """PUT ``body`` at ``full``; ``if_absent``: only if no object has that name (412 ->
        SegmentExistsError), also when a retry finds its own first attempt's object."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": _whole(body)}
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        kwargs |= self._encryption.on_create()
        response = self._call("PUT", full, functools.partial(self.client.put_object, **kwargs))
        self._confirm("PUT", full, response)

    def _confirm(self, operation: str, full: str, response: Any) -> None:
        """Warn (once) when a write's response does not confirm the encryption asked for: a
        server that ignores the headers (Ceph RGW 16 with AES256) stores the object in clear."""
        if self._unconfirmed_seen or self._encryption.confirmed(response):
            return
        self._unconfirmed_seen = True
        log.warning(
            "the S3 server at %s did not confirm encryption at rest (%s) on %s of %r: it may "
            "store objects unencrypted; check that it implements it",
            self.endpoint or "AWS",
            self._encryption.describe(),
            operation,
            full,
            extra={"objectKey": self._key_of(full)},
        )

    def _delete_names(self, names: Iterable[str]) -> None:
        """Delete relative names; the first alone (chunk 0 must go first), the rest in batches."""
        full = [self._root + n for n in names]
        if not full:
            return
        self._call(
            "DELETE",
            full[0],
            functools.partial(self.client.delete_object, Bucket=self.bucket, Key=full[0]),
        )
        for start in range(1, len(full), _DELETE_BATCH):
            batch = [{"Key": k} for k in full[start : start + _DELETE_BATCH]]
            result = self._call(
                "DELETE",
                batch[0]["Key"],
                functools.partial(
                    self.client.delete_objects,
                    Bucket=self.bucket,
                    Delete={"Objects": batch, "Quiet": True},  # type: ignore[typeddict-item]
                ),
            )
            if result.get("Errors"):
                errors = result["Errors"]
                first = errors[0]
                raise ProviderError(
                    f"s3 DELETE of {len(errors)} objects in bucket {self.bucket!r} failed, "
                    f"first {first.get('Key')!r}: {first.get('Code')} {first.get('Message')}",
                    key=self._key_of(str(first.get("Key", ""))),
                )

    # --- the contract -----------------------------------------------------------------------------

    @property
    def object_per_append(self) -> bool:
        return True

    def size(self, key: str) -> int:
        state = self._remembered(key) or self._listed_state(key, fresh=True)
        if not state.exists:
            raise SegmentNotFoundError(f"no object {key!r} in bucket {self.bucket!r}", key=key)
        return state.size

    def append(self, key: str, data: BytesLike, position: int) -> int:
        check_range(position, key=key)
        view = as_bytes_view(data)
        known = self._remembered(key) if self._conditional else None
        if known is None and self._conditional:  # e.g. listed by ``size`` just before
            with self._known_lock:
                known = self._listed.get(key)
        if (
            known is not None
            and (known.exists or position == 0)
            and not known.sealed
            and not known.strays
            and position == known.size
        ):
            if not view and known.exists:
                return position
            name = chunk_name(key, position)
            try:
                self._put_object(self._root + name, view, if_absent=True)
            except SegmentExistsError:
                self._remember(key, None)  # another write got there first: ask the listing
            except ProviderError as e:
                self._remember(key, None)
                if not not_implemented(e):
                    raise
                self._conditional = False
                log.warning(
                    "the S3 server at %s does not support conditional PUTs (If-None-Match): "
                    "every append lists its key first from now on (%s)",
                    self.endpoint or "AWS",
                    e,
                    extra={"objectKey": key},
                )
            except BaseException:
                self._remember(key, None)
                raise
            else:
                chunk = Chunk(name, position, len(view))
                self._remember(key, SegmentState(key, run=(*known.run, chunk)))
                return position + len(view)
        self._remember(key, None)
        state = self._state(key)
        if state.sealed:
            raise SegmentSealedError(f"object {key!r} is sealed; start a new segment", key=key)
        if not state.exists and position != 0:
            raise SegmentNotFoundError(
                f"append to absent object {key!r} at {position}; create it at position 0",
                key=key,
            )
        if state.exists and position != state.size:
            raise PositionMismatchError(
                f"append to {key!r} at {position}, but it holds {state.size} bytes",
                key=key,
                expected=state.size,
                given=position,
            )
        if state.strays:  # orphans of an interrupted delete must not join the new run
            self._delete_names(c.name for c in state.strays)
        if state.exists and not view:
            return position
        name = chunk_name(key, position)
        self._put_object(self._root + name, view)
        self._remember(key, SegmentState(key, run=(*state.run, Chunk(name, position, len(view)))))
        return position + len(view)

    def seal(self, key: str) -> None:
        self._remember(key, None)
        state = self._state(key)
        if not state.exists:
            raise SegmentNotFoundError(f"no object {key!r} in bucket {self.bucket!r}", key=key)
        if not state.sealed:
            self._consolidate(key, state.run)
        self._delete_names(state.chunk_names)
        self._remember(key, SegmentState(key, sealed_size=state.size))

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        if self._ahead is not None:
            self._ahead.forget(key)
        known = self._remembered(key)
        self._remember(key, None)
        if overwrite and known is not None and known.sealed:
            # our own object, no chunks beside it (e.g. the metadata mirror): just replace it
            size = self._upload(key, data)
            self._remember(key, SegmentState(key, sealed_size=size))
            return
        state = self._state(key)
        if state.exists and not overwrite:
            raise SegmentExistsError(
                f"object {key!r} exists; pass overwrite=True to replace", key=key
            )
        size = self._upload(key, data)
        self._delete_names(state.chunk_names)
        self._remember(key, SegmentState(key, sealed_size=size))

    def delete(self, key: str) -> None:
        if self._ahead is not None:
            self._ahead.forget(key)
        self._remember(key, None)
        state = self._state(key)
        names = state.chunk_names
        if names and names[0] == chunk_name(key, 0):
            self._delete_names(names[:1])  # the segment is absent from here on
            names = names[1:]
        if state.sealed:
            self._delete_names([key])
        self._delete_names(names)

    def list(self, prefix: str = "") -> Iterator[str]:
        check_prefix(prefix)
        keys: set[str] = set()
        for name, _ in self._names(self._root + prefix):
            parsed = parse_name(name)
            if parsed is None or parsed[1] not in (None, 0):
                continue
            if parsed[0].startswith(prefix) and is_key(parsed[0]):
                keys.add(parsed[0])
        return iter(sorted(keys))

    def list_sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        check_prefix(prefix)
        names: dict[str, list[tuple[str, int]]] = {}
        for name, size in self._names(self._root + prefix):
            key = name.partition(RESERVED_CHAR)[0]
            if key.startswith(prefix) and is_key(key):
                names.setdefault(key, []).append((name, size))
        states = (state_from_listing(key, entries) for key, entries in names.items())
        return iter(sorted((s.key, s.size) for s in states if s.exists))

    # --- consolidation and uploads ----------------------------------------------------------------

    def _consolidate(self, key: str, run: tuple[Chunk, ...]) -> None:
        """Write the chunks of ``run`` as the segment's single object: one CopyObject for a
        single chunk, else a server-side multipart copy (``UploadPartCopy``) for chunks of at
        least 5 MiB and a bounded-memory re-upload of smaller ones (a single chunk too once the
        server refused to copy an encrypted object: Ceph RGW 16); the caller then deletes the
        chunks."""
        full = self._full(key)
        if len(run) == 1 and self._copy_objects:
            try:
                self._copy(full, run[0].name)
                return
            except ProviderError as e:
                if not (not_implemented(e) and self._encryption.enabled):
                    raise
                self._copy_objects = False
                log.warning(
                    "the S3 server at %s cannot copy an encrypted object (CopyObject; Ceph RGW "
                    "16 cannot): seals of a one-chunk segment copy it as a multipart part or "
                    "upload it again from now on (%s)",
                    self.endpoint or "AWS",
                    e,
                    extra={"objectKey": key},
                )
        parts = plan_parts(
            run,
            min_part_bytes=MIN_PART_BYTES,
            part_bytes=self.part_size_bytes,
            max_copy_bytes=MAX_COPY_BYTES,
        )
        if not parts:  # an empty segment, not copied (see above)
            self._put_object(full, b"")
            return
        if len(parts) == 1 and not parts[0].copy:
            self._put_object(full, self._download(parts[0]))
            return
        self._multipart(full, iter(parts), key)

    def _copy(self, full: str, name: str) -> None:
        """CopyObject of the relative ``name`` to ``full`` (encrypted as configured: a copy does
        not keep its source's encryption)."""
        enc = self._encryption
        copy = functools.partial(
            self.client.copy_object,
            Bucket=self.bucket,
            Key=full,
            CopySource={"Bucket": self.bucket, "Key": self._root + name},
            **enc.on_create(),
            **enc.on_copy_source(),
        )
        self._confirm("COPY", full, self._call("COPY", full, copy))

    def _download(self, part: Part) -> bytes:
        return b"".join(self._get(p.name, p.start, p.end) for p in part.pieces)

    def _upload(self, key: str, data: Payload) -> int:
        """PUT ``data`` as the object ``key`` (multipart when large, one part in memory at a time);
        returns its size."""
        full = self._full(key)
        size = 0

        def counted() -> Iterator[BytesLike]:
            nonlocal size
            for piece in iter_payload(data, self.part_size_bytes):
                size += len(piece)
                yield piece

        pieces = counted()
        first = next(pieces)
        second = next(pieces, None)
        if second is None:
            self._put_object(full, first)
            return size
        self._multipart(full, _chain(first, second, pieces), key)
        return size

    def _multipart(self, full: str, parts: Iterator[Part | BytesLike], key: str) -> None:
        """One multipart upload of ``parts`` (planned copies/downloads, or payload pieces)."""
        client = self.client
        create = functools.partial(
            client.create_multipart_upload,
            Bucket=self.bucket,
            Key=full,
            **self._encryption.on_create(),
        )
        created = self._call("MPU_CREATE", full, create)
        self._confirm("MPU_CREATE", full, created)
        upload_id = created["UploadId"]
        try:
            done: list[CompletedPartTypeDef] = []
            total = 0
            for number, part in enumerate(parts, start=1):
                etag, size = self._send_part(full, upload_id, number, part)
                done.append({"PartNumber": number, "ETag": etag})
                total += size
            self._complete(full, upload_id, done, key, total)
        except Exception:
            abort = functools.partial(
                client.abort_multipart_upload, Bucket=self.bucket, Key=full, UploadId=upload_id
            )
            try:
                self._call("MPU_ABORT", full, abort)
            except ProviderError as abort_error:
                log.warning("could not abort upload %s of %r: %s", upload_id, full, abort_error)
            raise

    def _send_part(
        self, full: str, upload_id: str, number: int, part: Part | BytesLike
    ) -> tuple[str, int]:
        """Upload or copy one part; returns its ETag and size."""
        client = self.client
        where: dict[str, Any] = {
            "Bucket": self.bucket, "Key": full, "UploadId": upload_id, "PartNumber": number,
            **self._encryption.on_part(),
        }  # fmt: skip
        if isinstance(part, Part) and part.copy:
            piece = part.pieces[0]
            source: CopySourceTypeDef = {"Bucket": self.bucket, "Key": self._root + piece.name}
            copy = functools.partial(
                client.upload_part_copy,
                **where,
                CopySource=source,
                CopySourceRange=f"bytes={piece.start}-{piece.end - 1}",
                **self._encryption.on_copy_source(),
            )
            return self._call("MPU_PART_COPY", full, copy)["CopyPartResult"]["ETag"], part.size
        body = self._download(part) if isinstance(part, Part) else bytes(part)
        uploaded = self._call(
            "MPU_PART", full, functools.partial(client.upload_part, **where, Body=body)
        )
        return uploaded["ETag"], len(body)

    def _complete(
        self,
        full: str,
        upload_id: str,
        done: Sequence[CompletedPartTypeDef],
        key: str,
        total: int,
    ) -> None:
        complete = functools.partial(
            self.client.complete_multipart_upload,
            Bucket=self.bucket,
            Key=full,
            UploadId=upload_id,
            MultipartUpload={"Parts": done},
        )
        try:
            self._call("MPU_COMPLETE", full, complete)
        except ProviderError:
            # a retried complete whose first attempt landed reports NoSuchUpload: accept the
            # object if it is there whole
            state = self._state(key)
            if state.sealed and state.size == total:
                return
            raise

    # --- housekeeping -----------------------------------------------------------------------------

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (for demos and tests; production provisions)."""
        client = self.client
        try:
            self._call(
                "HEAD", self.bucket, functools.partial(client.head_bucket, Bucket=self.bucket)
            )
            return
        except SegmentNotFoundError:
            pass
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self._call("BUCKET", self.bucket, functools.partial(client.create_bucket, **kwargs))

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.close()
        with self._client_lock:
            client, self._client_obj = self._client_obj, None
        if client is not None:
            client.close()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_client_obj"] = None
        state.pop("_client_lock", None)
        state.pop("_known", None)  # another process must not trust this one's writes
        state.pop("_known_lock", None)
        state.pop("_listed", None)
        state.pop("_unsealed", None)
        state.pop("_ahead", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._client_lock = threading.Lock()
        self._known = LRUCache(_KNOWN_KEYS)
        self._known_lock = threading.Lock()
        self._listed = LRUCache(_KNOWN_KEYS)
        self._unsealed = LRUCache(_KNOWN_KEYS)
        self._ahead = self._new_read_ahead()


def _whole(body: BytesLike) -> bytes | bytearray:
    """``body`` as botocore takes it, without a copy when it is (a view of) a whole buffer."""
    if isinstance(body, bytes | bytearray):
        return body
    base = body.obj
    if isinstance(base, bytes | bytearray) and body.nbytes == len(base) and body.c_contiguous:
        return base
    return bytes(body)


def _chain(first: BytesLike, second: BytesLike, rest: Iterator[BytesLike]) -> Iterator[BytesLike]:
    yield first
    yield second
    yield from rest
