"""The HTTP API's server: uvicorn in a background thread on a socket bound up front.

The socket is bound in :meth:`HttpServer.start` (so a port in use is a clear error at start-up,
not a log line in another thread) and handed to uvicorn; port 0 picks any free port, which
:attr:`HttpServer.port` then tells. Signals stay with the main thread (the daemon's). With TLS
the server accepts connections itself and sniffs each one's first byte (:meth:`_hand_off`). No
timer runs while the port is idle (:class:`_Server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from email.utils import formatdate

import uvicorn
import uvloop
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from tiered import metrics
from tiered.access.guard import TLS_REQUIRED
from tiered.access.guard import Guard
from tiered.access.tls import DISABLED
from tiered.access.tls import ENFORCING
from tiered.access.tls import HANDSHAKE
from tiered.process.listen import bind
from tiered.process.logs import uvicorn_access_log

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
FIRST_BYTE_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 10.0
TLS_HANDSHAKE_FAILED = "tls_handshake"
_PLAIN_BODY = (
    b'{"error": "this port accepts HTTPS only (tieredHttpTlsMode=enforcing): use an https:// '
    b'URL"}\n'
)
PLAIN_TO_TLS_PORT = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(_PLAIN_BODY)}\r\n\r\n".encode()
    + _PLAIN_BODY
)


class Tls:
    """What an HTTP port with TLS needs: its mode, the current context, the guard."""

    def __init__(self, mode: str, context: Callable[[], ssl.SSLContext], guard: Guard) -> None:
        self.mode = mode
        self.context = context
        self.guard = guard


class _State(ServerState):
    """uvicorn's state shared by a server's connections, whose default headers are renewed by
    the request about to send them (once per second at most), not by a timer; and the most
    connections served at once (None: no limit)."""

    def __init__(self, max_connections: int | None = None) -> None:
        super().__init__()
        self.second = -1
        self.max_connections = max_connections

    def renew(self, config: uvicorn.Config) -> None:
        """The ``date`` header (when ``config.date_header``) of the current second."""
        now = time.time()
        if int(now) != self.second:
            self.second = int(now)
            date = [(b"date", formatdate(now, usegmt=True).encode())] if config.date_header else []
            self.default_headers = date + config.encoded_headers


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the C parser: h11's pure-Python one costs far more CPU per
    byte served), renewing the date header before a request or a ``400`` uses it (one
    ``time.time()`` per request instead of a timer)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Take the connection, or close it at once when ``tieredHttpMaxConnections`` are open
        already (as the replay port does): the connections being served go on."""
        super().connection_made(transport)
        state = self.server_state
        limit = state.max_connections if isinstance(state, _State) else None
        if limit is not None and len(state.connections) > limit:
            metrics.HTTP_REJECTED.labels("too_many_connections").inc()
            log.warning(
                "HTTP connection from %s refused: %d open (tieredHttpMaxConnections)",
                self.client[0] if self.client else "?",
                limit,
            )
            transport.close()

    def _renew(self) -> None:
        state = self.server_state
        if isinstance(state, _State):
            state.renew(self.config)

    def on_message_begin(self) -> None:
        self._renew()
        super().on_message_begin()

    def send_400_response(self, msg: str) -> None:
        self._renew()
        super().send_400_response(msg)


class _Server(uvicorn.Server):
    """uvicorn's server without its 0.1 s tick (which renews the ``date`` header and looks at
    ``should_exit``, costing CPU on an idle port): :meth:`main_loop` returns when :meth:`exit` is
    called (from any thread). Shutdown is uvicorn's own; the keep-alive timeout is a timer of
    each connection's, unchanged."""

    def __init__(self, config: uvicorn.Config, max_connections: int | None = None) -> None:
        super().__init__(config)
        self.server_state = _State(max_connections)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._exit = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if not self.should_exit:  # set before the loop was known: exit() could not wake it
            await self._exit.wait()

    def exit(self, *, force: bool = False) -> None:
        """Stop serving (uvicorn's graceful shutdown); ``force``: stop waiting for requests."""
        self.should_exit = True
        if force:
            self.force_exit = True
        loop, event = self._loop, self._exit
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: already stopped
                loop.call_soon_threadsafe(event.set)


class HttpServer:
    """Serve ``app`` on ``host:port`` from a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        app: FastAPI,
        host: str,
        port: int,
        tls: Tls | None = None,
        max_connections: int | None = None,
    ) -> None:
        self.app = app
        self.max_connections = max_connections
        """Connections served at once (``tieredHttpMaxConnections``); None: no limit."""
        self.tls = None if tls is None or tls.mode == DISABLED else tls
        self.host = host
        self.requested_port = port
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http(s)://host:port`` (IPv6 hosts bracketed; https with TLS on)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'http' if self.tls is None else 'https'}://{host}:{self.port}"

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
            http=_Protocol,
        )
        server = _Server(config, self.max_connections)
        self._server = server

        def serve() -> None:
            # uvloop: a request costs less CPU than on asyncio's loop
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                if self.tls is None:
                    runner.run(server.serve(sockets=[sock]))
                else:
                    runner.run(self._serve_tls(server, config, sock))

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

    async def _serve_tls(
        self, server: uvicorn.Server, config: uvicorn.Config, sock: socket.socket
    ) -> None:
        """uvicorn with no listener of its own; connections accepted here, sniffed and handed to
        its protocol (which registers each with the server, so shutdown waits for them)."""
        sock.listen(config.backlog)
        sock.setblocking(False)
        accepting = asyncio.create_task(self._accept(server, config, sock))
        try:
            await server.serve(sockets=[])
        finally:
            accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await accepting
            sock.close()

    async def _accept(
        self, server: uvicorn.Server, config: uvicorn.Config, sock: socket.socket
    ) -> None:
        loop = asyncio.get_running_loop()
        while not server.started:
            await asyncio.sleep(0.01)
        connections: set[asyncio.Task[None]] = set()
        while True:
            try:
                client, peer = await loop.sock_accept(sock)
            except OSError as e:
                log.warning("HTTP API: accepting a connection failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(self._hand_off(server, config, client, peer))
            connections.add(task)
            task.add_done_callback(connections.discard)

    async def _hand_off(
        self, server: uvicorn.Server, config: uvicorn.Config, client: socket.socket, peer: object
    ) -> None:
        """Wait for the connection's first byte (at most :data:`FIRST_BYTE_TIMEOUT_S`) and hand
        the socket to uvicorn's protocol, through TLS with the certificate current now when it is
        a TLS handshake (0x16), plain when the port is permissive; enforcing, a plain request is
        answered one ``400`` naming the setting. A failed handshake is counted as
        ``access_denied_total{port="http",reason="tls_handshake"}``."""
        assert self.tls is not None
        loop = asyncio.get_running_loop()
        address = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        client.setblocking(False)
        readable = loop.create_future()

        def ready() -> None:  # may be called again before the reader is removed
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(client, ready)
        try:
            await asyncio.wait_for(readable, FIRST_BYTE_TIMEOUT_S)
            first = client.recv(1, socket.MSG_PEEK)
        except (TimeoutError, OSError):
            first = b""
        finally:
            loop.remove_reader(client)
        if not first:
            client.close()
            return
        if first[0] != HANDSHAKE and self.tls.mode == ENFORCING:
            self.tls.guard.denied(
                "http", TLS_REQUIRED, address, "a plain HTTP request to a TLS-only port"
            )
            with contextlib.suppress(OSError):
                await loop.sock_sendall(client, PLAIN_TO_TLS_PORT)
            client.close()
            return

        def protocol() -> asyncio.Protocol:  # what uvicorn's own listener would make
            made: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=server.server_state, app_state=server.lifespan.state
            )
            return made

        if first[0] != HANDSHAKE:
            try:
                await loop.connect_accepted_socket(protocol, client)
            except OSError:  # the client left meanwhile
                client.close()
            return
        try:
            await loop.connect_accepted_socket(
                protocol,
                client,
                ssl=self.tls.context(),
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError
            self.tls.guard.denied(
                "http", TLS_HANDSHAKE_FAILED, address, f"TLS handshake failed: {e}"
            )
            client.close()

    def stop(self) -> None:
        """Stop accepting, finish requests in flight, wait for the thread (bounded)."""
        if self._server is None or self._thread is None:
            return
        self._server.exit()
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            self._server.exit(force=True)
            self._thread.join(STOP_TIMEOUT_S)
        self._server = self._thread = None
