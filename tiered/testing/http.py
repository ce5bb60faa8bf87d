"""One HTTP GET for tests against the sidecar's API: the status, headers and body of any answer,
errors included (urllib raises on 4xx/5xx; a test wants to look at them)."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: ``headers`` by lower-case name."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def get(
    base: str,
    path: str = "",
    *,
    timeout: float = 30.0,
    auth: tuple[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
    **params: Any,
) -> Reply:
    """GET ``base + path`` with ``params`` as the query string (none when empty), with HTTP
    Basic ``auth`` (accessKey, secretKey) and the client TLS context ``tls`` when given."""
    return _send("GET", base, path, timeout, auth, tls, {}, params)


def post(
    base: str,
    path: str = "",
    *,
    timeout: float = 30.0,
    auth: tuple[str, str] | None = None,
    headers: dict[str, str] | None = None,
    **params: Any,
) -> Reply:
    """POST ``base + path`` with an empty body, as :func:`get` (plus request ``headers``)."""
    return _send("POST", base, path, timeout, auth, None, headers or {}, params)


def _send(
    method: str,
    base: str,
    path: str,
    timeout: float,
    auth: tuple[str, str] | None,
    tls: ssl.SSLContext | None,
    headers: dict[str, str],
    params: dict[str, Any],
) -> Reply:
    query = urllib.parse.urlencode(params)
    url = f"{base}{path}" + (f"?{query}" if query else "")
    data = b"" if method == "POST" else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def scan_queue(
    port: int,
    topic: str,
    queue_id: int,
    end: int,
    batch: int,
    fmt: str,
    tls: ssl.SSLContext | None = None,
) -> Iterator[tuple[int, int, bytes]]:
    """Read one queue from offset 0 up to ``end`` through ``GET .../messages`` on 127.0.0.1 at
    ``port``, ``batch`` messages a request in ``fmt``, over one kept-alive connection (HTTPS with
    the client context ``tls``): yields the
    offset, the next begin offset and the body of each answer.

    Raises:
        AssertionError: an answer other than 200, or one that does not move the offset on.
    """
    conn = (
        http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        if tls is None
        else http.client.HTTPSConnection("127.0.0.1", port, timeout=120, context=tls)
    )
    offset = 0
    try:
        while offset < end:
            path = f"/v1/topics/{topic}/queues/{queue_id}/messages"
            conn.request("GET", f"{path}?offset={offset}&maxCount={batch}&format={fmt}")
            response = conn.getresponse()
            body = response.read()
            assert response.status == 200, body[:200]
            nxt = int(response.getheader("X-Next-Begin-Offset") or offset)
            assert nxt > offset, (offset, nxt)
            yield offset, nxt, body
            offset = nxt
    finally:
        conn.close()
