"""Request accounting for the HTTP API: a count and a latency per method, route and status.

A plain ASGI middleware (cheaper than Starlette's ``BaseHTTPMiddleware``: no task, no response
copy). ``route`` is the matched route's path template (Starlette puts the route it picked in
``scope["route"]``), ``other`` when no route matched, so the label stays bounded whatever paths
clients send; a method outside :data:`METHODS` is ``other`` too. The time runs from the request
to the end of the response body. A request that fails before answering counts as a 500 (the
answer the server's error middleware then sends).
"""

from __future__ import annotations

import time
from typing import Final

from starlette.types import ASGIApp
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

from tiered import metrics

__all__ = ["METHODS", "OTHER", "RequestAccounting", "route_template"]

METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
OTHER: Final = "other"


def route_template(scope: Scope) -> str:
    """The path template of the route that handled ``scope`` (``other`` when none did)."""
    template = getattr(scope.get("route"), "path_format", None)
    return template if isinstance(template, str) else OTHER


class RequestAccounting:
    """ASGI middleware recording ``http_requests_total`` and ``http_request_duration``
    (:mod:`tiered.metrics`) for every HTTP request of ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000
            method = scope["method"] if scope["method"] in METHODS else OTHER
            route = route_template(scope)
            metrics.child(metrics.HTTP_REQUESTS, method, route, str(status)).inc()
            metrics.child(metrics.HTTP_REQUEST_DURATION, method, route).observe(elapsed_ms)
