"""Refusals of both ports: the audit line, the counter and the slowed answers to failed
authentications.

Every refused request is counted (``access_denied_total{port,reason}``) and logged as one
structured line (``event=access_denied``, ``port``, ``reason``, ``peer``, ``accessKey``,
``topic``, ``group``) -- at most :data:`LINES_PER_MINUTE` lines a minute per source address and
reason (the last one says so; the rest are only counted), so a flood cannot fill the disk. The
line names the account, never its secret or a signature. A failed authentication is answered
slowly, never with a lockout (:meth:`Guard.failed`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache

from tiered import metrics

log = logging.getLogger("tiered.access")

WINDOW_S = 60.0
LINES_PER_MINUTE = 10
MAX_ADDRESSES = 65536
MAX_KEY_CHARS = 128  # of an access key, as a key of the failure table (the client chooses it)
FAILURE_DELAY_S = 0.5  # tieredAclFailedAuthDelayMs' default
THROTTLED, TLS_REQUIRED = "throttled", "tls_required"


class _Window:
    """Failures (or log lines) of one key within one :data:`WINDOW_S`."""

    __slots__ = ("count", "next_answer", "opened")

    def __init__(self, opened: float) -> None:
        self.opened = opened
        self.count = 0
        self.next_answer = opened  # past the limit: when the next failure may be answered


@dataclass(frozen=True, slots=True)
class Penalty:
    """How a failed authentication is answered: after ``wait_s``; ``throttled`` once its
    (address, access key) went past the limit."""

    wait_s: float
    throttled: bool


class Guard:
    """The slowed answers to failed authentications and the audit of refusals, shared by both
    ports."""

    def __init__(
        self,
        max_failures_per_minute: int,
        failure_delay_s: float = FAILURE_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures_per_minute
        self.failure_delay_s = failure_delay_s
        self.clock = clock
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._failures: TTLCache[tuple[str, str], _Window] = TTLCache(
            MAX_ADDRESSES, WINDOW_S, timer=clock
        )
        self._lines: TTLCache[tuple[str, str, str], _Window] = TTLCache(
            MAX_ADDRESSES, WINDOW_S, timer=clock
        )

    def pause(self, seconds: float) -> None:
        """Wait ``seconds`` before a failure's answer (cut short by :meth:`release`)."""
        self._released.wait(seconds)

    async def pause_async(self, seconds: float) -> None:
        """:meth:`pause` for the event loop (looks at :meth:`release` every half second)."""
        deadline = time.monotonic() + seconds  # real time, whatever clock counts failures
        while not self._released.is_set() and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.5))

    def release(self) -> None:
        """Answer every waiting failure now (the ports are stopping)."""
        self._released.set()

    @property
    def spacing_s(self) -> float:
        """Past the limit, one failure of a pair is answered per this many seconds."""
        return WINDOW_S / max(self.max_failures, 1)

    def failed(self, port: str, address: str, access_key: str | None) -> Penalty:
        """Credentials for ``access_key`` from ``address`` did not match: how long to wait before
        answering, and whether the pair is past the limit.

        Kafka's ``connection.failed.authentication.delay.ms`` is the model: every failure waits
        ``failure_delay_s``, and once a pair has failed ``max_failures_per_minute`` times within
        a minute, its further failures are answered one per :meth:`spacing_s` (each waits its
        turn, at most a minute), counted as ``throttled``; one line when a pair starts being
        slowed. Both ports answer a connection's requests in order, so a guesser tests about the
        limit of secrets a minute per account, or one a minute per connection it holds open.
        Credentials are always looked at, so a correct signature is answered at once whatever
        others at the same address got wrong. At most :data:`MAX_ADDRESSES` pairs are
        remembered (the oldest are forgotten)."""
        key = (address, (access_key or "")[:MAX_KEY_CHARS])
        with self._lock:
            now = self.clock()
            window = self._failures.get(key)
            if window is None:
                window = self._failures[key] = _Window(now)
            window.count += 1
            if window.count <= self.max_failures:
                return Penalty(self.failure_delay_s, False)
            answer = max(now + self.failure_delay_s, window.next_answer)
            window.next_answer = answer + self.spacing_s
            starts = window.count == self.max_failures + 1
        if starts:
            log.warning(
                "access: accessKey %r failed to authenticate %d times within a minute from %s on "
                "the %s port: its further failures from there are answered one per %.0f s "
                "(tieredAclMaxFailuresPerMinute); its correct requests, and other accounts', are "
                "answered as usual",
                key[1],
                self.max_failures,
                address,
                port,
                self.spacing_s,
                extra={
                    "event": "access_throttled",
                    "port": port,
                    "peer": address,
                    "accessKey": key[1],
                },
            )
        return Penalty(min(answer - now, WINDOW_S), True)

    def denied(
        self,
        port: str,
        reason: str,
        address: str,
        detail: str,
        *,
        access_key: str | None = None,
        topic: str | None = None,
        group: str | None = None,
    ) -> None:
        """Count and log one refused request from ``address`` (``detail`` says why, in words
        that name no secret)."""
        metrics.child(metrics.ACCESS_DENIED, port, reason).inc()
        if reason == THROTTLED:
            return  # one line when the address started being refused (failed)
        with self._lock:
            key = (address, port, reason)
            window = self._lines.get(key)
            if window is None:
                window = self._lines[key] = _Window(self.clock())
            window.count += 1
            if window.count > LINES_PER_MINUTE:
                return
            last = window.count == LINES_PER_MINUTE
        more = (
            f" (the {LINES_PER_MINUTE}th line this minute for this address: more are only "
            "counted, in rocketmq_tiered_store_access_denied_total)"
            if last
            else ""
        )
        log.warning(
            "access denied on the %s port to %s (%s): %s%s",
            port,
            address,
            reason,
            detail,
            more,
            extra={
                "event": "access_denied",
                "port": port,
                "reason": reason,
                "peer": address,
                "accessKey": access_key,
                "topic": topic,
                "group": group,
            },
        )
