"""A small blocking remoting client: one connection, one request at a time.

What the tests, the benchmark and operators' scripts use to talk to the replay endpoint (or a
broker): :meth:`RemotingClient.call` sends a request with a JSON or ROCKETMQ header and returns
the response whose ``opaque`` matches; :func:`split_messages` cuts a pull or query body into the
stored messages. Optional signing with an access key and secret key (as ``AclClientRPCHook``).
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct

from tiered.access.accounts import ACCESS_KEY
from tiered.access.accounts import SIGNATURE
from tiered.access.accounts import request_content
from tiered.access.accounts import sign
from tiered.closeable import Closeable
from tiered.errors import ProtocolError
from tiered.process.listen import kernel_timeouts

from .codes import ONEWAY_FLAG
from .frame import JSON
from .frame import MIN_FRAME
from .frame import Command
from .frame import decode
from .frame import encode

_LEN = struct.Struct(">i")
MAX_FRAME_BYTES = 256 << 20
"""The largest frame a client accepts (a corrupt or hostile length word is an error, not an
allocation of up to 2 GiB)."""
KEEP_BUFFER_BYTES = 32 << 20
"""A receive buffer up to this size is kept for the next frame (a catch-up's responses are
received into the same memory: no fresh pages faulted in for each one)."""


class RemotingClient(Closeable):
    """``with RemotingClient("127.0.0.1", 10941) as c: c.call(105, topic="T")``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float = 30.0,
        serialize_type: int = JSON,
        credentials: tuple[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """Connect (through TLS with ``tls``, its ``server_hostname`` ``host``)."""
        plain = socket.create_connection((host, port), timeout=timeout_s)
        plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = plain
        self.timeout_s = timeout_s
        if tls is not None:
            try:
                self.sock = tls.wrap_socket(plain, server_hostname=host)
            except BaseException:
                plain.close()
                raise
        else:  # timed out by the kernel: no poll before every send and receive
            kernel_timeouts(plain, timeout_s)
        self.serialize_type = serialize_type
        self.credentials = credentials
        self._opaque = itertools.count(1)
        self._length = bytearray(4)
        self._buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def _timed_out(self, e: BlockingIOError) -> TimeoutError:
        return TimeoutError(f"no progress on the connection for {self.timeout_s} s ({e})")

    def _recv_into(self, view: memoryview) -> None:
        while len(view):
            try:
                n = self.sock.recv_into(view)
            except BlockingIOError as e:  # SO_RCVTIMEO ran out
                raise self._timed_out(e) from e
            if not n:
                raise ConnectionError("the server closed the connection")
            view = view[n:]

    def receive(self) -> Command:
        """The next frame the server sends (received into one buffer, kept for the next frame;
        the body is copied out of it once)."""
        self._recv_into(memoryview(self._length))
        (length,) = _LEN.unpack(self._length)
        if length < MIN_FRAME:
            raise ProtocolError(f"a frame length of {length} bytes from the server", "bad_length")
        if length > MAX_FRAME_BYTES:
            raise ProtocolError(
                f"a frame length of {length} bytes from the server is over {MAX_FRAME_BYTES}",
                "too_large",
            )
        buffer = self._buffer if len(self._buffer) >= length else bytearray(length)
        if length <= KEEP_BUFFER_BYTES:
            self._buffer = buffer
        frame = memoryview(buffer)[:length]
        self._recv_into(frame)
        return decode(frame)

    def send(self, command: Command) -> None:
        """Sign (when credentials are set) and send ``command``."""
        if self.credentials is not None:
            access_key, secret_key = self.credentials
            command.ext_fields[ACCESS_KEY] = access_key
            content = request_content(command.ext_fields, command.body)
            command.ext_fields[SIGNATURE] = sign(content, secret_key)
        try:
            self.sock.sendall(encode(command, self.serialize_type))
        except BlockingIOError as e:  # SO_SNDTIMEO ran out
            raise self._timed_out(e) from e

    def _request(
        self, code: int, body: bytes, flag: int, fields: dict[str, object], version: int = 0
    ) -> Command:
        command = Command(
            code,
            opaque=next(self._opaque),
            flag=flag,
            version=version,
            ext_fields={k: str(v) for k, v in fields.items()},
            body=body,
        )
        self.send(command)
        return command

    def oneway(self, code: int, body: bytes = b"", /, **fields: object) -> None:
        """Send request ``code`` with the oneway flag (the server answers nothing)."""
        self._request(code, body, ONEWAY_FLAG, fields)

    def call(self, code: int, body: bytes = b"", /, **fields: object) -> Command:
        """Send request ``code`` with ``fields`` as extFields; its response."""
        return self.call_as(0, code, body, fields)

    def call_as(self, version: int, code: int, body: bytes, fields: dict[str, object]) -> Command:
        """:meth:`call` as a client of ``version`` (a name server reads a registration's body by
        the client's version)."""
        command = self._request(code, body, 0, fields, version)
        while True:  # a request of the server's own (a one-way notice) is not the answer
            response = self.receive()
            if response.is_response and response.opaque == command.opaque:
                return response


def split_messages(body: bytes) -> list[bytes]:
    """The stored messages of a pull or query body, each whole (TOTALSIZE-prefixed)."""
    out, pos = [], 0
    while pos + 4 <= len(body):
        (size,) = _LEN.unpack_from(body, pos)
        if size <= 0 or pos + size > len(body):
            raise ValueError(f"a message at {pos} claims {size} bytes of {len(body) - pos}")
        out.append(body[pos : pos + size])
        pos += size
    return out
