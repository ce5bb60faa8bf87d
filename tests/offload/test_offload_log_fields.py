"""Logging in-process: the two config keys, the level rules of the commands, the JSON formatter,
object keys on provider errors, one line per failed dispatch step, uvicorn's access lines."""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import FsspecProvider
from tiered.providers import MemoryProvider
from tiered.providers import PosixProvider
from tiered.providers import Provider
from tiered.providers import S3Provider
from tiered.providers.testing.servers import S3Endpoint

from tiered.cli import main
from tiered.cli.config_option import setup_logging
from tiered.cli.config_option import verbosity
from tiered.config import load_config
from tiered.core.sidecar import Sidecar
from tiered.errors import ConfigError
from tiered.errors import InvalidKeyError
from tiered.errors import InvalidRangeError
from tiered.errors import PositionMismatchError
from tiered.errors import ProviderError
from tiered.errors import ProviderUnavailableError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.http.app import create_app
from tiered.http.server import HttpServer
from tiered.process.logs import IsoJsonFormatter
from tiered.process.logs import error_fields
from tiered.testing.sample_tier import SidecarCase

ISO_MS_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
STEP_LOGGER = "tiered.offload.offload_step"


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    """The root logger, its handlers and level put back after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


# --- configuration --------------------------------------------------------------------------------


def test_log_keys_default_to_info_and_text() -> None:
    cfg = load_config([], env={})
    assert (cfg.tiered_log_level, cfg.tiered_log_format) == ("INFO", "text")
    assert {"tiered_log_level", "tiered_log_format"}.isdisjoint(cfg.model_fields_set)


@pytest.mark.parametrize(
    ("level", "fmt", "want"),
    [("debug", "JSON", ("DEBUG", "json")), (" Warning ", "Text", ("WARNING", "text"))],
)
def test_log_keys_take_any_case_and_are_normalised(
    level: str, fmt: str, want: tuple[str, str]
) -> None:
    cfg = load_config([], env={}, overrides={"tieredLogLevel": level, "tieredLogFormat": fmt})
    assert (cfg.tiered_log_level, cfg.tiered_log_format) == want


def test_log_level_from_the_environment_counts_as_set() -> None:
    cfg = load_config([], env={"RMQ_TIERED_tieredLogLevel": "error"})
    assert cfg.tiered_log_level == "ERROR" and "tiered_log_level" in cfg.model_fields_set


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("tieredLogLevel", "VERBOSE", "DEBUG, INFO, WARNING, ERROR"),
        ("tieredLogLevel", "CRITICAL", "DEBUG, INFO, WARNING, ERROR"),
        ("tieredLogFormat", "xml", "text, json"),
        ("tieredLogFormat", "", "text, json"),
    ],
)
def test_bad_log_values_name_key_value_and_choices(key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config([], env={}, overrides={key: value})
    message = str(caught.value)
    assert f"{key}={value!r}" in message and allowed in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "command", ["run", "dispatch", "recover", "compact-index", "fetch", "query", "explain"]
)
def test_a_bad_log_key_is_one_error_line_before_any_logging(command: str, tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("tieredLogLevel=LOUD\n", encoding="utf-8")
    extra = {
        "dispatch": ["--once"],
        "fetch": ["--topic", "T", "--queue", "0", "--offset", "0"],
        "query": ["--topic", "T", "--key", "k"],
        "explain": ["--topic", "T", "--queue", "0", "--offset", "0"],
    }.get(command, [])
    result = CliRunner().invoke(main, [command, "--config", str(conf), *extra])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert f"{conf}:1: tieredLogLevel='LOUD' is not one of DEBUG" in result.output


# --- the level rules of the commands --------------------------------------------------------------


def _level(root: logging.Logger, overrides: dict[str, str], **kw: Any) -> int:
    setup_logging(load_config([], env={}, overrides=overrides), **kw)
    return root.level


def test_run_uses_the_configured_level_and_v_forces_debug(root_logging: logging.Logger) -> None:
    assert _level(root_logging, {}) == logging.INFO
    assert _level(root_logging, {"tieredLogLevel": "ERROR"}) == logging.ERROR
    debug = logging.DEBUG
    assert _level(root_logging, {"tieredLogLevel": "ERROR"}, verbose_level=debug) == debug


def test_one_shot_commands_are_quiet_unless_the_level_is_set(
    root_logging: logging.Logger,
) -> None:
    def quiet(overrides: dict[str, str], count: int = 0) -> int:
        return _level(root_logging, overrides, verbose_level=verbosity(count), quiet=True)

    assert quiet({}) == logging.WARNING
    assert quiet({}, 1) == logging.INFO
    assert quiet({}, 2) == logging.DEBUG
    assert quiet({"tieredLogLevel": "DEBUG"}) == logging.DEBUG  # explicit: the config applies
    assert quiet({"tieredLogLevel": "INFO"}) == logging.INFO
    assert quiet({"tieredLogLevel": "ERROR"}) == logging.ERROR
    assert quiet({"tieredLogLevel": "ERROR"}, 1) == logging.INFO  # -v is at least INFO
    assert quiet({"tieredLogLevel": "DEBUG"}, 1) == logging.DEBUG  # the more verbose wins


def test_third_party_loggers_stay_at_warning(root_logging: logging.Logger) -> None:
    _level(root_logging, {"tieredLogLevel": "DEBUG"})
    for name in ("botocore", "boto3", "urllib3", "s3transfer", "apscheduler", "uvicorn"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
    assert logging.getLogger("tiered.core").getEffectiveLevel() == logging.DEBUG


# --- the JSON formatter ---------------------------------------------------------------------------


def _record(exc: BaseException | None = None, **extra: Any) -> logging.LogRecord:
    logger = logging.getLogger("tiered.test")
    return logger.makeRecord(
        logger.name,
        logging.WARNING,
        __file__,
        1,
        "step of %s failed: %s",
        ("TopicA/3", "nö"),
        (type(exc), exc, exc.__traceback__) if exc is not None else None,
        extra=extra,
    )


def test_json_lines_have_time_level_logger_message_and_extra_fields() -> None:
    line = IsoJsonFormatter().format(_record(objectKey="k/1", queueId=3, ms=1.5))
    assert "\n" not in line
    obj = json.loads(line)
    assert ISO_MS_UTC.fullmatch(obj.pop("time"))
    assert obj == {
        "level": "WARNING",
        "logger": "tiered.test",
        "message": "step of TopicA/3 failed: nö",
        "objectKey": "k/1",
        "queueId": 3,
        "ms": 1.5,
    }


def test_json_lines_carry_the_traceback_as_one_string() -> None:
    try:
        raise SegmentNotFoundError("no object 'k/1'", key="k/1")
    except SegmentNotFoundError as e:
        record = _record(e, **error_fields(e))
    line = IsoJsonFormatter().format(record)
    obj = json.loads(line)
    assert "\n" not in line and obj["objectKey"] == "k/1"
    assert obj["exc_info"].startswith("Traceback") and "SegmentNotFoundError" in obj["exc_info"]


def test_error_fields_prefer_the_given_key_and_leave_out_unknown_ones() -> None:
    e = ProviderError("boom", key="a/b")
    assert error_fields(e, topic="T", queue_id=0) == {
        "objectKey": "a/b",
        "topic": "T",
        "queueId": 0,
    }
    assert error_fields(e, key="c/d") == {"objectKey": "c/d"}
    assert error_fields(OSError("disk"), topic="T") == {"topic": "T"}


# --- provider errors name their object ------------------------------------------------------------

KEY = "212d6b50_DefaultCluster/broker-a/TopicA/3/COMMIT_LOG/cfcd208400000000000000000000"


def _providers(tmp_path: Path) -> dict[str, Provider]:
    return {
        "memory": MemoryProvider(),
        "posix": PosixProvider(tmp_path / "posix"),
        "fsspec-file": FsspecProvider(f"file://{tmp_path / 'fsspec'}"),
        "fsspec-memory-chunks": FsspecProvider(f"memory://{tmp_path.name}", append_mode="chunks"),
    }


@pytest.mark.parametrize("name", ["memory", "posix", "fsspec-file", "fsspec-memory-chunks"])
def test_provider_errors_carry_the_object_key(name: str, tmp_path: Path) -> None:
    provider = _providers(tmp_path)[name]
    calls: list[tuple[type[ProviderError], Callable[[], object]]] = [
        (SegmentNotFoundError, lambda: provider.size(KEY)),
        (SegmentNotFoundError, lambda: provider.read(KEY, 0, 1)),
        (SegmentNotFoundError, lambda: provider.append(KEY, b"x", 5)),
        (InvalidRangeError, lambda: provider.read(KEY, -1, 1)),
    ]
    for kind, call in calls:
        with pytest.raises(kind) as caught:
            call()
        assert caught.value.key == KEY, (kind, call)
    provider.append(KEY, b"abc", 0)
    with pytest.raises(PositionMismatchError) as mismatch:
        provider.append(KEY, b"d", 1)
    assert mismatch.value.key == KEY and mismatch.value.expected == 3
    with pytest.raises(ReadPastEndError) as past:
        provider.read(KEY, 3, 1)
    assert past.value.key == KEY
    provider.put(f"{KEY}.whole", b"x")
    with pytest.raises(SegmentExistsError) as exists:
        provider.put(f"{KEY}.whole", b"y")
    assert exists.value.key == f"{KEY}.whole"
    with pytest.raises(InvalidKeyError) as bad:
        provider.size("a/../b")
    assert bad.value.key == "a/../b"


@pytest.mark.s3
def test_s3_errors_name_the_provider_key_without_prefix_or_chunk(moto_s3: S3Endpoint) -> None:
    def s3(bucket: str) -> S3Provider:
        return S3Provider(
            bucket,
            prefix="pre/fix",
            endpoint=moto_s3.url,
            region=moto_s3.region,
            access_key=moto_s3.access_key,
            secret_key=moto_s3.secret_key,
            path_style=True,
            max_attempts=1,
        )

    provider = s3(moto_s3.new_bucket())
    provider.append(KEY, b"abc", 0)  # a chunk object KEY~00000000000000000000 under the prefix
    with pytest.raises(PositionMismatchError) as mismatch:
        provider.append(KEY, b"d", 7)
    assert mismatch.value.key == KEY
    with pytest.raises(ProviderError) as missing_bucket:  # translated from botocore
        s3(f"absent-{moto_s3.new_bucket()}").size(KEY)
    assert missing_bucket.value.key == KEY and "NoSuchBucket" in str(missing_bucket.value)


def test_injected_faults_name_the_object() -> None:
    faulty = FaultInjectingProvider(MemoryProvider(), FaultPlan(nth={1}))
    with pytest.raises(ProviderError) as caught:
        faulty.size(KEY)
    assert caught.value.key == KEY


# --- one line per failed dispatch step ------------------------------------------------------------


def _failed_step_records(
    caplog: pytest.LogCaptureFixture, offload_case: SidecarCase
) -> tuple[list[logging.LogRecord], Provider]:
    """Dispatch with the first append failing; the WARNING+ records of the queue steps."""
    cfg = offload_case.config(offload_case.store())
    provider = FaultInjectingProvider(MemoryProvider(), FaultPlan(nth={1}, operations={"append"}))
    with Sidecar(cfg, provider) as sidecar:
        report = sidecar.dispatcher.run_pass(flush=True)
    assert report.failures == 1 and report.messages == 3000 and report.errors == {}
    records = [r for r in caplog.records if r.name == STEP_LOGGER and r.levelno >= logging.WARNING]
    return records, provider


def test_a_failed_step_is_one_warning_naming_the_object_without_traceback(
    caplog: pytest.LogCaptureFixture, offload_case: SidecarCase
) -> None:
    caplog.set_level(logging.INFO)
    records, provider = _failed_step_records(caplog, offload_case)
    assert len(records) == 1
    (record,) = records
    key = record.__dict__["objectKey"]
    assert "/COMMIT_LOG/" in key and provider.size(key) > 0  # the real object, written later
    assert key in record.getMessage() and record.levelno == logging.WARNING
    assert record.__dict__["topic"].startswith("GenTopic")
    assert isinstance(record.__dict__["queueId"], int)
    assert record.exc_info is None  # one line: no traceback below DEBUG


def test_a_failed_step_has_its_traceback_at_debug(
    caplog: pytest.LogCaptureFixture, offload_case: SidecarCase
) -> None:
    caplog.set_level(logging.DEBUG)
    records, _ = _failed_step_records(caplog, offload_case)
    assert len(records) == 1 and records[0].exc_info is not None
    obj = json.loads(IsoJsonFormatter().format(records[0]))
    assert "InjectedFaultError" in obj["exc_info"] and obj["objectKey"] in obj["message"]


# --- uvicorn writes through our handler -----------------------------------------------------------


def _get_through_uvicorn(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    caplog.set_level(level)
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"{server.url}/ping", timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.stop()
    return [r for r in caplog.records if r.name.startswith("uvicorn")]


def test_uvicorn_access_lines_only_at_debug_and_through_the_root_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert _get_through_uvicorn(caplog, logging.INFO) == []  # no startup chatter, no access
    caplog.clear()
    records = _get_through_uvicorn(caplog, logging.DEBUG)
    assert [r.name for r in records] == ["uvicorn.access"]
    assert "GET /ping" in records[0].getMessage()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert not logging.getLogger(name).handlers, name  # no second, differently formatted stream


class _FailingStore:
    """A read store whose backend is down (only ``offsets`` is reached)."""

    def offsets(self, topic: str, queue_id: int) -> dict[str, int]:
        raise ProviderUnavailableError(f"s3 GET of {KEY!r} failed with 503", key=KEY)


def test_a_failed_http_read_is_one_warning_naming_the_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    app = create_app(
        _FailingStore(),  # type: ignore[arg-type]
        status=lambda query: {},
        ready=dict,
        alive=dict,
        registry=CollectorRegistry(),
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"{server.url}/v1/topics/TopicA/queues/3/offsets", timeout=10)
        assert answer.value.code == 503
        answer.value.close()
    finally:
        server.stop()
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1 and records[0].__dict__["objectKey"] == KEY
    assert "GET /v1/topics/TopicA/queues/3/offsets failed" in records[0].getMessage()
    assert records[0].exc_info is None
