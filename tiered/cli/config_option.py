"""``-c/--config FILE`` (repeatable) and logging set-up for the commands that run the sidecar."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import TypeVar

import click

from tiered.config import TieredConfig
from tiered.config import load_config
from tiered.process import logs

F = TypeVar("F", bound=Callable[..., Any])


def config_option(func: F) -> F:
    """Add ``-c/--config FILE`` (required, repeatable; later files win). ``-c`` as the broker's
    own ``mqbroker -c broker.conf``."""
    return click.option(
        "-c",
        "--config",
        "configs",
        type=click.Path(dir_okay=False, path_type=Path),
        multiple=True,
        required=True,
        help="Properties file (repeatable, later wins): the broker's broker.conf, then the "
        "sidecar's keys. RMQ_TIERED_<key> environment variables override.",
    )(func)


def load(configs: tuple[Path, ...]) -> TieredConfig:
    """The configuration of ``--config`` files plus the environment (ConfigError on a problem)."""
    return load_config(list(configs))


def verbosity(count: int) -> int | None:
    """The level ``-v`` (INFO) or ``-vv`` (DEBUG) asks for; ``None`` without the flag."""
    return None if count <= 0 else logging.INFO if count == 1 else logging.DEBUG


def setup_logging(
    cfg: TieredConfig, *, verbose_level: int | None = None, quiet: bool = False
) -> None:
    """Log to stderr in ``tieredLogFormat`` at ``tieredLogLevel``.

    ``quiet`` (the one-shot commands): WARNING unless ``tieredLogLevel`` is set explicitly (file
    or environment). ``verbose_level`` (from ``-v``): at least that verbose, whatever the rest.
    """
    level = logs.LEVELS[cfg.tiered_log_level]
    if quiet and "tiered_log_level" not in cfg.model_fields_set:
        level = logging.WARNING
    if verbose_level is not None:
        level = min(level, verbose_level)
    logs.configure(level, cfg.tiered_log_format)
