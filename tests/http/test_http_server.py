"""The HTTP port's server without uvicorn's 0.1 s tick: date headers renewed by requests, a
graceful stop driven by an event (a request in flight finishes), keep-alive connections served."""

from __future__ import annotations

import asyncio
import http.client
import threading
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime

import pytest
from fastapi import FastAPI

from tiered.http.server import HttpServer


@pytest.fixture
def slow_app() -> tuple[FastAPI, threading.Event]:
    app = FastAPI()
    started = threading.Event()

    @app.get("/fast")
    def fast() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        started.set()
        await asyncio.sleep(0.5)
        return {"ok": "slow"}

    return app, started


@pytest.fixture
def served(slow_app: tuple[FastAPI, threading.Event]) -> Iterator[HttpServer]:
    server = HttpServer(slow_app[0], "127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


def _date(response: http.client.HTTPResponse) -> float:
    return parsedate_to_datetime(response.headers["date"]).timestamp()


def test_the_date_header_is_current_on_a_kept_alive_connection(served: HttpServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        dates = []
        for _ in range(2):
            conn.request("GET", "/fast")
            r = conn.getresponse()
            assert r.status == 200 and r.read() == b'{"ok":"yes"}'
            dates.append(_date(r))
            assert abs(dates[-1] - time.time()) <= 1.5
            time.sleep(1.1)
        assert dates[1] > dates[0]  # the same connection, a later second
        assert r.headers["server"] == "uvicorn"  # uvicorn's default headers kept
    finally:
        conn.close()


def test_stop_finishes_a_request_in_flight(
    slow_app: tuple[FastAPI, threading.Event], served: HttpServer
) -> None:
    result: list[int] = []

    def call() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        conn.request("GET", "/slow")
        result.append(conn.getresponse().status)
        conn.close()

    client = threading.Thread(target=call)
    client.start()
    assert slow_app[1].wait(10)
    port = served.port
    served.stop()
    client.join(10)
    assert result == [200]
    with pytest.raises(ConnectionRefusedError):  # no longer accepting
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/fast")


def test_an_idle_server_stops_at_once(slow_app: tuple[FastAPI, threading.Event]) -> None:
    server = HttpServer(slow_app[0], "127.0.0.1", 0)
    server.start()
    time.sleep(0.3)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 1.0  # woken by the event: no poll, no stop timeout


def test_the_serving_thread_sleeps_while_idle(served: HttpServer) -> None:
    """No timer: the HTTP thread uses next to no CPU while nothing is asked."""
    thread = next(t for t in threading.enumerate() if t.name == "tiered-http")
    assert thread.native_id is not None
    clock = time.pthread_getcpuclockid(thread.ident or 0)
    before = time.clock_gettime(clock)
    time.sleep(1.0)
    used = time.clock_gettime(clock) - before
    assert used < 0.0015, f"{used * 1000:.2f} CPU-ms in 1 s idle"
