"""The endpoint's TCP server: asyncio in a background thread, handlers in a thread pool.

One coroutine per connection cuts frames (:class:`~.frame.FrameReader`) and starts one task per
request, so a client's pulls of many queues over one connection proceed side by side and are
answered as each completes (matched by ``opaque``). Handlers run in a thread pool (store reads
block). A pull that finds nothing new and carries the suspend flag is held (long polling): every
:data:`POLL_INTERVAL_S` the queue's max offset is checked and the pull re-run as soon as it moved,
or answered PULL_NOT_FOUND at its ``suspendTimeoutMillis`` -- an idle consumer costs one request
per suspend timeout, not a spin.

Bad input never takes the endpoint down: a frame over ``tieredRemotingMaxFrameBytes``, a header
length that does not fit, a header that does not decode, an unknown serialize type -- the
connection is answered one error (``opaque`` 0, the reason as remark) and closed; a connection
stalled inside a frame for :data:`FRAME_STALL_S` or silent for :data:`IDLE_TIMEOUT_S` is closed;
past ``tieredRemotingMaxConnections`` new connections are closed at once. Each is logged once per
connection and counted (``remoting_rejected_total{reason}``); other connections go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tiered import metrics
from tiered.errors import ConfigError, ProtocolError

from .codes import RESPONSE_FLAG, ResponseCode, code_name
from .frame import Command, FrameReader, decode, encode
from .handlers import Replay, Response, Suspend

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 120.0  # the broker's serverChannelMaxIdleTimeSeconds
FRAME_STALL_S = 30.0
POLL_INTERVAL_S = 0.2
FLUSH_INTERVAL_S = 1.0
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
READ_CHUNK = 1 << 16


def _result_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


class RemotingServer:
    """Serve ``replay`` on ``host:port`` until :meth:`stop`."""

    def __init__(
        self,
        replay: Replay,
        host: str,
        port: int,
        *,
        max_frame_bytes: int = 16 << 20,
        max_connections: int = 1024,
        advertised_address: str = "",
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        frame_stall_s: float = FRAME_STALL_S,
        poll_interval_s: float = POLL_INTERVAL_S,
        flush: Callable[[], object] | None = None,
        workers: int = 8,
    ) -> None:
        self.replay = replay
        self.host = host
        self.requested_port = port
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.configured_address = advertised_address
        self.idle_timeout_s = idle_timeout_s
        self.frame_stall_s = frame_stall_s
        self.poll_interval_s = poll_interval_s
        self.flush = flush
        self.workers = workers
        self.connections = 0
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._open: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    # --- addresses --------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The ``ip:port`` routes advertise: ``tieredRemotingAdvertisedAddress``, else the listen
        address (this host's address when listening on all interfaces)."""
        if self.configured_address:
            return self.configured_address
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            try:
                host = socket.gethostbyname(socket.gethostname())
            except OSError:
                host = "127.0.0.1"
        return f"{host}:{self.port}"

    def _bind(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(
                self.host, self.requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            family, kind, proto, _, address = infos[0]
            sock = socket.socket(family, kind, proto)
        except OSError as e:
            raise ConfigError(
                f"tieredRemotingHost={self.host!r} cannot be resolved ({e}): give an address of "
                "this host, e.g. 127.0.0.1 or 0.0.0.0"
            ) from e
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(min(self.max_connections, 4096))
        except OSError as e:
            sock.close()
            raise ConfigError(
                f"tieredRemotingPort={self.requested_port} on tieredRemotingHost={self.host!r} "
                f"cannot be bound ({e.strerror or e}): choose a free port, or 0 for any"
            ) from e
        sock.setblocking(False)
        return sock

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Bind, start serving, return once connections are accepted.

        Raises:
            ConfigError: the host or port cannot be bound.
            RuntimeError: the server did not come up within :data:`START_TIMEOUT_S`.
        """
        sock = self._bind()
        self.port = sock.getsockname()[1]
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="tiered-remoting")
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main(sock)), name="tiered-remoting", daemon=True
        )
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S) or self._failure is not None:
            sock.close()
            raise RuntimeError(
                f"the replay endpoint did not start on {self.host}:{self.port}: {self._failure}"
            )
        log.info(
            "replay endpoint (RocketMQ remoting) listening on %s:%d, advertised as %s",
            self.host,
            self.port,
            self.address,
        )

    def stop(self) -> None:
        """Stop accepting, close connections, write the replay offsets, wait (bounded)."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is None or stopping is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(stopping.set)
        thread.join(STOP_TIMEOUT_S)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._flush()
        self._loop = self._stopping = self._thread = self._pool = None

    def _flush(self) -> None:
        if self.flush is None:
            return
        try:
            self.flush()
        except OSError as e:
            log.error("writing the replay consumer offsets failed (retried): %s", e)

    async def _main(self, sock: socket.socket) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            server = await asyncio.start_server(self._connection, sock=sock)
        except BaseException as e:
            self._failure = e
            self._started.set()
            raise
        self._started.set()
        flusher = asyncio.create_task(self._flush_loop())
        async with server:
            await self._stopping.wait()
            server.close()
            flusher.cancel()
            # closing a connection's transport ends its coroutine normally (cancelling the
            # stream callback's task would make asyncio log it as an error)
            for writer in list(self._open.values()):
                writer.close()
            if self._open:
                await asyncio.wait(list(self._open), timeout=STOP_TIMEOUT_S / 2)

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            await loop.run_in_executor(self._pool, self._flush)

    # --- connections ------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if self.connections >= self.max_connections:
            metrics.REMOTING_REJECTED.labels("too_many_connections").inc()
            log.warning(
                "replay connection from %s refused: %d open (tieredRemotingMaxConnections)",
                peer,
                self.connections,
            )
            writer.close()
            return
        self.connections += 1
        metrics.REMOTING_CONNECTIONS.inc()
        me = asyncio.current_task()
        if me is not None:
            self._open[me] = writer
        frames = FrameReader(self.max_frame_bytes)
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                timeout = self.frame_stall_s if frames.pending else self.idle_timeout_s
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK), timeout)
                except TimeoutError:
                    metrics.REMOTING_REJECTED.labels("idle").inc()
                    log.info(
                        "replay connection from %s closed: %s for %.0f s",
                        peer,
                        "stalled inside a frame" if frames.pending else "idle",
                        timeout,
                    )
                    break
                if not data:
                    break
                try:
                    for frame in frames.feed(data):
                        request = decode(frame)
                        if request.is_response:
                            continue  # nothing is ever asked of a client
                        task = asyncio.create_task(self._request(request, writer))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                except ProtocolError as e:
                    metrics.REMOTING_REJECTED.labels(e.reason).inc()
                    log.warning("replay connection from %s closed: %s", peer, e)
                    error = Command(ResponseCode.SYSTEM_ERROR, flag=RESPONSE_FLAG, remark=str(e))
                    with contextlib.suppress(ConnectionError):
                        writer.write(encode(error))
                        await writer.drain()
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            if me is not None:
                self._open.pop(me, None)
            self.connections -= 1
            metrics.REMOTING_CONNECTIONS.dec()
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _request(self, request: Command, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        replay = self.replay
        try:
            response: Response = await loop.run_in_executor(self._pool, replay.handle, request)
            while isinstance(response, Suspend):
                response = await self._hold(response)
        except Exception:  # a bug: answered, logged in full, the connection goes on
            log.exception("replay request code %d failed", request.code)
            response = request.response(
                ResponseCode.SYSTEM_ERROR, "internal error of the replay endpoint (logged)"
            )
        result = "ONEWAY" if request.is_oneway else _result_name(response.code)
        metrics.REMOTING_REQUESTS.labels(code_name(request.code), result).inc()
        if request.is_oneway or writer.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            writer.write(encode(response))
            await writer.drain()

    async def _hold(self, held: Suspend) -> Response:
        """Wait until the queue has something past the held offset (or the deadline), then pull
        again without suspending."""
        loop = asyncio.get_running_loop()
        while (left := held.deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(self.poll_interval_s, left))
            try:
                if await loop.run_in_executor(self._pool, self.replay.has_new, held):
                    break
            except Exception:  # the pull itself will say what is wrong
                break
        return await loop.run_in_executor(
            self._pool, lambda: self.replay.handle(held.request, may_suspend=False)
        )
