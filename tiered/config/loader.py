"""Loading the configuration: properties files, ``RMQ_TIERED_<key>`` variables and explicit
overrides, in that order, into a :class:`~tiered.config.model.TieredConfig`; errors name the key,
the value and the fix."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from tiered.config.broker_keys import KNOWN_BROKER_KEYS
from tiered.config.keyed import FieldValueError
from tiered.config.keyed import Problem
from tiered.config.model import _MODEL_KEYS
from tiered.config.model import TieredConfig
from tiered.config.properties import entries
from tiered.config.values import _DEPRECATED
from tiered.config.values import _LEGACY_KEYS
from tiered.config.values import _SECRET_KEYS
from tiered.config.values import ENV_PREFIX
from tiered.errors import ConfigError

_LOG = logging.getLogger(__name__)

# --- loading -------------------------------------------------------------------------------------


class _Setting(NamedTuple):
    value: str
    source: str | None  # "file:line", "environment variable X", "override"; None when unknown


def load_config(
    paths: str | Path | Sequence[str | Path],
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> TieredConfig:
    """Read properties ``paths`` (later wins), then ``RMQ_TIERED_<key>`` variables of ``env``
    (default ``os.environ``), then ``overrides``; validate once.

    Raises:
        ConfigError: a file cannot be read or parsed, a key is unknown, or a value is bad. The
            message is one line naming the file (and line), the key, the value and the fix.
    """
    if isinstance(paths, str | Path):  # one file (a str is also a Sequence of characters)
        paths = [paths]
    settings: dict[str, _Setting] = {}

    def put(key: str, setting: _Setting) -> None:
        if key in _DEPRECATED:
            _warn_deprecated(key, setting.source)
        settings[_LEGACY_KEYS.get(key, key)] = setting

    for path in paths:
        text = _read_text(Path(path))
        for key, value, lineno in entries(text, str(path)):
            put(key, _Setting(value, f"{path}:{lineno}"))
    lowered = {key.lower(): key for key in (*_MODEL_KEYS, *_DEPRECATED)}
    for name, value in (os.environ if env is None else env).items():
        if name.startswith(ENV_PREFIX):
            key = name.removeprefix(ENV_PREFIX)
            if key not in _MODEL_KEYS and key not in KNOWN_BROKER_KEYS:
                key = lowered.get(key.lower(), key)  # RMQ_TIERED_TIEREDSTORAGELEVEL
            put(key, _Setting(value, f"environment variable {name}"))
    for key, value in (overrides or {}).items():
        put(key, _Setting(value, "override"))
    return _build(settings)


_warned: set[str] = set()


def _warn_deprecated(key: str, source: str | None) -> None:
    """One warning per process for a deprecated key (read at every config load)."""
    if key not in _warned:
        _warned.add(key)
        _LOG.warning(
            "%s (%s) is deprecated: rename it %s (it now covers both ports); the old name is "
            "still read",
            key,
            source or "config",
            _DEPRECATED[key],
        )


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist: check the path") from e
    except IsADirectoryError as e:
        raise ConfigError(f"config file {path} is a directory: give a properties file") from e
    except PermissionError as e:
        raise ConfigError(f"config file {path} is not readable (permission denied)") from e
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})"
            ": save it as UTF-8"
        ) from e


def _build(settings: Mapping[str, _Setting]) -> TieredConfig:
    unknown = [k for k in settings if k not in _MODEL_KEYS and k not in KNOWN_BROKER_KEYS]
    if unknown:
        raise ConfigError("; ".join(_unknown_key(k, settings[k].source) for k in unknown))
    ignored = sorted(k for k in settings if k not in _MODEL_KEYS)
    if ignored:
        _LOG.debug("ignoring broker keys the sidecar does not use: %s", ", ".join(ignored))
    values = {k: s.value for k, s in settings.items() if k in _MODEL_KEYS}
    try:
        return TieredConfig.model_validate(values)
    except FieldValueError as e:
        raise ConfigError("; ".join(_describe(p, settings) for p in e.problems)) from e


def _unknown_key(key: str, source: str | None) -> str:
    where = f"{source}: " if source else ""
    lowered = {k.lower(): k for k in sorted(KNOWN_BROKER_KEYS) + sorted(_MODEL_KEYS)}
    import difflib  # only for a misspelt key

    close = difflib.get_close_matches(key.lower(), lowered, n=1, cutoff=0.75)
    hint = f" (did you mean {lowered[close[0]]!r}?)" if close else ""
    return (
        f"{where}unknown key {key!r}{hint}: it is neither a sidecar key nor a known RocketMQ "
        "broker key; fix or remove it"
    )


def _describe(problem: Problem, settings: Mapping[str, _Setting]) -> str:
    if problem.key is None:
        return problem.message
    setting = settings.get(problem.key)
    where = f"{setting.source}: " if setting and setting.source else ""
    value = "'***'" if problem.key in _SECRET_KEYS else repr(problem.value)
    return f"{where}{problem.key}={value} {problem.message}"
