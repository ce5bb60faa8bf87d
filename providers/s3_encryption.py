"""Encryption at rest on S3: what the s3 provider sends so the server encrypts every object.

Two ways, never both (S3 encrypts an object one way):

- **SSE-S3 / SSE-KMS** (``objectStoreServerSideEncryption`` = ``AES256`` | ``aws:kms``, with
  ``objectStoreKmsKeyId``): the server holds the key. The header goes on every request that
  makes an object (PutObject, CreateMultipartUpload, CopyObject: a copy does not keep its
  source's encryption); parts inherit their upload's, and reads need nothing.
- **SSE-C** (``objectStoreSseCustomerKeyFile``): the operator holds a 256-bit key, read once
  from the file; the server keeps only a salted HMAC of it. It goes on every request that
  writes or reads object bytes (PutObject, CreateMultipartUpload, UploadPart, UploadPartCopy,
  CopyObject, GetObject, HeadObject), and again as the copy source's key on the copies.

The key never appears in a repr, a log line or an error message; messages name the file.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from tiered.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tiered.config import TieredConfig

MODES = ("AES256", "aws:kms")
"""The values of ``objectStoreServerSideEncryption`` besides empty (none)."""
KEY_FILE = "objectStoreSseCustomerKeyFile"
KEY_BYTES = 32
_MAKE_KEY = "openssl rand -base64 32 > FILE; chmod 600 FILE"

READS = frozenset({"GET"})
"""Operations (the provider's request names) that read an object's bytes (its only HEAD is of
the bucket)."""
COPIES = frozenset({"COPY", "MPU_PART_COPY"})
"""Operations that read a source object server-side."""
WRITES = frozenset({"PUT", "COPY", "MPU_CREATE", "MPU_PART", "MPU_PART_COPY"})
"""Operations that store object bytes."""


@dataclass(frozen=True)
class S3Encryption:
    """How objects are encrypted at rest; the default encrypts nothing (the bucket's default
    encryption, if any, applies)."""

    mode: str = ""
    """``AES256`` or ``aws:kms`` (server-held keys), empty for none or SSE-C."""
    kms_key_id: str = ""
    """With ``aws:kms``: the key's id, ARN or alias; empty for the bucket's (or AWS's) default."""
    customer_key: bytes | None = field(default=None, repr=False)
    """The SSE-C key (32 bytes), None without SSE-C."""
    key_file: str = ""
    """Where the SSE-C key came from: named in messages in its place."""

    def __post_init__(self) -> None:
        problems = setting_problems(self.mode, self.kms_key_id, self.customer_key is not None)
        if self.customer_key is not None and len(self.customer_key) != KEY_BYTES:
            problems.append(f"an SSE-C key must be {KEY_BYTES} bytes (AES-256)")
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def from_settings(
        cls, mode: str = "", kms_key_id: str = "", key_file: str = ""
    ) -> S3Encryption:
        """From the three settings; an SSE-C key file is read and checked here, once.

        Raises:
            ConfigError: an unknown mode, a KMS key without ``aws:kms``, SSE-C together with
                a server-held key, or a key file that is missing, unreadable or not a
                base64 256-bit key (the message names the setting and the file, never the key).
        """
        key_file = key_file.strip()
        problems = setting_problems(mode, kms_key_id, bool(key_file))
        if problems:  # before reading a file the settings do not use
            raise ConfigError("; ".join(problems))
        key = read_key_file(key_file) if key_file else None
        return cls(mode, kms_key_id, key, key_file)

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> S3Encryption:
        """``objectStoreServerSideEncryption``, ``objectStoreKmsKeyId`` and
        ``objectStoreSseCustomerKeyFile`` (see :meth:`from_settings`)."""
        return cls.from_settings(
            cfg.object_store_server_side_encryption,
            cfg.object_store_kms_key_id,
            cfg.object_store_sse_customer_key_file,
        )

    @property
    def enabled(self) -> bool:
        """Whether any encryption is asked for."""
        return bool(self.mode) or self.customer_key is not None

    @property
    def customer(self) -> bool:
        """Whether this is SSE-C."""
        return self.customer_key is not None

    @property
    def key_md5(self) -> str:
        """The SSE-C key's base64 MD5, as S3 reports it (``SSECustomerKeyMD5``); not secret."""
        if self.customer_key is None:
            return ""
        return base64.b64encode(hashlib.md5(self.customer_key).digest()).decode()

    def describe(self) -> str:
        """What a message says about the setting: the mode, the KMS key, or the key's file."""
        if self.customer:
            return f"SSE-C with the key in {KEY_FILE}={self.key_file!r}"
        if self.mode == "aws:kms":
            return f"aws:kms with key {self.kms_key_id!r}" if self.kms_key_id else "aws:kms"
        return self.mode or "none"

    # --- request parameters (boto3 names; boto3 base64-encodes the key and adds its MD5) -----

    def on_create(self) -> dict[str, Any]:
        """For requests that make an object: PutObject, CreateMultipartUpload, and CopyObject
        (its destination)."""
        if self.customer_key is not None:
            return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": self.customer_key}
        if not self.mode:
            return {}
        if self.kms_key_id:
            return {"ServerSideEncryption": self.mode, "SSEKMSKeyId": self.kms_key_id}
        return {"ServerSideEncryption": self.mode}

    def on_part(self) -> dict[str, Any]:
        """For UploadPart and UploadPartCopy (their destination): SSE-C's key again; a
        server-held key is the upload's, set by CreateMultipartUpload."""
        return self.on_read()

    def on_read(self) -> dict[str, Any]:
        """For GetObject and HeadObject: SSE-C's key; nothing otherwise (S3 refuses the
        server-side headers on reads)."""
        if self.customer_key is None:
            return {}
        return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": self.customer_key}

    def on_copy_source(self) -> dict[str, Any]:
        """For CopyObject and UploadPartCopy: the key the source was written with (SSE-C)."""
        if self.customer_key is None:
            return {}
        return {
            "CopySourceSSECustomerAlgorithm": "AES256",
            "CopySourceSSECustomerKey": self.customer_key,
        }

    # --- the server's side --------------------------------------------------------------------

    def confirmed(self, response: Mapping[str, Any]) -> bool:
        """Whether a write's response says the object is encrypted as asked (S3 echoes the
        headers; a server that ignores them echoes nothing)."""
        if self.customer_key is not None:
            return response.get("SSECustomerAlgorithm") == "AES256"
        return not self.mode or response.get("ServerSideEncryption") == self.mode

    def refusal_hint(self, operation: str, status: int, message: str) -> tuple[bool, str] | None:
        """Why the server may have refused ``operation`` with ``status`` (400 or 403) and
        ``message`` because of the encryption, and whether that is an access denial; None when
        it cannot be that.

        With SSE-C, a read or copy refused means the object was written with another key or
        none (AWS answers 403, Ceph RGW 400 InvalidArgument); without it, a read refused with a
        400 about encryption means the object was written with SSE-C."""
        written_with_sse_c = status == 400 and "encryption" in message.lower()
        if not self.customer and operation in READS | COPIES and written_with_sse_c:
            return True, (
                f"the object was written with SSE-C: set {KEY_FILE} to the key it was written with"
            )
        if self.customer:
            if operation in READS | COPIES:
                return True, (
                    f"the object was written with another SSE-C key than {KEY_FILE}="
                    f"{self.key_file!r} holds (or without SSE-C): point {KEY_FILE} at the key "
                    "the tier was written with"
                )
            if operation in WRITES and status == 403:
                return True, (
                    "the bucket may block SSE-C (its default encryption's "
                    "BlockedEncryptionTypes; AWS blocks it on new buckets): allow SSE-C there"
                )
            if operation in WRITES:
                return False, (
                    "the server refused the SSE-C headers: S3 takes them over HTTPS only "
                    "(objectStoreEndpoint; Ceph RGW: rgw_crypt_require_ssl)"
                )
        elif self.mode == "aws:kms" and status == 403 and operation in READS | WRITES:
            return True, (
                "with objectStoreServerSideEncryption=aws:kms the credentials also need "
                "kms:GenerateDataKey and kms:Decrypt on the key"
            )
        elif self.mode and operation in WRITES and status == 400:
            return False, f"the server refused objectStoreServerSideEncryption={self.mode}"
        return None


def setting_problems(mode: str, kms_key_id: str, customer: bool) -> list[str]:
    """What is wrong with the settings together (the configuration's check and the
    provider's): an unknown mode, a KMS key without ``aws:kms``, SSE-C with a server-held key."""
    problems = []
    if mode and mode not in MODES:
        problems.append(
            f"objectStoreServerSideEncryption={mode!r} is not one of {', '.join(MODES)} (or "
            "empty for none)"
        )
    if kms_key_id and mode != "aws:kms":
        problems.append(
            f"objectStoreKmsKeyId is set but objectStoreServerSideEncryption={mode!r}: set "
            "objectStoreServerSideEncryption=aws:kms to use the key, or unset it"
        )
    if customer and mode:
        problems.append(
            f"{KEY_FILE} (SSE-C) and objectStoreServerSideEncryption={mode} are exclusive: S3 "
            "encrypts an object one way. Pick SSE-C (leave objectStoreServerSideEncryption "
            f"empty) to hold the key yourself, or {mode} (leave {KEY_FILE} empty) to let the "
            "server hold it"
        )
    return problems


def read_key_file(path: str) -> bytes:
    """The 32-byte key a file holds in base64 (surrounding whitespace ignored).

    Raises:
        ConfigError: the file is missing, unreadable, not base64 or not 32 bytes decoded; the
            message names the setting and the file, never what the file holds.
    """
    where = f"{KEY_FILE}={path!r}"
    try:
        text = Path(path).expanduser().read_bytes()
    except FileNotFoundError:
        if _decodes_to_key(path):
            raise ConfigError(
                f"{KEY_FILE} holds what looks like a key, not a file: put the key in a file "
                f"readable only by the sidecar and name the file ({_MAKE_KEY})"
            ) from None
        raise ConfigError(
            f"{where}: no such file; create it with a base64 256-bit key ({_MAKE_KEY})"
        ) from None
    except OSError as e:
        raise ConfigError(
            f"{where} cannot be read ({e.strerror or type(e).__name__}): let the sidecar's "
            "user read it"
        ) from None
    try:
        key = base64.b64decode(b"".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(
            f"{where} does not hold base64 text: write a base64 256-bit key ({_MAKE_KEY})"
        ) from None
    if len(key) != KEY_BYTES:
        raise ConfigError(
            f"{where} holds {len(key)} bytes after base64, not {KEY_BYTES}: SSE-C takes a "
            f"256-bit key ({_MAKE_KEY})"
        )
    return key


def _decodes_to_key(text: str) -> bool:
    try:
        return len(base64.b64decode(text.strip(), validate=True)) == KEY_BYTES
    except (binascii.Error, ValueError):
        return False
