"""Fault and latency injection, for tests and drills: wrappers over any provider.

- :class:`FaultInjectingProvider` fails or delays a chosen fraction of calls, or the Nth calls,
  with a chosen error, before or after the real call (:class:`FaultPlan`);
- :class:`LatencyProvider` adds a fixed latency (plus jitter) to every call.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from typing import Literal
from typing import TypeVar

from tiered.errors import InjectedFaultError
from tiered.errors import ProviderError

from .base import Provider
from .wrappers import WrappedProvider

T = TypeVar("T")

ErrorFactory = Callable[[str], BaseException]


@dataclass(frozen=True)
class FaultPlan:
    """Which calls fail or slow down, and how.

    A call of one of ``operations`` (all when ``None``) is the Nth such call (1-based); it fails
    when N is in ``nth`` or with probability ``rate``, raising ``error(message)``, either before
    the real call (``when="before"``: nothing happened) or after it (``"after"``: the call took
    effect but the caller sees an error, like a lost response). Independently, it is delayed by
    ``delay_s`` with probability ``delay_rate``.
    """

    rate: float = 0.0
    nth: Collection[int] = ()
    operations: Collection[str] | None = None
    error: ErrorFactory = InjectedFaultError
    when: Literal["before", "after"] = "before"
    delay_s: float = 0.0
    delay_rate: float = 0.0
    seed: int | None = None


class FaultInjectingProvider(WrappedProvider):
    """Fails or delays calls of ``inner`` according to a :class:`FaultPlan`."""

    def __init__(self, inner: Provider, plan: FaultPlan | None = None) -> None:
        super().__init__(inner)
        self._fault_lock = threading.Lock()
        self.set_plan(plan or FaultPlan())

    def set_plan(self, plan: FaultPlan) -> None:
        """Switch to ``plan`` and restart the call count."""
        with self._fault_lock:
            self.plan = plan
            self.calls = 0
            self.injected = 0
            self._rng = random.Random(plan.seed)

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        plan = self.plan
        if plan.operations is not None and operation not in plan.operations:
            return call()
        with self._fault_lock:
            self.calls += 1
            number = self.calls
            fail = number in plan.nth or (plan.rate > 0 and self._rng.random() < plan.rate)
            delay = plan.delay_rate > 0 and self._rng.random() < plan.delay_rate
            self.injected += fail
        if delay:
            time.sleep(plan.delay_s)
        message = f"injected fault in {operation} #{number} of {key!r}"
        if fail and plan.when == "before":
            raise _keyed(plan.error(message), key)
        result = call()
        if fail:
            raise _keyed(plan.error(message + " (after the call took effect)"), key)
        return result

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_fault_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._fault_lock = threading.Lock()


def _keyed(error: BaseException, key: str) -> BaseException:
    """``error``, naming ``key`` when it is a ProviderError that names no object yet."""
    if isinstance(error, ProviderError) and error.key is None:
        error.key = key
    return error


class LatencyProvider(WrappedProvider):
    """Sleeps ``latency_s`` plus up to ``jitter_s`` before each call of ``operations`` (all)."""

    def __init__(
        self,
        inner: Provider,
        latency_s: float,
        *,
        jitter_s: float = 0.0,
        operations: Collection[str] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(inner)
        self.latency_s = latency_s
        self.jitter_s = jitter_s
        self.operations = operations
        self._rng = random.Random(seed)

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        if self.operations is None or operation in self.operations:
            time.sleep(
                self.latency_s + (self._rng.uniform(0, self.jitter_s) if self.jitter_s else 0)
            )
        return call()
