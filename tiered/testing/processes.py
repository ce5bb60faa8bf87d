"""Waiting on a sidecar process started by a test (kill -9 tests start and kill many)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

RUNNING = b"rmq-tiered running"
"""The line ``rmq-tiered run`` logs once it serves."""


def wait_running(log: Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Return once ``log`` shows :data:`RUNNING`; fail with the log's tail if the process exits
    first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while RUNNING not in log.read_bytes():
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        assert time.monotonic() < deadline, f"run did not start within {timeout} s"
        time.sleep(0.02)
