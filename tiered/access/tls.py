"""The server side of TLS on both ports: one context from ``tieredTls*``, modern settings only.

TLS 1.2 and 1.3 only; for 1.2 only forward-secret AEAD suites (ECDHE with AES-GCM or
ChaCha20-Poly1305); no compression, no renegotiation. With ``tieredTlsClientCaFile`` a client
must present a certificate that CA signed (mutual TLS). A port in ``permissive`` mode tells a TLS
client from a plain one by the first byte it sends: a TLS record starts with the handshake
content type :data:`HANDSHAKE` (0x16), which no RocketMQ frame (a length well under 16 MiB, so a
first byte 0x00) and no HTTP method starts with -- as RocketMQ's own server tells them apart.
"""

from __future__ import annotations

import datetime as dt
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from tiered.errors import ConfigError

HANDSHAKE = 0x16
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!SHA1"
DISABLED, PERMISSIVE, ENFORCING = "disabled", "permissive", "enforcing"


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
