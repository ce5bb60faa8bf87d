"""HTTP authentication and authorisation: Basic ``accessKey:secretKey`` against ``tieredAclFile``.

An ASGI middleware in front of every route. With access control on, each request but
``/healthz``, ``/readyz``, the API description (``/docs``, ``/redoc``, ``/openapi.json``: no data)
and -- unless ``tieredHttpMetricsAuth`` -- ``/metrics`` needs the credentials of an account:

- none: 401 with ``WWW-Authenticate: Basic``; wrong: 401 too, answered slowly, and 429 with
  ``Retry-After`` once that pair is throttled (:meth:`tiered.access.guard.Guard.failed`);
- a route under ``/v1/topics/{topic}/`` needs SUB on the topic, else 403 -- decided before the
  route runs, from the account alone, so a 403 does not tell whether the topic exists;
- ``/v1/status`` answers with the queues and topics the account may read.

The account is put in the request's state (``request.state.account``) for the routes. Every
refusal is counted and logged by :class:`~tiered.access.guard.Guard`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Final

from starlette.types import ASGIApp
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

from tiered.access.accounts import BAD_CREDENTIALS
from tiered.access.accounts import NO_CREDENTIALS
from tiered.access.guard import THROTTLED
from tiered.access.security import Security
from tiered.errors import AclError

__all__ = ["OPEN_PATHS", "Authentication"]

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/docs", "/redoc", "/openapi.json"})
REALM: Final = 'Basic realm="rocketmq-tiered", charset="UTF-8"'
MAX_AUTHORIZATION = 4096
_TOPIC_PATH = re.compile(r"^/v1/topics/([^/]*)(/|$)")
PORT: Final = "http"


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def credentials(header: bytes | None) -> tuple[str, str] | None:
    """``(accessKey, secretKey)`` of a Basic ``Authorization`` value; None when absent or not
    Basic (a malformed Basic value is ``("", "")``: credentials that match no account)."""
    if not header:
        return None
    scheme, _, value = header.partition(b" ")
    if scheme.lower() != b"basic":
        return None
    if len(value) > MAX_AUTHORIZATION:
        return "", ""
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return "", ""
    access_key, sep, secret_key = text.partition(":")
    return (access_key, secret_key) if sep else ("", "")


class Authentication:
    """The ASGI middleware (a no-op without accounts)."""

    def __init__(self, app: ASGIApp, security: Security) -> None:
        self.app = app
        self.security = security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        acl = self.security.acl
        path = scope.get("path", "")
        if (
            acl is None
            or scope["type"] != "http"
            or path in OPEN_PATHS
            or (path == "/metrics" and not self.security.metrics_auth)
        ):
            await self.app(scope, receive, send)
            return
        guard, peer = self.security.guard, _peer(scope)
        headers = dict(scope.get("headers") or ())
        given = credentials(headers.get(b"authorization"))
        match = _TOPIC_PATH.match(path)
        topic = match.group(1) if match else None
        if given is None:
            guard.denied(PORT, NO_CREDENTIALS, peer, f"{path} without credentials", topic=topic)
            await _refuse(
                send,
                401,
                "credentials required: HTTP Basic with an account's accessKey:secretKey "
                "(curl -u accessKey:secretKey)",
                {"www-authenticate": REALM},
            )
            return
        try:
            account = acl.authenticate(*given)
        except AclError as e:
            penalty = guard.failed(PORT, peer, e.access_key)
            await guard.pause_async(penalty.wait_s)
            reason = THROTTLED if penalty.throttled else BAD_CREDENTIALS
            guard.denied(PORT, reason, peer, str(e), access_key=e.access_key, topic=topic)
            if penalty.throttled:
                retry = math.ceil(guard.spacing_s)
                await _refuse(
                    send,
                    429,
                    f"the accessKey is not an account, or the secretKey does not match; too many "
                    f"failed authentications of this accessKey from {peer}: its failures are "
                    f"answered one per {retry} s (correct credentials at once)",
                    {"retry-after": str(retry), "www-authenticate": REALM},
                )
                return
            await _refuse(
                send,
                401,
                "the accessKey is not an account, or the secretKey does not match",
                {"www-authenticate": REALM},
            )
            return
        try:
            acl.authorize(account, topic, None)
        except AclError as e:
            guard.denied(PORT, e.reason, peer, str(e), access_key=account.access_key, topic=topic)
            await _refuse(
                send,
                403,
                f"accessKey {account.access_key!r} may not read this topic (no SUB permission)",
                {},
            )
            return
        scope.setdefault("state", {})["account"] = account
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, message: str, headers: dict[str, str]) -> None:
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
