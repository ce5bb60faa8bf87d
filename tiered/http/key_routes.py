"""``GET /v1/topics/{topic}/keys/{key}``: messages by key, from the tiered key index.

A router for :func:`tiered.http.app.create_app` (``extra_routers``): bad parameters are 400s whose
JSON body names the parameter (the app's handlers), a message failing its integrity checks a
502, an unreachable backend a 503, and an index that is not running (``messageIndexEnable=false``,
a standby sidecar, or still starting) a 503 that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated
from typing import Any

from fastapi import APIRouter
from fastapi import Path
from fastapi import Query
from fastapi.responses import JSONResponse

from tiered.errors import InvalidRequestError
from tiered.http.app import MAX_COUNT_LIMIT
from tiered.http.app import error_response
from tiered.http.app import message_json
from tiered.index.service import IndexService
from tiered.metadata import LONG_MAX
from tiered.read.message_store import TOPIC_PATTERN

MAX_KEY_LENGTH = 4096


def keys_router(
    service_provider: Callable[[], IndexService | None],
    *,
    max_response_bytes: int = 16 << 20,
) -> APIRouter:
    """The key query route over the index service ``service_provider()`` returns (called per
    request; None while there is none). Responses stop before ``max_response_bytes`` of
    message bytes (at least one message is returned)."""
    router = APIRouter()

    @router.get(
        "/v1/topics/{topic}/keys/{key:path}",
        summary="Messages by key",
        description="The newest messages of the topic whose key (a KEYS token, or UNIQ_KEY = "
        "msgId) is `key`, stored between `begin` and `end` (epoch ms, inclusive), newest first, "
        "in the JSON of the messages-by-offset route.",
    )
    def by_key(
        topic: Annotated[str, Path(pattern=TOPIC_PATTERN, description="Topic name.")],
        key: Annotated[str, Path(min_length=1, max_length=MAX_KEY_LENGTH, description="Key.")],
        begin: Annotated[int, Query(ge=0, le=LONG_MAX, description="Epoch ms.")] = 0,
        end: Annotated[int, Query(ge=0, le=LONG_MAX, description="Epoch ms.")] = LONG_MAX,
        max_count: Annotated[int, Query(alias="maxCount", ge=1, le=MAX_COUNT_LIMIT)] = 32,
    ) -> JSONResponse:
        if begin > end:
            return error_response(400, f"begin={begin} is after end={end}", "begin")
        service = service_provider()
        if service is None:
            return error_response(
                503,
                "the key index is not running (messageIndexEnable=false, a standby sidecar, or "
                "the sidecar is still starting)",
            )
        try:
            hits = service.query(topic, key, begin, end, max_count)
        except InvalidRequestError as e:
            return error_response(400, str(e), getattr(e, "parameter", None))
        messages: list[dict[str, Any]] = []
        used = 0
        for hit in hits:
            if messages and used + len(hit.data) > max_response_bytes:
                break
            messages.append(message_json(hit.data, "tiered"))
            used += len(hit.data)
        body = {
            "topic": topic,
            "key": key,
            "begin": begin,
            "end": end,
            "maxCount": max_count,
            "truncated": len(messages) < len(hits),
            "messages": messages,
        }
        return JSONResponse(body)

    return router
