"""The read-only HTTP API: messages by offset, offsets and time, explain, status, health, metrics.

Every user mistake is a 4xx whose JSON body names the parameter (``{"error": ..., "parameter":
...}``); a 500 only ever means a bug. Responses are capped by ``maxCount`` and by bytes. A message
that fails its integrity checks is a 502 naming the segment and offset. A backend that is
unreachable or refuses (e.g. access denied) is a 503 ``{"error", "objectKey", "retry"}``
(``retry`` false when asking again will not help until the backend is fixed). An object that
vanished (or shrank) under a read the broker cannot answer instead -- a segment expired or
rewritten after the read looked at the metadata -- is a 503 too, ``{"error", "objectKey",
"retry": true}`` with ``Retry-After``: the metadata has moved on and the same request asked again
gets the current answer (e.g. OFFSET_TOO_SMALL). A cold read refused because
``tieredReadMaxPending`` others wait for the backend is a 503 ``{"error", "key":
"tieredReadMaxPending", "limit", "retry": true}`` with ``Retry-After``, answered at once. More
routes (the key query) come in through ``extra_routers``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from collections.abc import Sequence
from typing import Annotated
from typing import Any
from typing import Literal

from fastapi import APIRouter
from fastapi import Depends
from fastapi import FastAPI
from fastapi import Path
from fastapi import Query
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.responses import PlainTextResponse
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client import REGISTRY
from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

from tiered import metrics as tiered_metrics
from tiered.access.accounts import Account
from tiered.access.security import Security
from tiered.broker import message as msgcodec
from tiered.core.status_report import StatusQuery
from tiered.errors import IntegrityError
from tiered.errors import InvalidRequestError
from tiered.errors import ProviderError
from tiered.errors import ReadBusyError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentNotFoundError
from tiered.errors import TieredStoreError
from tiered.process.logs import error_fields
from tiered.read.fetcher import GetResult
from tiered.read.message_store import MAX_QUEUE_ID
from tiered.read.message_store import TOPIC_PATTERN
from tiered.read.message_store import TieredMessageStore
from tiered.read.read_unit import Buffer
from tiered.read.tag_filter import TagFilter

from .accounting import RequestAccounting
from .auth import Authentication

log = logging.getLogger(__name__)

MAX_COUNT_LIMIT = 1024
STATUS_LIMIT = 1000
"""Queues a ``/v1/status`` page lists unless ``limit`` says otherwise (``page.next`` is the
``offset`` of the next page; the totals count every queue matched)."""
STATUS_MAX_LIMIT = 20000
"""The most messages one JSON answer carries (a larger ``maxCount`` is taken as this, as the
byte cap cuts an answer short: ``nextBeginOffset`` says where to go on), and the most a key query
asks for: each message is decoded into an object."""
MAX_RAW_COUNT_LIMIT = 65536
"""The most messages one ``format=raw`` answer carries: the stored units are sent as they were
read, so a catch-up may ask for a whole read-ahead window (and ``tieredHttpMaxResponseBytes``)
per request instead of paying a request's fixed cost every 1024 messages."""
RETRY_AFTER_S = 1
"""``Retry-After`` of a 503 for an object that vanished under a read, or a cold read refused
past ``tieredReadMaxPending``."""
Checks = Callable[[], dict[str, str]]
"""Named checks, each ``"ok"`` (or ``"starting"``, also passing) or what is wrong."""


Topic = Annotated[str, Path(pattern=TOPIC_PATTERN, description="Topic name.")]
QueueId = Annotated[int, Path(alias="queueId", ge=0, le=MAX_QUEUE_ID, description="Queue id.")]


def _headers(result: GetResult) -> dict[str, str]:
    """The response headers of a message read."""
    return {
        "X-Status": result.status.value,
        "X-Next-Begin-Offset": str(result.next_begin_offset),
        "X-Min-Offset": str(result.min_offset),
        "X-Max-Offset": str(result.max_offset),
        "X-Tier": result.tier,
    }


def message_json(data: bytes, tier: str) -> dict[str, Any]:
    """A stored unit as the API returns it: the ``inspect --json`` fields, ``tier``, ``msgId``."""
    m = msgcodec.decode(data)
    out = msgcodec.to_json(m)
    out["tier"] = tier
    out["msgId"] = m.properties.get(msgcodec.PROPERTY_UNIQ_KEY) or m.offset_msg_id
    return out


def error_response(status: int, message: str, parameter: str | None = None) -> JSONResponse:
    """The API's error body, ``{"error": ..., "parameter": ...}`` (``parameter`` when one is
    to blame), with ``status``."""
    body: dict[str, Any] = {"error": message}
    if parameter:
        body["parameter"] = parameter
    return JSONResponse(body, status_code=status)


PASSING = ("ok", "starting")


def _checked(checks: dict[str, str]) -> JSONResponse:
    failed = sorted(name for name, state in checks.items() if state not in PASSING)
    body = {"ok": not failed, "failed": failed, "checks": checks}
    return JSONResponse(body, status_code=503 if failed else 200)


_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "A bad parameter, named in the body"},
    502: {"description": "A message in the tier failed its integrity checks"},
    503: {
        "description": "The backend is unreachable or refused the read, or an object vanished "
        "under it (expired meanwhile); objectKey names the object, retry says whether to retry"
    },
}


async def single_query_values(request: Request) -> None:
    """Refuse a query that names a parameter twice (``?timestamp=1&timestamp=2``): every
    parameter of the API takes one value, and silently taking one of the two would answer a
    question the client did not ask. A 400 naming the parameter. ``async``: FastAPI runs a
    plain ``def`` dependency in its thread pool, a hop that costs CPU on every request."""
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name in seen:
            error = InvalidRequestError(
                f"{name}: given more than once; every query parameter takes a single value, "
                "send it once"
            )
            error.parameter = name  # type: ignore[attr-defined]
            raise error
        seen.add(name)


def create_app(
    store: TieredMessageStore,
    *,
    status: Callable[[StatusQuery], dict[str, Any]],
    ready: Checks,
    alive: Checks,
    max_response_bytes: int = 16 << 20,
    registry: CollectorRegistry = REGISTRY,
    extra_routers: Sequence[APIRouter] = (),
    security: Security | None = None,
) -> FastAPI:
    """The FastAPI application over ``store``; ``status``/``ready``/``alive`` feed the ops paths,
    ``extra_routers`` are included as they are; ``security`` (its accounts) guards the routes
    (:mod:`.auth`)."""
    app = FastAPI(
        title="rocketmq-tiered",
        version="0.1.0",
        description="Cold reads of RocketMQ messages offloaded to tiered storage.",
        responses=_ERROR_RESPONSES,
        dependencies=[Depends(single_query_values)],  # every route, extra_routers' too
    )
    if security is not None:  # inside the accounting: refusals are counted as requests too
        app.add_middleware(Authentication, security=security)
    app.add_middleware(RequestAccounting)  # http_requests_total, http_request_duration

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body")]
        param = ".".join(loc) or None
        return error_response(400, f"{param or 'request'}: {first.get('msg', 'invalid')}", param)

    @app.exception_handler(InvalidRequestError)
    async def _bad(_: Request, exc: InvalidRequestError) -> JSONResponse:
        return error_response(400, str(exc), getattr(exc, "parameter", None))

    @app.exception_handler(IntegrityError)
    async def _integrity(_: Request, exc: IntegrityError) -> JSONResponse:
        return error_response(502, str(exc))

    rejected = tiered_metrics.child(tiered_metrics.READ_REJECTED, "http")

    @app.exception_handler(ReadBusyError)
    async def _busy(_: Request, exc: ReadBusyError) -> JSONResponse:
        rejected.inc()  # not logged: a refusal is the limit working, and may come in floods
        body = {
            "error": str(exc),
            "key": "tieredReadMaxPending",
            "limit": exc.limit,
            "retry": True,
        }
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(SegmentNotFoundError)
    @app.exception_handler(ReadPastEndError)
    async def _vanished(request: Request, exc: ProviderError) -> JSONResponse:
        key = exc.key
        log.warning(
            "%s %s: object %s vanished under the read (%s); answered 503, retry",
            request.method,
            request.url.path,
            key or "-",
            exc,
            extra=error_fields(exc),
        )
        what = (
            "the object is gone from the backend"
            if isinstance(exc, SegmentNotFoundError)
            else "the tier holds less than its metadata said"
        )
        body = {
            "error": f"{exc}; {what}, most likely expired or rewritten during the read (the "
            "tier's metadata has moved on): retry the request",
            "objectKey": key,
            "retry": True,
        }
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(TieredStoreError)
    async def _backend(request: Request, exc: TieredStoreError) -> JSONResponse:
        fields = error_fields(exc)
        log.warning(
            "%s %s failed (object %s): %s",
            request.method,
            request.url.path,
            fields.get("objectKey", "-"),
            exc,
            extra=fields,
        )
        if isinstance(exc, ProviderError):  # the backend refused or failed: not a bug of ours
            body = {"error": str(exc), "objectKey": fields.get("objectKey"), "retry": exc.retriable}
            return JSONResponse(body, status_code=503)
        return error_response(503 if exc.retriable else 500, str(exc))

    @app.get(
        "/v1/topics/{topic}/queues/{queueId}/messages",
        summary="Messages by offset",
        responses={
            200: {
                "description": "JSON messages, or with format=raw the stored units back to "
                "back (status and offsets in the X-* headers)",
                "content": {
                    "application/json": {},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                },
            },
            503: {
                "description": "The backend is unreachable or refused the read, or an object "
                "vanished under it: objectKey names the object, retry says whether to retry; or "
                "tieredReadMaxPending cold reads wait for the backend already: key names that "
                "setting, Retry-After says when to ask again"
            },
        },
    )
    def messages(
        topic: Topic,
        queue_id: QueueId,
        offset: Annotated[int, Query(ge=0, le=2**62, description="First queue offset.")],
        max_count: Annotated[
            int,
            Query(
                alias="maxCount",
                ge=1,
                le=MAX_RAW_COUNT_LIMIT,
                description=f"Messages asked for; a JSON answer carries at most "
                f"{MAX_COUNT_LIMIT}, a raw one {MAX_RAW_COUNT_LIMIT}.",
            ),
        ] = 32,
        tags: Annotated[str | None, Query(max_length=1024, description="'*' or 'A || B'.")] = None,
        fmt: Annotated[Literal["json", "raw"], Query(alias="format")] = "json",
    ) -> Response:
        if fmt == "json":  # capped as the bytes are: the answer says where to go on
            max_count = min(max_count, MAX_COUNT_LIMIT)
        try:
            subscription = TagFilter.parse(tags)
        except InvalidRequestError as e:
            return error_response(400, str(e), "tags")
        result = store.get_message(
            topic, queue_id, offset, max_count, subscription, max_bytes=max_response_bytes
        )
        headers = _headers(result)
        if fmt == "raw":  # the stored units back to back: views of the reads, no copy
            return RawResponse(result.body_parts(), headers)
        return JSONResponse(
            {
                "status": result.status.value,
                "nextBeginOffset": result.next_begin_offset,
                "minOffset": result.min_offset,
                "maxOffset": result.max_offset,
                "tier": result.tier,
                "messages": [message_json(u.data, result.tier) for u in result.units],
            },
            headers=headers,
        )

    @app.get("/v1/topics/{topic}/queues/{queueId}/offsets", summary="Offsets (and by time)")
    def offsets(
        topic: Topic,
        queue_id: QueueId,
        timestamp: Annotated[int | None, Query(ge=0, le=2**62, description="Epoch ms.")] = None,
        boundary: Annotated[Literal["LOWER", "UPPER"], Query()] = "LOWER",
    ) -> dict[str, Any]:
        out: dict[str, Any] = dict(store.offsets(topic, queue_id))
        if timestamp is not None:
            out["timestamp"] = timestamp
            out["boundary"] = boundary
            out["offset"] = store.get_offset_by_time(topic, queue_id, timestamp, boundary)
        return out

    @app.get("/v1/topics/{topic}/queues/{queueId}/explain", summary="Which tier serves an offset")
    def explain(
        topic: Topic, queue_id: QueueId, offset: Annotated[int, Query(ge=0, le=2**62)]
    ) -> dict[str, Any]:
        return store.explain(topic, queue_id, offset)

    @app.get("/v1/status", summary="Per-queue offload status, a page of queues at a time")
    def status_view(
        request: Request,
        topic: Annotated[str | None, Query(max_length=255, description="topic glob")] = None,
        lagging: Annotated[bool, Query(description="only queues behind, most first")] = False,
        limit: Annotated[int, Query(ge=1, le=STATUS_MAX_LIMIT)] = STATUS_LIMIT,
        offset: Annotated[
            int,
            Query(ge=0, le=2**31, description="the page's first queue; topics come with 0 only"),
        ] = 0,
    ) -> dict[str, Any]:
        account: Account | None = getattr(request.state, "account", None)
        readable = None if account is None or account.admin else account.may_read_topic
        query = StatusQuery(topic, lagging, limit, offset, readable)
        return status(query)

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", summary="Liveness: the process and its scheduler run")
    def healthz() -> JSONResponse:
        return _checked(alive())

    @app.get("/readyz", summary="Readiness: metadata loaded, backend and broker store readable")
    def readyz() -> JSONResponse:
        return _checked(ready())

    for router in extra_routers:
        app.include_router(router)
    return app


class RawResponse(Response):
    """A ``format=raw`` answer: the stored units sent as the buffers they were read into, one
    after the other (views of read-ahead windows: never joined into one copy)."""

    media_type = "application/octet-stream"

    def __init__(self, parts: Sequence[Buffer], headers: dict[str, str]) -> None:
        self.parts = parts
        length = str(sum(len(p) for p in parts))
        super().__init__(None, headers={**headers, "content-length": length})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        last = len(self.parts) - 1
        for i, part in enumerate(self.parts):  # a part per read window, not per message
            await send({"type": "http.response.body", "body": part, "more_body": i < last})
        if last < 0:
            await send({"type": "http.response.body", "body": b""})


def raw_units(data: bytes) -> list[bytes]:
    """Split a ``format=raw`` body back into units (each starts with its TOTALSIZE)."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out.append(data[pos : pos + size])
        pos += size
    return out
