"""The server side of TLS on both ports: one context from ``tieredTls*``, modern settings only.

TLS 1.2 and 1.3 only; for 1.2 only forward-secret AEAD suites (ECDHE with AES-GCM or
ChaCha20-Poly1305); no compression, no renegotiation. With ``tieredTlsClientCaFile`` a client
must present a certificate that CA signed (mutual TLS). A port in ``permissive`` mode tells a TLS
client from a plain one by the first byte it sends: a TLS record starts with the handshake
content type :data:`HANDSHAKE` (0x16), which no RocketMQ frame (a length well under 16 MiB, so a
first byte 0x00) and no HTTP method starts with -- as RocketMQ's own server tells them apart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiered.config import TLS_MODES
from tiered.errors import ConfigError

HANDSHAKE = 0x16
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!SHA1"
DISABLED, PERMISSIVE, ENFORCING = TLS_MODES
READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class ServerTls:
    """A server context and when its certificate expires."""

    context: ssl.SSLContext
    not_after: dt.datetime
    subject: str

    @classmethod
    def load(cls, cert_file: Path, key_file: Path, client_ca_file: Path | None) -> ServerTls:
        """The context of ``cert_file`` and ``key_file`` (PEM), verifying clients against
        ``client_ca_file`` when given.

        Raises:
            ConfigError: a file cannot be read, is not PEM, or the key does not match (named).
        """
        from cryptography import x509  # only with TLS on: its import costs every start

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(CIPHERS)
        context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        try:
            pem = cert_file.read_bytes()
            certificate = x509.load_pem_x509_certificate(pem)
        except OSError as e:
            raise ConfigError(
                f"tieredTlsCertFile={str(cert_file)!r} cannot be read ({e.strerror or e})"
            ) from e
        except ValueError as e:
            raise ConfigError(
                f"tieredTlsCertFile={str(cert_file)!r} is not a PEM certificate ({e}): give the "
                "server certificate, then its chain, each -----BEGIN CERTIFICATE-----"
            ) from e
        try:
            context.load_cert_chain(cert_file, key_file)
        except OSError as e:  # ssl.SSLError is an OSError
            raise ConfigError(
                f"tieredTlsKeyFile={str(key_file)!r} cannot be used with tieredTlsCertFile="
                f"{str(cert_file)!r} ({getattr(e, 'reason', None) or e.strerror or e}): give the "
                "certificate's own unencrypted PEM private key"
            ) from e
        if client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=str(client_ca_file))
            except OSError as e:
                raise ConfigError(
                    f"tieredTlsClientCaFile={str(client_ca_file)!r} cannot be used "
                    f"({getattr(e, 'reason', None) or e.strerror or e}): give PEM CA certificates"
                ) from e
            context.verify_mode = ssl.CERT_REQUIRED
        return cls(context, certificate.not_valid_after_utc, certificate.subject.rfc4514_string())


class TlsStream:
    """A server-side TLS connection over a plain blocking socket, safe for one reader thread
    and writers on other threads at once.

    OpenSSL forbids using one connection object from two threads at the same time, and a
    replay connection's thread waits in ``recv`` while held pulls are answered from others. So
    the TLS state is an :class:`ssl.SSLObject` over memory buffers, touched only under
    :attr:`lock`, and the socket is read by the one reader outside it. Records leave in the
    order they were made: whoever takes them out of the outgoing buffer (a writer, or the
    reader after TLS produced a reply to something it read) writes them to the socket under
    ``write_lock`` (the connection's), taken before :attr:`lock`.
    """

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, write_lock: threading.Lock
    ) -> None:
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=True)
        self.lock = threading.Lock()
        self.write_lock = write_lock

    def handshake(self) -> None:
        """Complete the server side of the handshake (the socket's timeout bounds each read).

        Raises:
            ssl.SSLError: the handshake failed (e.g. no or an untrusted client certificate).
            OSError: the socket failed or timed out; ConnectionError: the client left.
        """
        while True:
            try:
                with self.lock:
                    self._tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                data = self.sock.recv(READ_CHUNK)
                if not data:
                    raise ConnectionError(
                        "the client closed the connection during the TLS handshake"
                    ) from None
                with self.lock:
                    self._in.write(data)
            except ssl.SSLError:
                with contextlib.suppress(OSError):
                    self._flush()  # the alert: tell the client why, as a server does
                raise

    def _flush(self) -> None:
        with self.write_lock:
            with self.lock:
                pending = self._out.read()
            if pending:
                self.sock.sendall(pending)

    def recv(self, size: int) -> bytes:
        """Up to ``size`` decrypted bytes; ``b""`` once the client closed (or sent
        close_notify). Raises what the socket's ``recv`` raises (``TimeoutError``, ...)."""
        while True:
            with self.lock:
                try:
                    data = self._tls.read(size)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:
                    return b""
                replies = self._out.pending
            if replies:  # e.g. a key update answered
                self._flush()
            if data is not None:
                return data
            raw = self.sock.recv(READ_CHUNK)
            if not raw:
                return b""
            with self.lock:
                self._in.write(raw)

    def send(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Encrypt ``parts`` and write them; the caller holds ``write_lock``."""
        with self.lock:
            for part in parts:
                if len(part):
                    self._tls.write(part)
            records = self._out.read()
        self.sock.sendall(records)
