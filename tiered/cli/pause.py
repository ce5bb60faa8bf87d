"""``rmq-tiered pause`` / ``resume``: stop and restart the uploads of a configuration's sidecar.

Both write the pause file in ``tieredDataDir`` (:mod:`tiered.offload.pause`), which a running
``rmq-tiered run`` looks at before every dispatch round: they work whether or not its HTTP port is
on, and with no sidecar running (the next ``run`` then starts paused).
"""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

import click

from tiered.cli.common import emit_json
from tiered.cli.common import fail
from tiered.cli.common import warn
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.core.status_report import daemon_of
from tiered.offload.pause import PauseFile
from tiered.offload.pause import PauseState
from tiered.offload.pause import utc

_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


@click.command("pause")
@config_option
@click.option("--reason", default="", help="Why, in a few words (status shows it).")
@_JSON
def pause(configs: tuple[Path, ...], reason: str, as_json: bool) -> None:
    """Pause the uploads of the sidecar of this configuration.

    A running `rmq-tiered run` stops uploading after its current round, within
    tieredStoreDispatchIntervalMs; reads and expiry go on, and a restart stays paused. The
    broker must keep what waits: `resume` offloads it with no gap, but what the broker deletes
    meanwhile becomes a gap (status reports it).
    """
    _switch(configs, True, reason, as_json)


@click.command("resume")
@config_option
@_JSON
def resume(configs: tuple[Path, ...], as_json: bool) -> None:
    """Resume the uploads of the sidecar of this configuration: a running `rmq-tiered run`
    offloads the lag from where it stopped at its next dispatch pass."""
    _switch(configs, False, "", as_json)


def _switch(configs: tuple[Path, ...], paused: bool, reason: str, as_json: bool) -> None:
    cfg = load(configs)
    data_dir = cfg.tiered_data_dir
    if not data_dir.is_dir():
        fail(
            f"tieredDataDir={str(data_dir)!r} does not exist: no sidecar has run with this "
            "configuration; check --config (the sidecar's tieredDataDir), or start "
            "`rmq-tiered run` once"
        )
    pause_file = PauseFile(data_dir)
    try:
        state, changed = pause_file.set(paused, f"cli:{_who()}", reason)
    except OSError as e:
        fail(f"cannot write {pause_file.path}: {e.strerror or e}")
    pid, running = daemon_of(data_dir)
    if as_json:
        emit_json(
            {
                "action": "pause" if paused else "resume",
                "changed": changed,
                "uploads": state.to_json(),
                "dataDir": str(data_dir),
                "daemon": {"pid": pid if running else None, "running": running},
            }
        )
        return
    if cfg.tiered_store_read_only:
        warn("tieredStoreReadOnly=true: this sidecar uploads nothing, paused or not")
    click.echo(_said(state, changed, running, pid, cfg.tiered_store_dispatch_interval_ms))


def _who() -> str:
    """``user@host`` of this command, for the record."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        user = "?"
    return f"{user}@{socket.gethostname()}"


def _said(state: PauseState, changed: bool, running: bool, pid: int | None, every: int) -> str:
    """What the command did, in a sentence or two."""
    daemon = f"the running sidecar (pid {pid})" if running else ""
    if state.paused and not changed:
        return f"uploads were already paused since {utc(state.since_ms)} by {state.by}: unchanged"
    if not state.paused and not changed:
        return "uploads were not paused: unchanged"
    if state.paused:
        then = (
            f"{daemon} stops uploading after its current round (within "
            f"tieredStoreDispatchIntervalMs={every} ms); reads and expiry go on"
            if running
            else "no sidecar runs on this data dir now: the next `rmq-tiered run` starts paused"
        )
        return f"uploads paused at {utc(state.since_ms)}: {then}; `rmq-tiered resume` resumes"
    then = (
        f"{daemon} offloads the lag at its next pass (within {every} ms)"
        if running
        else "no sidecar runs on this data dir now: the next `rmq-tiered run` uploads"
    )
    return f"uploads resumed: {then}"
