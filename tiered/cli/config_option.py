"""``--config FILE`` (repeatable) and logging set-up for the commands that run the sidecar."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tiered.config import TieredConfig, load_config

F = TypeVar("F", bound=Callable[..., Any])


def config_option(func: F) -> F:
    """Add ``--config FILE`` (required, repeatable; later files win)."""
    return click.option(
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


def setup_logging(verbose: int = 0, *, quiet: bool = False) -> None:
    """Log to stderr: WARNING when quiet, INFO by default, DEBUG with ``-v``."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
