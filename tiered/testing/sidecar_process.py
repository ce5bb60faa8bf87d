"""``rmq-tiered run`` (or ``serve``) as a subprocess of a test: started until its HTTP API answers
``/readyz`` and its replay port is logged, stopped with SIGTERM (which must exit 0)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from tiered.testing.http import get

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


@dataclass
class Sidecar:
    """``rmq-tiered run`` as a subprocess, with its HTTP URL and replay port."""

    conf: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    http: str = ""
    port: int = 0
    starts: int = field(default=0)
    broker_conf: Path | None = None
    """The broker's own broker.conf, read first (``--config broker.conf --config conf``)."""
    command: str = "run"
    """The command: ``run``, or ``serve`` (a read replica)."""
    args: tuple[str, ...] = ()
    """More arguments after the ``--config`` ones."""

    def start(self, timeout_s: float = 90.0) -> None:
        self.starts += 1
        log = self.log.with_suffix(f".{self.starts}.log")
        with log.open("wb") as err:
            first = ["--config", str(self.broker_conf)] if self.broker_conf else []
            self.proc = subprocess.Popen(
                [RMQ_TIERED, self.command, *first, "--config", str(self.conf), *self.args],
                stdout=err,
                stderr=err,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            text = log.read_text(errors="replace")
            http = re.search(r"HTTP API listening on (http://\S+)", text)
            remoting = re.search(
                r"replay endpoint \(RocketMQ remoting\) listening on \S+:(\d+)", text
            )
            if http and remoting and get(f"{http.group(1)}/readyz", timeout=10).status == 200:
                self.http, self.port = http.group(1), int(remoting.group(1))
                return
            assert self.proc.poll() is None, f"run exited {self.proc.returncode}:\n{text}"
            assert time.monotonic() < deadline, f"run did not become ready:\n{text}"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            assert self.proc.wait(timeout=60) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def metric(self, sample: str, **labels: str) -> float:
        """The sum of ``sample``'s series whose labels include ``labels``, from /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        reply = get(f"{self.http}/metrics", timeout=10)
        status, body = reply.status, reply.body
        assert status == 200
        return sum(
            s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
            if s.name == sample and labels.items() <= s.labels.items()
        )

    @property
    def name_server(self) -> str:
        return f"127.0.0.1:{self.port}"
