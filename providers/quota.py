"""Byte quotas on a provider: ``tieredUploadMaxBytesPerSecond`` and
``tieredReadMaxBytesPerSecond``, each one :class:`TokenBucket` per direction.

A provider knows bytes, not messages, so every byte the sidecar sends to or takes from the
backend passes one place: :class:`QuotaProvider` wraps the provider the whole process uses
(:func:`~tiered.providers.build_provider`), so the dispatcher's workers, the index uploads and
the metadata mirror share the upload bucket, and cold reads, read-ahead windows and prefetches
share the read bucket. Reads answered from the read-ahead cache never reach the provider and
cost nothing. No library fits: the rate limiters on PyPI keep one entry per unit of weight
(millions per request when the unit is a byte) or refuse a request larger than their burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import BinaryIO

from tiered.errors import TieredStoreError

from .base import BytesLike
from .base import Payload
from .base import Provider
from .base import as_bytes_view
from .wrappers import WrappedProvider

if TYPE_CHECKING:
    from tiered.config import TieredConfig

DIRECTIONS = ("upload", "read")
"""The ``direction`` label values of ``quota_wait_seconds_total``."""

Waited = Callable[[str, float], None]
"""Told ``(direction, seconds)`` each time a call waited for its bytes."""


class TokenBucket:
    """``rate`` bytes per second for every thread that takes from it, at most one second's worth
    at once.

    :meth:`take` reserves its bytes at once and then sleeps until the bucket has refilled enough
    to cover them; the lock is held only for the arithmetic, never for the sleep. A request
    larger than the burst *borrows*: it drives the balance below zero and waits ``n / rate``
    (a 64 MiB put under 1 MiB/s is sent after about 64 s, then whole), and the callers after it
    wait for that debt first -- so every request completes, the callers are served in the order
    they asked, and the long-run rate holds whatever the request sizes. The bucket starts empty:
    a sidecar restarted in a loop never bursts.
    """

    def __init__(
        self,
        rate: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate={rate!r} must be > 0 bytes per second")
        self.rate = float(rate)
        self.burst = float(rate)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._balance = 0.0
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._balance = min(self.burst, self._balance + (now - self._stamp) * self.rate)
        self._stamp = now

    def take(self, n: int) -> float:
        """Reserve ``n`` bytes and sleep until they are covered; the seconds slept."""
        if n <= 0:
            return 0.0
        with self._lock:
            self._refill()
            self._balance -= n
            wait = -self._balance / self.rate if self._balance < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait

    def give_back(self, n: int) -> None:
        """Return ``n`` bytes reserved but not moved (a read that found the object shorter)."""
        if n <= 0:
            return
        with self._lock:
            self._refill()
            self._balance = min(self.burst, self._balance + n)


class _Metered:
    """A file object whose bytes are taken from a bucket as they are read (a streamed put pays
    piece by piece, so a large object flows at the quota's rate instead of waiting whole)."""

    def __init__(self, inner: BinaryIO, bucket: TokenBucket, waited: Callable[[float], None]):
        self.inner = inner
        self.bucket = bucket
        self.waited = waited

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.waited(self.bucket.take(len(data)))
        return data


def _count_wait(direction: str, seconds: float) -> None:
    """Add to ``quota_wait_seconds_total{direction}``."""
    from tiered import metrics

    metrics.child(metrics.QUOTA_WAIT, direction).inc(seconds)


class QuotaProvider(WrappedProvider):
    """Holds every append and put to ``upload_bytes_per_second``, every read to
    ``read_bytes_per_second`` (0: that direction is not limited), each through one
    :class:`TokenBucket` shared by every thread that uses this provider. A call waits before it
    reaches the backend, so the provider's own latency metrics never include the wait; the
    waits are added to ``quota_wait_seconds_total{direction}``. A read reserves the bytes it
    asks for and gives back what the object did not hold. Calls that move no bytes (size,
    seal, delete, list, sync) are never held; a seal's server-side merge of chunk objects moves
    no bytes through the sidecar.
    """

    def __init__(
        self,
        inner: Provider,
        upload_bytes_per_second: int = 0,
        read_bytes_per_second: int = 0,
        *,
        waited: Waited = _count_wait,
    ) -> None:
        super().__init__(inner)
        self.upload_bytes_per_second = upload_bytes_per_second
        self.read_bytes_per_second = read_bytes_per_second
        self._waited = waited
        self._buckets()

    def _buckets(self) -> None:
        up, down = self.upload_bytes_per_second, self.read_bytes_per_second
        self.upload = TokenBucket(up) if up > 0 else None
        self.reads = TokenBucket(down) if down > 0 else None

    @classmethod
    def wrap(cls, inner: Provider, cfg: TieredConfig) -> Provider:
        """``inner`` under the configured quotas; ``inner`` itself when both are 0."""
        up, down = cfg.tiered_upload_max_bytes_per_second, cfg.tiered_read_max_bytes_per_second
        if up <= 0 and down <= 0:
            return inner
        return cls(inner, up, down)

    def _upload(self, n: int) -> None:
        if self.upload is not None:
            waited = self.upload.take(n)
            if waited:
                self._waited("upload", waited)

    def read(self, key: str, position: int, length: int) -> bytes:
        self._reserve(length)
        data = self.inner.read(key, position, length)
        self._unused(length - len(data))
        return data

    def read_view(self, key: str, position: int, length: int) -> BytesLike:
        self._reserve(length)
        data = self.inner.read_view(key, position, length)
        self._unused(length - len(data))
        return data

    def readinto(self, key: str, position: int, into: memoryview) -> int:
        self._reserve(len(into))
        n = self.inner.readinto(key, position, into)
        self._unused(len(into) - n)
        return n

    def _reserve(self, length: int) -> None:
        """Hold a read of ``length`` bytes to the read quota."""
        if self.reads is not None:
            waited = self.reads.take(length)
            if waited:
                self._waited("read", waited)

    def _unused(self, n: int) -> None:
        """Give back what a read reserved and the object did not hold."""
        if self.reads is not None:
            self.reads.give_back(n)

    def append(self, key: str, data: BytesLike, position: int) -> int:
        self._upload(as_bytes_view(data).nbytes)
        return self.inner.append(key, data, position)

    def append_deferred(self, key: str, data: BytesLike, position: int) -> int:
        self._upload(as_bytes_view(data).nbytes)
        return self.inner.append_deferred(key, data, position)

    def append_deferred_many(
        self, appends: Sequence[tuple[str, BytesLike, int]]
    ) -> list[int | TieredStoreError | OSError]:
        self._upload(sum(as_bytes_view(data).nbytes for _, data, _ in appends))
        return self.inner.append_deferred_many(appends)

    def put(self, key: str, data: Payload, overwrite: bool = False) -> None:
        bucket = self.upload
        if bucket is None:
            self.inner.put(key, data, overwrite)
        elif isinstance(data, bytes | bytearray | memoryview):
            self._upload(as_bytes_view(data).nbytes)
            self.inner.put(key, data, overwrite)
        else:

            def waited(seconds: float) -> None:
                if seconds:
                    self._waited("upload", seconds)

            self.inner.put(key, _Metered(data, bucket, waited), overwrite)  # type: ignore[arg-type]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for name in ("upload", "reads", "_waited"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._waited = _count_wait
        self._buckets()  # a copy in another process limits that process on its own
