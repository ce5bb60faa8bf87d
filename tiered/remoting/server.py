"""The endpoint's TCP server: a thread per connection that reads, answers and writes in place.

A connection's requests are answered in order by its own thread, with no hand-off between threads
on the hot path. A pull that finds nothing new and carries the suspend flag is held by the holder
thread (long polling) and re-run on a small pool once its queue moved or its time is up. Bad input
closes only the connection it came on, answered one error, logged and counted
(``remoting_rejected_total{reason}``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tiered import metrics
from tiered.access.guard import TLS_REQUIRED
from tiered.access.security import Security
from tiered.access.tls import DISABLED
from tiered.access.tls import ENFORCING
from tiered.access.tls import HANDSHAKE
from tiered.access.tls import TlsStream
from tiered.errors import ProtocolError
from tiered.process.listen import bind
from tiered.process.listen import kernel_timeouts

from .codes import RESPONSE_FLAG
from .codes import ResponseCode
from .codes import code_name
from .codes import result_name
from .frame import Command
from .frame import FrameReader
from .frame import decode
from .frame import encode_parts
from .handlers import Replay
from .handlers import Response
from .handlers import Suspend
from .prepared import PreparedBudget
from .prepared import PreparedPulls

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 120.0  # the broker's serverChannelMaxIdleTimeSeconds
FRAME_STALL_S = 30.0
POLL_INTERVAL_S = 0.2
FLUSH_INTERVAL_S = 1.0
STOP_TIMEOUT_S = 10.0
READ_CHUNK = 1 << 16
HELD_WORKERS = 4
IOV_MAX = 1024  # buffers one sendmsg takes (Linux UIO_MAXIOV)
HANDSHAKE_TIMEOUT_S = 10.0
TLS_HANDSHAKE_FAILED = "tls_handshake"
PORT = "remoting"


def send_all(sock: socket.socket, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
    """``sendall`` of ``buffers`` one after the other with ``sendmsg``: one system call for a
    frame that fits the socket buffer, no joined copy (partial sends resume where they
    stopped; at most ``IOV_MAX`` buffers a call)."""
    parts = [memoryview(b).cast("B") for b in buffers if len(b)]
    while parts:
        sent = sock.sendmsg(parts[:IOV_MAX])
        while parts and sent >= len(parts[0]):
            sent -= len(parts[0])
            parts.pop(0)
        if parts and sent:
            parts[0] = parts[0][sent:]


def _address(peer: object) -> str:
    """``ip:port`` (``[ip]:port`` for IPv6) of an accepted socket's peer."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peer)


class _Connection:
    """One client connection: its socket, its write lock, its reader thread. Responses are
    written under the lock, matched by ``opaque`` (held pulls may be answered after later
    requests)."""

    def __init__(self, server: RemotingServer, sock: socket.socket, peer: object) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.peer_address = _address(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.write_lock = threading.Lock()
        self.prepared = PreparedPulls(server.prepared_budget)
        self.tls: TlsStream | None = None
        self.closed = False
        self.thread = threading.Thread(target=self.run, name=f"tiered-remoting {peer}", daemon=True)

    def send(self, command: Command) -> None:
        """Write one frame (head and body in one vectored send, the body not copied); a
        connection the client closed meanwhile is ignored."""
        parts = encode_parts(command)
        with self.write_lock, contextlib.suppress(OSError):
            if self.tls is None:
                send_all(self.sock, parts)
            else:
                self.tls.send(parts)

    def answer(self, request: Command, response: Command) -> None:
        result = "ONEWAY" if request.is_oneway else result_name(response.code)
        metrics.child(metrics.REMOTING_REQUESTS, code_name(request.code), result).inc()
        if not request.is_oneway:
            self.send(response)

    def push(self, command: Command) -> None:
        """Send a one-way request of the endpoint's own (on the held-pull pool: the caller never
        waits on this client's socket)."""
        if not self.closed:
            self.server.submit(self._push, command)

    def _push(self, command: Command) -> None:
        if not self.closed:
            self.send(command)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def _start_tls(self) -> bool:
        """Peek at the first byte, as RocketMQ's server does: a TLS handshake (0x16) is answered
        through TLS with the certificate current at that moment; a plain frame is served when the
        port is permissive, and when it is enforcing its first request is answered
        ``NO_PERMISSION`` naming the client option. Whether to go on serving the connection.

        The reader and the threads answering held pulls never use the :class:`TlsStream` at the
        same time (OpenSSL does not allow it)."""
        server = self.server
        mode = server.tls_mode
        self.sock.settimeout(server.idle_timeout_s)
        first = self.sock.recv(1, socket.MSG_PEEK)
        if not first:
            return False
        if first[0] == HANDSHAKE:
            assert server.security is not None and server.security.tls is not None
            context = server.security.tls.value.context
            self.sock.settimeout(HANDSHAKE_TIMEOUT_S)
            stream = TlsStream(self.sock, context, self.write_lock)
            try:
                stream.handshake()
                self.tls = stream
            except OSError as e:  # ssl.SSLError is an OSError
                server.security.guard.denied(
                    PORT, TLS_HANDSHAKE_FAILED, self.peer_host, f"TLS handshake failed: {e}"
                )
                return False
            return True
        if mode != ENFORCING:
            return True
        assert server.security is not None
        server.security.guard.denied(
            PORT, TLS_REQUIRED, self.peer_host, "a plain connection to a TLS-only port"
        )
        frames = FrameReader(server.max_frame_bytes)  # answer its first request, then close
        self.sock.settimeout(server.frame_stall_s)
        with contextlib.suppress(OSError, ProtocolError):
            requests: list[bytes] = []
            while not requests:
                data = self.sock.recv(READ_CHUNK)
                if not data:
                    return False
                requests = frames.feed(data)
            request = decode(requests[0])
            self.send(
                request.response(
                    ResponseCode.NO_PERMISSION,
                    "this replay endpoint accepts TLS connections only "
                    "(tieredRemotingTlsMode=enforcing): start the client with -Dtls.enable=true "
                    "(and -Dtls.client.trustCertPath=<the CA of the sidecar's certificate>)",
                )
            )
        return False

    def run(self) -> None:
        """Read and answer requests until the connection closes. Once every request it holds is
        answered, read the pull each answered queue most likely sends next (:mod:`.prepared`),
        so the next pull takes what was read while the consumer worked. A bad frame is answered
        one error (``opaque`` 0) and the connection closed; a connection stalled inside a frame
        for ``frame_stall_s`` or silent for ``idle_timeout_s`` is closed."""
        server = self.server
        frames = FrameReader(server.max_frame_bytes)
        armed = -1.0
        try:
            if server.tls_mode != DISABLED and not self._start_tls():
                return
            while not self.closed:
                timeout = server.frame_stall_s if frames.pending else server.idle_timeout_s
                if timeout != armed:  # a system call: only when it changes
                    if self.tls is None:
                        kernel_timeouts(self.sock, timeout)
                    else:
                        self.sock.settimeout(timeout)
                    armed = timeout
                try:
                    data = (
                        self.sock.recv(READ_CHUNK)
                        if self.tls is None
                        else self.tls.recv(READ_CHUNK)
                    )
                except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_RCVTIMEO ran out
                    metrics.REMOTING_REJECTED.labels("idle").inc()
                    log.info(
                        "replay connection from %s closed: %s for %.0f s",
                        self.peer,
                        "stalled inside a frame" if frames.pending else "idle",
                        timeout,
                    )
                    return
                if not data:
                    return
                try:
                    for frame in frames.feed(data):
                        request = decode(frame)
                        if not request.is_response:  # a client's answer to a push: dropped
                            request.peer = self.peer_address
                            request.prepared = self.prepared
                            request.channel = self
                            server.serve(self, request)
                    if self.prepared.pending and not frames.pending:
                        self.prepared.prepare()  # every request answered: the next pulls
                except ProtocolError as e:
                    metrics.REMOTING_REJECTED.labels(e.reason).inc()
                    log.warning("replay connection from %s closed: %s", self.peer, e)
                    self.send(Command(ResponseCode.SYSTEM_ERROR, flag=RESPONSE_FLAG, remark=str(e)))
                    return
        except OSError:
            return
        finally:
            self.closed = True  # its held pulls are dropped, never re-run
            server.forget(self)
            self.prepared.clear()
            with contextlib.suppress(OSError):
                self.sock.close()


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
        security: Security | None = None,
    ) -> None:
        self.replay = replay
        self.security = security
        self.tls_mode = DISABLED if security is None else security.remoting_tls_mode
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
        self.prepared_budget = PreparedBudget()
        """What every connection's prepared pulls hold (:mod:`.prepared`)."""
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()
        self._held: list[tuple[Suspend, _Connection]] = []
        replay.held = self.held_requests
        self._wake = threading.Event()
        self._answered = False  # a request was answered since the replay offsets were written
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None

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

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Bind and start accepting.

        Raises:
            ConfigError: the host or port cannot be bound.
        """
        self._sock = bind(
            self.host,
            self.requested_port,
            keys=("tieredRemotingHost", "tieredRemotingPort"),
            backlog=min(self.max_connections, 4096),
        )
        self.port = self._sock.getsockname()[1]
        self._stop.clear()
        self._wake.clear()
        self._pool = ThreadPoolExecutor(HELD_WORKERS, thread_name_prefix="tiered-remoting-held")
        for target, name in ((self._accept, "accept"), (self._hold_loop, "held")):
            thread = threading.Thread(target=target, name=f"tiered-remoting-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info(
            "replay endpoint (RocketMQ remoting) listening on %s:%d, advertised as %s",
            self.host,
            self.port,
            self.address,
        )

    def stop(self) -> None:
        """Stop accepting, close connections, write the replay offsets, wait (bounded)."""
        if self._sock is None:
            return
        self._stop.set()
        self._wake.set()
        if self.security is not None:
            self.security.guard.release()  # failed authentications waiting: answered now
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._lock:
            open_now = list(self._open)
        for conn in open_now:
            conn.close()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for thread in [*self._threads, *(c.thread for c in open_now)]:
            thread.join(max(deadline - time.monotonic(), 0.1))
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.replay.naming.close()
        self._flush()
        self._sock = self._pool = None
        self._threads = []

    def _flush(self) -> None:
        if self.flush is None:
            return
        try:
            self.flush()
        except OSError as e:
            log.error("writing the replay consumer offsets failed (retried): %s", e)

    def _accept(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._stop.is_set():
            try:
                client, peer = sock.accept()
            except OSError:
                return  # the listening socket was closed: stopping
            with self._lock:
                full = len(self._open) >= self.max_connections
                conn = None if full else _Connection(self, client, peer)
                if conn is not None:
                    self._open.add(conn)
            if conn is None:
                metrics.REMOTING_REJECTED.labels("too_many_connections").inc()
                log.warning(
                    "replay connection from %s refused: %d open (tieredRemotingMaxConnections)",
                    peer,
                    self.max_connections,
                )
                client.close()
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            metrics.REMOTING_CONNECTIONS.inc()
            conn.thread.start()

    def forget(self, conn: _Connection) -> None:
        """A connection ended: its clients leave their groups (the others are told)."""
        with self._lock:
            if conn in self._open:
                self._open.discard(conn)
                metrics.REMOTING_CONNECTIONS.dec()
        try:
            self.replay.channel_closed(conn, conn.peer_address)
        except Exception:  # a bug: logged, the server goes on
            log.exception("dropping the clients of connection %s failed", conn.peer_address)

    def submit(self, fn: Callable[[Command], None], command: Command) -> None:
        """Run ``fn(command)`` on the held-pull pool (dropped once the server stops)."""
        pool = self._pool
        if pool is not None and not self._stop.is_set():
            with contextlib.suppress(RuntimeError):  # the pool shut down meanwhile
                pool.submit(fn, command)

    def held_requests(self) -> list[Suspend]:
        """The pulls, pops and notifications held right now (long polling)."""
        with self._lock:
            return [suspend for suspend, _ in self._held]

    # --- requests ---------------------------------------------------------------------------------

    def serve(self, conn: _Connection, request: Command) -> None:
        """Answer ``request`` now, or hold it (a suspended pull)."""
        response = self._handle(request)
        if isinstance(response, Suspend):
            with self._lock:
                self._held.append((response, conn))
            self._wake.set()
        else:
            conn.answer(request, response)

    def _handle(self, request: Command, *, may_suspend: bool = True) -> Response:
        """The replay's response (a bug answered SYSTEM_ERROR and logged); then the holder is told
        that the replay offsets may have changed (once until it writes them)."""
        try:
            return self.replay.handle(request, may_suspend=may_suspend)
        except Exception:  # a bug: answered, logged in full, the connection goes on
            log.exception("replay request code %d failed", request.code)
            return request.response(
                ResponseCode.SYSTEM_ERROR, "internal error of the replay endpoint (logged)"
            )
        finally:
            if not self._answered:  # a commit of an offset, maybe: written within a second
                self._answered = True
                self._wake.set()

    def _resume(self, held: Suspend, conn: _Connection) -> None:
        if conn.closed:  # the client left while the pull was held: nothing to answer or run
            return
        response = self._handle(held.request, may_suspend=False)
        assert isinstance(response, Command)
        if not conn.closed:
            conn.answer(held.request, response)

    def _hold_loop(self) -> None:
        """Long polling: re-run each held pull once its queue moved (looked at every
        ``poll_interval_s``: the broker's files move without telling us) or at its deadline, so
        an idle consumer costs one request per suspend timeout and holds no thread; write the
        replay offsets at most every :data:`FLUSH_INTERVAL_S` after requests were answered.
        Asleep while there is neither, so an idle port costs no CPU: a held pull or the first
        answer after a write wakes it."""
        flushed = time.monotonic()
        timeout: float | None = None
        while True:
            self._wake.wait(timeout)
            if self._stop.is_set():
                return
            self._wake.clear()  # before looking: a set from now on is seen by the next wait
            now = time.monotonic()
            earliest = self._check_held(now)
            if self._answered and now - flushed >= FLUSH_INTERVAL_S:
                flushed = now
                self._answered = False  # cleared first: an answer from now on is written next
                self._flush()
            waits = []
            if earliest is not None:
                waits.append(min(self.poll_interval_s, max(earliest - now, 0.0)))
            if self._answered:
                waits.append(max(flushed + FLUSH_INTERVAL_S - now, 0.0))
            timeout = min(waits) if waits else None

    def _check_held(self, now: float) -> float | None:
        """Hand the held pulls that are ready to the pool; the earliest deadline of those kept."""
        with self._lock:
            held, self._held = self._held, []
        keep = []
        for item in held:
            suspend, conn = item
            if conn.closed:
                continue
            try:
                ready = now >= suspend.deadline or self.replay.has_new(suspend)
            except Exception:  # the pull itself will say what is wrong
                ready = True
            if ready and self._pool is not None:
                self._pool.submit(self._resume, suspend, conn)
            else:
                keep.append(item)
        if not keep:
            return None
        with self._lock:
            self._held[:0] = keep
        return min(suspend.deadline for suspend, _ in keep)
