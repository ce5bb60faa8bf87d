"""One HTTP GET for tests against the sidecar's API: the status, headers and body of any answer,
errors included (urllib raises on 4xx/5xx; a test wants to look at them)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
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


def get(base: str, path: str = "", *, timeout: float = 30.0, **params: Any) -> Reply:
    """GET ``base + path`` with ``params`` as the query string (none when empty)."""
    query = urllib.parse.urlencode(params)
    url = f"{base}{path}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())
