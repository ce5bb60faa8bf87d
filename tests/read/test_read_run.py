"""``rmq-tiered run`` serves the HTTP API over its live flat files; health and readiness."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiered.providers import MemoryProvider

from tiered.core.daemon import Daemon
from tiered.http.service import http_service
from tiered.http.service import liveness
from tiered.http.service import readiness
from tiered.testing.http import get
from tiered.testing.sample_tier import SidecarCase

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


def fetch(url: str) -> tuple[int, Any]:
    reply = get(url, timeout=10)
    return reply.status, reply.json()


def until(predicate: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_run_serves_the_tier_it_offloads_and_stops_cleanly(
    tmp_path: Path, read_case: SidecarCase
) -> None:
    store = read_case.store(messages=1200)
    conf = read_case.conf_file(read_case.config(store, "posix", tieredStorageLevel="FORCE"))
    log = tmp_path / "run.log"
    with log.open("w") as err:
        proc = subprocess.Popen([RMQ_TIERED, "run", "--config", conf], stderr=err, text=True)
    try:
        found: list[str] = []

        def listening() -> bool:
            found[:] = re.findall(r"HTTP API listening on (http://\S+)", log.read_text())
            return bool(found)

        until(listening)
        url = found[0]
        assert fetch(f"{url}/healthz")[0] == 200
        until(lambda: fetch(f"{url}/readyz")[0] == 200)
        offsets = f"{url}/v1/topics/GenTopic0/queues/0/offsets"
        until(lambda: (o := fetch(offsets)[1])["commit"] == o["localMax"] > 0)
        status, doc = fetch(f"{url}/v1/topics/GenTopic0/queues/0/messages?offset=0&maxCount=5")
        assert status == 200 and (doc["status"], doc["tier"]) == ("FOUND", "tiered")
        assert [m["queueOffset"] for m in doc["messages"]] == [0, 1, 2, 3, 4]
        ready = fetch(f"{url}/readyz")[1]
        assert ready["checks"] == {"metadata": "ok", "backend": "ok", "brokerStore": "ok"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "stopped cleanly" in text and "Traceback" not in text


def test_a_port_in_use_stops_run_with_one_line(read_case: SidecarCase) -> None:
    store = read_case.store(messages=10)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        conf = read_case.conf_file(read_case.config(store, "posix", tieredHttpPort=port))
        done = subprocess.run(
            [RMQ_TIERED, "run", "--config", conf],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert f"error: tieredHttpPort={port} on tieredHttpHost='127.0.0.1' cannot be bound" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_health_and_readiness_name_what_is_wrong(read_case: SidecarCase) -> None:
    store = read_case.store(messages=50)
    cfg = read_case.config(store)
    daemon = Daemon(cfg, MemoryProvider())
    assert liveness(daemon) == {"process": "ok", "scheduler": "starting"}
    early = readiness(daemon)
    assert early["metadata"].startswith("not loaded yet") and early["backend"] == "ok"
    (store / "consumequeue").rename(store / "cq-moved")
    assert readiness(daemon)["brokerStore"].startswith("not readable: No such file or directory")
    (store / "cq-moved").rename(store / "consumequeue")
    server = http_service(daemon)
    daemon.services.append(server)
    thread = threading.Thread(target=daemon.run, kwargs={"install_signals": False})
    thread.start()
    try:
        until(lambda: server.port > 0 and daemon.scheduler.running)
        status, body = fetch(f"{server.url}/readyz")
        assert (status, body["failed"]) == (200, [])
        assert fetch(f"{server.url}/healthz")[1]["checks"]["scheduler"] == "ok"
    finally:
        daemon.stop.set()
        thread.join(timeout=30)
    assert liveness(daemon)["scheduler"] == "stopping"
    with pytest.raises(urllib.error.URLError):  # the server stopped with the daemon
        urllib.request.urlopen(f"{server.url}/healthz", timeout=2)
