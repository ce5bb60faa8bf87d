"""``POST /v1/admin/pause`` and ``POST /v1/admin/resume``: uploads paused and resumed over HTTP.

They write the pause file the CLI writes (:mod:`tiered.offload.pause`). Who may call them:

- with access control on (``tieredAclEnable``), an account with ``admin: true``; another
  account gets 403 (counted in ``access_denied_total{reason="forbidden"}``);
- with it off, only a request from the loopback address. The default ``tieredHttpHost=127.0.0.1``
  admits only the host itself (and ``kubectl port-forward``), as for the reads; but a port bound
  wider (the chart binds 0.0.0.0) would let anyone who reaches it stop the uploads, which become
  gaps once the broker deletes what waits: that takes an account;
- never a request with an ``Origin`` header (a browser, maybe sent by another site's page):
  these routes are for operators' tools (``curl``, scripts).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated
from typing import Any

from fastapi import APIRouter
from fastapi import Query
from fastapi import Request
from fastapi.responses import JSONResponse

from tiered import metrics
from tiered.access.accounts import FORBIDDEN
from tiered.access.accounts import Account
from tiered.access.security import Security
from tiered.http.app import error_response
from tiered.offload.pause import PauseFile

PORT = "http"
MAX_REASON = 200
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "`changed` (false: it was so already) and `uploads` (paused, sinceMs, "
          "by, reason)"},
    401: {"description": "Access control is on and the request carries no account's credentials"},
    403: {"description": "Not an admin account; without access control, not from the loopback "
          "address; or sent by a browser (an Origin header)"},
}  # fmt: skip


def _loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def admin_router(pause_file: PauseFile, security: Security | None) -> APIRouter:
    """The admin routes over ``pause_file``, guarded as the module docstring says (``security``
    None: no access control)."""
    router = APIRouter()

    def refusal(request: Request, account: Account | None) -> JSONResponse | None:
        peer = request.client.host if request.client else "unknown"
        acl = security.acl if security is not None else None
        if "origin" in request.headers:
            why = (
                "uploads are paused and resumed by operators' tools, not from a browser "
                "(the request has an Origin header): use curl or `rmq-tiered pause`"
            )
        elif acl is not None and (account is None or not account.admin):
            who = account.access_key if account is not None else ""
            why = (
                f"accessKey {who!r} may not pause or resume uploads: that takes an account "
                "with admin: true in tieredAclFile"
            )
        elif acl is None and not _loopback(peer):
            why = (
                "with tieredAclEnable=false uploads are paused and resumed only from the "
                "sidecar's own host: turn access control on and use an account with admin: "
                "true, or run `rmq-tiered pause --config ...` there"
            )
        else:
            return None
        if security is not None:
            key = account.access_key if account is not None else None
            security.guard.denied(
                PORT, FORBIDDEN, peer, f"{request.url.path}: {why}", access_key=key
            )
        else:
            metrics.child(metrics.ACCESS_DENIED, PORT, FORBIDDEN).inc()
        return error_response(403, why)

    def switch(request: Request, paused: bool, reason: str) -> JSONResponse:
        account: Account | None = getattr(request.state, "account", None)
        refused = refusal(request, account)
        if refused is not None:
            return refused
        peer = request.client.host if request.client else "unknown"
        by = f"http:{account.access_key if account is not None else peer}"
        try:
            state, changed = pause_file.set(paused, by, reason)
        except OSError as e:
            return error_response(503, f"cannot write {pause_file.path}: {e.strerror or e}")
        return JSONResponse({"changed": changed, "uploads": state.to_json()})

    @router.post(
        "/v1/admin/pause",
        summary="Pause uploads (admin)",
        responses=_RESPONSES,
        description="Stop the uploads after the running dispatch round (within "
        "tieredStoreDispatchIntervalMs); reads and expiry go on, a restart stays paused. "
        "`changed` is false when they were paused already (`uploads.sinceMs` is then when). "
        "Needs an account with `admin: true`, or, without access control, a request from the "
        "loopback address.",
    )
    def pause(
        request: Request,
        reason: Annotated[str | None, Query(max_length=MAX_REASON, description="Why.")] = None,
    ) -> JSONResponse:
        return switch(request, True, reason or "")

    @router.post(
        "/v1/admin/resume",
        summary="Resume uploads (admin)",
        responses=_RESPONSES,
        description="Offload the lag from where the uploads stopped, at the next dispatch pass. "
        "Who may: as for pause.",
    )
    def resume(request: Request) -> JSONResponse:
        return switch(request, False, "")

    return router
