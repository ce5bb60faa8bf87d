"""The HTTP API's server: uvicorn in a background thread on a socket bound up front.

The socket is bound in :meth:`HttpServer.start` (so a port in use is a clear error at start-up,
not a log line in another thread) and handed to uvicorn; port 0 picks any free port, which
:attr:`HttpServer.port` then tells. Signals stay with the main thread (the daemon's).
"""

from __future__ import annotations

import asyncio
import logging
import threading

import uvicorn
from fastapi import FastAPI

from tiered.listen import bind
from tiered.logs import uvicorn_access_log

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class HttpServer:
    """Serve ``app`` on ``host:port`` from a daemon thread until :meth:`stop`."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.requested_port = port
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` (IPv6 hosts bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind, start serving, and return once the server accepts connections.

        Raises:
            ConfigError: the host or port cannot be bound.
            RuntimeError: the server did not come up within :data:`START_TIMEOUT_S`.
        """
        sock = bind(self.host, self.requested_port, keys=("tieredHttpHost", "tieredHttpPort"))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(  # uvicorn logs through our handler; access lines at DEBUG only
            self.app,
            log_config=None,
            log_level=None,
            access_log=uvicorn_access_log(),
            lifespan="off",
            timeout_keep_alive=5,
            http="httptools",  # C parser; h11's pure-Python one cost ~1 CPU-s per GiB served
        )
        server = uvicorn.Server(config)
        self._server = server

        def serve() -> None:
            asyncio.run(server.serve(sockets=[sock]))

        self._thread = threading.Thread(target=serve, name="tiered-http", daemon=True)
        self._thread.start()
        waited = 0.0
        while not server.started:
            if not self._thread.is_alive() or waited > START_TIMEOUT_S:
                sock.close()
                raise RuntimeError(f"the HTTP API did not start on {self.url}")
            self._thread.join(0.01)
            waited += 0.01
        log.info("HTTP API listening on %s", self.url)

    def stop(self) -> None:
        """Stop accepting, finish requests in flight, wait for the thread (bounded)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(STOP_TIMEOUT_S)
        self._server = self._thread = None
