"""The ``run`` daemon: APScheduler drives the dispatcher and expiry until SIGTERM.

Jobs (each ``max_instances=1``, coalesced, so a long pass is never run twice at once):

* dispatch, every ``tieredStoreDispatchIntervalMs``, first at start: one dispatcher pass (which
  keeps running rounds while a backlog remains), on a thread of its own (``tiered-pass``) at the
  offload's priority (``tieredOffloadNice``; the other jobs run at the process's);
* expiry, every ``tieredStoreDeleteFileInterval``, first after one interval;
* scrub, every ``tieredScrubIntervalMs`` when set and the sidecar uploads (:mod:`.scrub`, without
  ``--deep``), first after one interval.

SIGTERM or SIGINT sets the stop event: the running pass stops after its current round (its
uploads finish and are recorded), the scheduler shuts down waiting for running jobs, metadata is
persisted, the data-dir lock released, and :meth:`Daemon.run` returns 0. A ``kill -9`` at any
moment loses nothing: the next start reconciles (:mod:`tiered.file.restart_reconcile`).
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any
from typing import Protocol

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from tiered.config import TieredConfig
from tiered.core.scrub import scrub_and_publish
from tiered.core.sidecar import Sidecar
from tiered.errors import TieredStoreError
from tiered.metadata import now_ms
from tiered.process import allocator
from tiered.process.logs import error_fields
from tiered.process.logs import traceback_if_debug
from tiered.process.offload_priority import with_nice
from tiered.providers import Provider

log = logging.getLogger(__name__)

OFFLOAD = "offload"
"""The scheduler's executor of the dispatch job: one thread at ``tieredOffloadNice``. The other
jobs stay on the default executor: the index's maintenance reads the tier, and a pool a read
starts (the S3 read-ahead's) would inherit the priority of the thread that started it."""


class _DropSkipped(logging.Filter):
    """Drop APScheduler's 'skipped: maximum number of running instances' warnings: a pass that
    outlasts the interval is expected during a catch-up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances" not in str(record.msg)


def _failed(what: str, error: BaseException) -> None:
    """One ERROR line for a failed job run (the object it names; traceback only at DEBUG)."""
    fields = error_fields(error)
    log.error(
        "%s failed (object %s), retried at the next run: %s",
        what,
        fields.get("objectKey", "-"),
        error,
        extra=fields,
        exc_info=traceback_if_debug(log, error),
    )


class Service(Protocol):
    """Runs beside the jobs for the daemon's lifetime (the HTTP API); ``stop`` is idempotent."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class Daemon:
    """The sidecar's long-running process (dispatcher and expiry; more jobs can be added).

    :attr:`services` start before the sidecar opens (so health checks answer during a long
    restore) and stop before it closes.
    """

    def __init__(
        self, cfg: TieredConfig, provider: Provider | None = None, *, sidecar: Sidecar | None = None
    ) -> None:
        self.cfg = cfg
        self.sidecar = sidecar if sidecar is not None else Sidecar(cfg, provider)
        self.stop = threading.Event()
        scheduler_log = logging.getLogger("tiered.scheduler")
        scheduler_log.addFilter(_DropSkipped())
        offload: dict[str, Any] = {"thread_name_prefix": "tiered-pass"}
        offload["initializer"] = with_nice(cfg.tiered_offload_nice)
        self.scheduler = BackgroundScheduler(
            timezone=dt.UTC,
            logger=scheduler_log,
            executors={"default": ThreadPoolExecutor(), OFFLOAD: ThreadPoolExecutor(1, offload)},
        )
        self.passes = 0
        self.services: list[Service] = []
        self.jobs: list[tuple[Callable[[], Any], int, str]] = []
        """More jobs (function, interval in ms, name), added once the sidecar is open."""

    def add_job(
        self,
        func: Callable[[], Any],
        interval_ms: int,
        *,
        name: str,
        now: bool = False,
        executor: str = "default",
    ) -> None:
        """Run ``func`` every ``interval_ms``, one instance at a time; first at once with
        ``now``, else after one interval; on ``executor`` (``default`` or :data:`OFFLOAD`)."""
        extra: dict[str, Any] = {"next_run_time": dt.datetime.now(dt.UTC)} if now else {}
        self.scheduler.add_job(
            func,
            "interval",
            seconds=interval_ms / 1000,
            id=name,
            name=name,
            executor=executor,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            **extra,
        )

    def _dispatch(self) -> None:
        if self.stop.is_set():
            return
        try:
            report = self.sidecar.dispatcher.run_pass(stop=self.stop, follow=True)
        except (TieredStoreError, OSError) as e:  # one line; the next pass retries
            _failed("dispatch pass", e)
            return
        except Exception:  # a bug must not kill the scheduler thread; it is logged in full
            log.exception("dispatch pass failed")
            return
        self.passes += 1
        if report.messages:
            log.info(
                "offloaded %d messages (%d bytes) of %d queues in %d rounds, %.2f s",
                report.messages,
                report.bytes,
                len(report.queues),
                report.rounds,
                report.seconds,
            )

    def _expire(self) -> None:
        if self.stop.is_set():
            return
        try:
            self.sidecar.expire(now_ms())
        except (TieredStoreError, OSError) as e:
            _failed("expiry run", e)
        except Exception:  # as above: logged, retried at the next run
            log.exception("expiry run failed")

    def _scrub(self) -> None:
        if self.stop.is_set():
            return
        try:
            scrub_and_publish(self.cfg, self.sidecar.provider)
        except (TieredStoreError, OSError) as e:
            _failed("scrub", e)
        except Exception:  # as above: logged, retried at the next run
            log.exception("scrub failed")

    def _stop_services(self) -> None:
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:  # stopping the others matters more; logged in full
                log.exception("stopping %r failed", service)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("received %s: finishing in-flight uploads", signal.Signals(signum).name)
        self.stop.set()

    def run(self, *, install_signals: bool = True) -> int:
        """Open the sidecar, run the jobs until :attr:`stop` is set, close cleanly; returns 0."""
        try:
            for service in self.services:
                service.start()
            self.sidecar.open()
        except BaseException:
            self._stop_services()
            raise
        try:
            if install_signals:
                signal.signal(signal.SIGTERM, self._on_signal)
                signal.signal(signal.SIGINT, self._on_signal)
            log.info(
                "rmq-tiered running: role %s, %d queues restored, dispatch every %d ms",
                self.sidecar.dispatcher.role,
                len(self.sidecar.flat_store),
                self.cfg.tiered_store_dispatch_interval_ms,
            )
            interval = self.cfg.tiered_store_dispatch_interval_ms
            self.add_job(self._dispatch, interval, name="dispatch", now=True, executor=OFFLOAD)
            self.add_job(self._expire, self.cfg.tiered_store_delete_file_interval_ms, name="expiry")
            if self.sidecar.index is not None:  # checkpoints, catch-up, compaction, expiry
                self.sidecar.index.schedule(self.add_job)
            self.add_job(allocator.trim, allocator.TRIM_INTERVAL_MS, name="malloc-trim")
            for func, every_ms, name in self.jobs:
                self.add_job(func, every_ms, name=name)
            if self.cfg.tiered_scrub_interval_ms and self.cfg.uploads:
                self.add_job(self._scrub, self.cfg.tiered_scrub_interval_ms, name="scrub")
            self.scheduler.start()
            while not self.stop.wait(1.0):  # the signal handler sets it; the timeout is a guard
                pass
            self.scheduler.shutdown(wait=True)
        finally:
            self._stop_services()
            self.sidecar.close()
        log.info("rmq-tiered stopped cleanly")
        return 0
