"""Refusals of both ports: the audit line, the counter and the limit on failed authentications.

Every refused request is counted (``access_denied_total{port,reason}``) and logged as one
structured line (``event=access_denied``, ``port``, ``reason``, ``peer``, ``accessKey``,
``topic``, ``group``) -- at most :data:`LINES_PER_MINUTE` lines a minute per source address and
reason (the last one says so; the rest are only counted), so a flood cannot fill the disk. The line
names the account, never its secret or a signature.

A source address whose credentials fail ``tieredAclMaxFailuresPerMinute`` times within a minute
is refused without looking at its credentials (HTTP 429, replay NO_PERMISSION) until that minute
is over: the ports cannot be used to guess secrets. One line when an address starts being
refused. The memory this takes is bounded (:data:`MAX_ADDRESSES` addresses; past it the oldest
are forgotten).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from tiered import metrics

log = logging.getLogger("tiered.access")

WINDOW_S = 60.0
LINES_PER_MINUTE = 10
MAX_ADDRESSES = 65536
THROTTLED, TLS_REQUIRED = "throttled", "tls_required"


class _Window:
    """Failures (or log lines) of one address within one :data:`WINDOW_S`."""

    __slots__ = ("count", "opened")

    def __init__(self, opened: float) -> None:
        self.opened = opened
        self.count = 0


class Guard:
    """The failure limit and the audit of refusals, shared by both ports."""

    def __init__(
        self, max_failures_per_minute: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_failures = max_failures_per_minute
        self.clock = clock
        self._lock = threading.Lock()
        self._failures: TTLCache[str, _Window] = TTLCache(MAX_ADDRESSES, WINDOW_S, timer=clock)
        self._lines: TTLCache[tuple[str, str, str], _Window] = TTLCache(
            MAX_ADDRESSES, WINDOW_S, timer=clock
        )

    def retry_after(self, address: str) -> float:
        """Seconds ``address`` is still refused for (0: it is not)."""
        with self._lock:
            window = self._failures.get(address)
            if window is None or window.count < self.max_failures:
                return 0.0
            return max(window.opened + WINDOW_S - self.clock(), 0.0)

    def failed(self, port: str, address: str) -> None:
        """Credentials from ``address`` did not match: one more toward the limit."""
        with self._lock:
            window = self._failures.get(address)
            if window is None:
                window = self._failures[address] = _Window(self.clock())
            window.count += 1
            starts = window.count == self.max_failures
        if starts:
            log.warning(
                "access: %s failed to authenticate %d times within a minute on the %s port: "
                "refused (without looking at its credentials) for the rest of the minute "
                "(tieredAclMaxFailuresPerMinute)",
                address,
                self.max_failures,
                port,
                extra={"event": "access_throttled", "port": port, "peer": address},
            )

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
