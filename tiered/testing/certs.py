"""Certificates for tests: a CA, a server certificate for 127.0.0.1/localhost, client
certificates (one the CA signed, one it did not), written as PEM files -- keys in PKCS#8, which
both Python's ``ssl`` and the Java client's netty read."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.oid import NameOID

Key = ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, cert: x509.Certificate, key: Key) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def _issue(
    subject: str,
    key: Key,
    issuer: tuple[x509.Name, Key] | None,
    *,
    days: float,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    elif not ca:
        usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass(frozen=True)
class Pki:
    """The files of :func:`make_pki`."""

    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    """A client certificate no CA of the test signed."""
    stranger_key: Path
    server_not_after: dt.datetime

    def client_context(
        self, *, certificate: bool = False, stranger: bool = False
    ) -> ssl.SSLContext:
        """A client context trusting the test CA, presenting the client (or the stranger's)
        certificate when asked."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if certificate:
            context.load_cert_chain(self.client_cert, self.client_key)
        if stranger:
            context.load_cert_chain(self.stranger_cert, self.stranger_key)
        return context

    def reissue_server(self, *, days: float) -> dt.datetime:
        """Write a new server certificate and key (valid ``days``, signed by the same CA) over
        the old files, as a certificate rotation does; its expiry."""
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca = x509.load_pem_x509_certificate(self.ca.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue("localhost", key, (ca.subject, ca_key), days=days, server=True)
        _write(self.server_cert.parent, "server", cert, key)
        return cert.not_valid_after_utc


def make_pki(directory: Path, *, server_days: float = 90.0) -> Pki:
    """A CA, a server certificate valid ``server_days`` and two client certificates."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("rocketmq-tiered test CA", ca_key, None, days=365, ca=True)
    _, ca_key_path = _write(directory, "ca", ca, ca_key)
    signer = (ca.subject, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue("localhost", server_key, signer, days=server_days, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue("reader", client_key, signer, days=30)
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _issue("stranger", stranger_key, None, days=30)
    server_files = _write(directory, "server", server, server_key)
    client_files = _write(directory, "client", client, client_key)
    stranger_files = _write(directory, "stranger", stranger, stranger_key)
    return Pki(
        directory / "ca.crt",
        ca_key_path,
        *server_files,
        *client_files,
        *stranger_files,
        server.not_valid_after_utc,
    )
