"""The sidecar's log lines: one handler on stderr, text or JSON, and the fields of error lines.

``tieredLogFormat=text`` (the default) writes ``time LEVEL logger: message`` lines;
``tieredLogFormat=json`` writes one JSON object per line (python-json-logger)::

    {"time": "2026-11-22T10:15:30.123Z", "level": "DEBUG", "logger": "tiered.offload.offload_step",
     "message": "uploaded batch TopicA/3 offsets [1200, 1264) ...", "topic": "TopicA",
     "queueId": 3, ...}

with every ``extra=`` field of the call and ``exc_info`` (the traceback as one string) when there
is one. A line about a failed backend operation carries ``objectKey`` (the provider key, see
:func:`error_fields`), plus ``topic`` and ``queueId`` where known; its traceback is attached only
when DEBUG is enabled (:func:`traceback_if_debug`), so by default one error is one line.

Third-party loggers (botocore, boto3, urllib3, s3transfer, apscheduler, uvicorn) stay at WARNING
whatever the level; uvicorn's loggers write through this handler (:func:`uvicorn_access_log`).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

__all__ = [
    "LEVELS",
    "TEXT_FORMAT",
    "IsoJsonFormatter",
    "configure",
    "error_fields",
    "object_key",
    "traceback_if_debug",
    "uvicorn_access_log",
]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}
QUIET_LOGGERS = ("apscheduler", "botocore", "boto3", "urllib3", "s3transfer", "uvicorn")
"""Third-party loggers kept at WARNING whatever the level."""
_UVICORN_ACCESS = "uvicorn.access"


class IsoJsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO-8601 UTC, milliseconds), ``level``,
    ``logger``, ``message``, then the record's ``extra=`` fields and ``exc_info``.

    python-json-logger's formatter does the work; it is imported when the first one is made,
    so a process that logs text never loads it."""

    def __init__(self) -> None:
        super().__init__()
        self._json = _json_formatter_class()()

    def format(self, record: logging.LogRecord) -> str:
        return self._json.format(record)


@functools.cache
def _json_formatter_class() -> type[logging.Formatter]:
    from pythonjsonlogger.core import RESERVED_ATTRS
    from pythonjsonlogger.json import JsonFormatter

    class Formatter(JsonFormatter):
        def __init__(self) -> None:
            super().__init__(
                ["asctime", "levelname", "name", "message"],
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
                # uvicorn adds a coloured copy of its message to every record
                reserved_attrs=[*RESERVED_ATTRS, "color_message", "taskName"],
                json_ensure_ascii=False,
            )

        def formatTime(  # noqa: N802 - the name logging.Formatter gives it
            self, record: logging.LogRecord, datefmt: str | None = None
        ) -> str:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            return f"{stamp}.{int(record.msecs):03d}Z"

    return Formatter


def configure(level: int | str, fmt: str) -> None:
    """Send every log record at ``level`` and above to stderr in ``fmt`` (``text``/``json``),
    replacing the root logger's handlers; third-party loggers stay at WARNING."""
    handler = logging.StreamHandler()
    handler.setFormatter(IsoJsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    numeric = LEVELS[level.upper()] if isinstance(level, str) else level
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def object_key(error: BaseException | None) -> str | None:
    """The object key an error names (``ProviderError.key``, ``IntegrityError.key``), if any."""
    key = getattr(error, "key", None)
    return key if isinstance(key, str) and key else None


def error_fields(
    error: BaseException | None = None,
    *,
    key: str | None = None,
    topic: str | None = None,
    queue_id: int | None = None,
) -> dict[str, Any]:
    """The ``extra=`` fields of a line about a failed backend operation: ``objectKey`` (``key``,
    else the one ``error`` names), ``topic`` and ``queueId``; unknown ones are left out."""
    fields: dict[str, Any] = {}
    found = key or object_key(error)
    if found is not None:
        fields["objectKey"] = found
    if topic is not None:
        fields["topic"] = topic
    if queue_id is not None:
        fields["queueId"] = queue_id
    return fields


def traceback_if_debug(logger: logging.Logger, error: BaseException) -> BaseException | None:
    """``exc_info`` for a failure line: the error (its traceback printed) only at DEBUG."""
    return error if logger.isEnabledFor(logging.DEBUG) else None


def uvicorn_access_log() -> bool:
    """Prepare uvicorn's loggers to write through the root handler (call before building a
    ``uvicorn.Config`` with ``log_config=None``); returns whether to keep an access log: only
    when DEBUG is enabled (its lines are uvicorn's INFO records of logger ``uvicorn.access``)."""
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    for name in ("uvicorn", "uvicorn.error", _UVICORN_ACCESS):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True  # uvicorn turns this off when the access log is off
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.NOTSET)
    logging.getLogger(_UVICORN_ACCESS).setLevel(logging.INFO if debug else logging.WARNING)
    return debug
