"""botocore's errors, translated at the boundary: the one table that maps them to the error tree.

Only the s3 provider's modules see botocore. :func:`translate` maps an S3 error code, else the HTTP
status (``ClientError``), or a botocore exception class (``BotoCoreError``, along its MRO) through
:data:`ERRORS`; throttling, 5xx and timeouts come out retriable, and the message names the
operation, the object, the bucket and, where :data:`HINTS` or the encryption setting knows one,
the fix. A read or copy the server refuses under SSE-C becomes an :class:`AccessDeniedError` that
names ``objectStoreSseCustomerKeyFile`` (:meth:`.S3Encryption.refusal_hint`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING
from typing import Any

from tiered.errors import AccessDeniedError
from tiered.errors import MissingDependencyError
from tiered.errors import ProviderError
from tiered.errors import ProviderTimeoutError
from tiered.errors import ProviderUnavailableError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import ThrottledError

if TYPE_CHECKING:
    from .s3_encryption import S3Encryption

INSTALL_HINT = "pip install 'rocketmq-tiered[s3]'"

ERRORS: dict[str, type[ProviderError]] = {
    # S3 error codes and HTTP statuses (ClientError)
    "NoSuchBucket": ProviderError,
    "NoSuchUpload": ProviderError,
    "NoSuchKey": SegmentNotFoundError,
    "NotFound": SegmentNotFoundError,
    "404": SegmentNotFoundError,
    "InvalidRange": ReadPastEndError,
    "416": ReadPastEndError,
    "PreconditionFailed": SegmentExistsError,
    "AccessDenied": AccessDeniedError,
    "AllAccessDisabled": AccessDeniedError,
    "InvalidAccessKeyId": AccessDeniedError,
    "SignatureDoesNotMatch": AccessDeniedError,
    "ExpiredToken": AccessDeniedError,
    "InvalidToken": AccessDeniedError,
    "AccountProblem": AccessDeniedError,
    "RequestTimeTooSkewed": AccessDeniedError,
    "403": AccessDeniedError,
    "SlowDown": ThrottledError,
    "Throttling": ThrottledError,
    "ThrottlingException": ThrottledError,
    "RequestLimitExceeded": ThrottledError,
    "RequestThrottled": ThrottledError,
    "TooManyRequests": ThrottledError,
    "429": ThrottledError,
    "NotImplemented": ProviderError,  # not a 5xx to retry: the server never will
    "501": ProviderError,
    "InternalError": ProviderUnavailableError,
    "ServiceUnavailable": ProviderUnavailableError,
    "OperationAborted": ProviderUnavailableError,
    "RequestTimeout": ProviderTimeoutError,
    # botocore exception classes (BotoCoreError), matched along the exception's MRO
    "ConnectTimeoutError": ProviderTimeoutError,
    "ReadTimeoutError": ProviderTimeoutError,
    "EndpointConnectionError": ProviderUnavailableError,
    "ConnectionClosedError": ProviderUnavailableError,
    "ResponseStreamingError": ProviderUnavailableError,
    "IncompleteReadError": ProviderUnavailableError,
    "HTTPClientError": ProviderUnavailableError,
    "NoCredentialsError": AccessDeniedError,
    "PartialCredentialsError": AccessDeniedError,
    "CredentialRetrievalError": AccessDeniedError,
}
"""The one translation table: S3 error code, HTTP status or botocore class name → our error."""

HINTS = {
    "NoSuchBucket": "create the bucket or fix objectStoreBucket",
    "NoCredentialsError": "set objectStoreAccessKey/objectStoreSecretKey or AWS credentials",
    "InvalidAccessKeyId": "check objectStoreAccessKey or the AWS credential chain",
    "SignatureDoesNotMatch": "check objectStoreSecretKey",
}


@functools.cache
def boto_errors() -> tuple[type[Exception], ...]:
    """The botocore exception classes :func:`translate` takes (imported on first use)."""
    try:
        import botocore.exceptions as bx
    except ImportError as e:
        raise MissingDependencyError(f"the s3 provider needs boto3: {INSTALL_HINT}") from e
    return (bx.ClientError, bx.BotoCoreError)


def translate(
    e: Exception,
    operation: str,
    name: str,
    bucket: str,
    key: str,
    encryption: S3Encryption | None = None,
) -> ProviderError:
    """Map a botocore error of ``operation`` on ``name`` (of provider key ``key``) to the error
    tree through :data:`ERRORS` (the caller chains it); with ``encryption``, a 400 or 403 it
    may explain gets its hint (and a wrong SSE-C key is an access denial)."""
    response: Any = getattr(e, "response", None)
    hint: str | None
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        cls = ERRORS.get(code) or ERRORS.get(str(status))
        if cls is None:
            cls = ProviderUnavailableError if status >= 500 else ProviderError
        detail = f"{code or status}: {error.get('Message') or e}"
        hint = HINTS.get(code)
        refusal = (
            encryption.refusal_hint(operation, status, str(error.get("Message") or ""))
            if encryption is not None and status in (400, 403)
            else None
        )
        if refusal is not None and hint is None:  # not a credentials problem
            denied, hint = refusal
            cls = AccessDeniedError if denied else cls
    else:
        names = [t.__name__ for t in type(e).__mro__]
        code = next((n for n in names if n in ERRORS), names[0])
        cls = ERRORS.get(code, ProviderError)
        detail = f"{type(e).__name__}: {e}"
        hint = HINTS.get(code)
    message = f"s3 {operation} of {name!r} in bucket {bucket!r} failed with {detail}"
    return cls(f"{message}; {hint}" if hint else message, key=key)


def not_implemented(error: ProviderError) -> bool:
    """Whether ``error`` says the server does not implement the request (a conditional PUT, a
    copy of an encrypted object)."""
    response: Any = getattr(error.__cause__, "response", None)
    if not isinstance(response, dict):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    return code == "NotImplemented" or status == 501
