"""The clean-stop record: whether the last writer of this data dir stopped cleanly, so the next
start may skip what only a crash makes necessary.

A writer that stops with every upload recorded (nothing pending, nothing waiting for a sync, no
upload left failed) and the metadata written whole leaves ``{tieredDataDir}/.clean-stop``, naming
the metadata file and the backend it describes. The next writer takes it away before it writes
anything, and when it still names the same metadata file and backend it restores every queue from
the metadata as it is: no backend size, no last-unit read per queue (restart reconciliation, see
:mod:`tiered.file.restart_reconcile`), and no walk for interrupted puts' leftovers. Anything else
(a crash, a kill -9, a failed stop, a metadata file restored or replaced since, another backend)
leaves no record or one that does not match, and the start reconciles as it always does. This is
Kafka's clean-shutdown file (``.kafka_cleanshutdown``, which skips log recovery) applied to the
tier; deleting the file forces a reconciliation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from tiered.config import TieredConfig
from tiered.metadata.atomic import fsync_dir
from tiered.metadata.atomic import write_synced

log = logging.getLogger(__name__)

CLEAN_STOP_NAME = ".clean-stop"
_VERSION = 1


def _stat(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class CleanStop:
    """``{tieredDataDir}/.clean-stop`` for the metadata files ``watched`` (the snapshot and its
    journal) and the backend ``cfg`` names."""

    def __init__(self, cfg: TieredConfig, watched: list[Path]) -> None:
        self.path = Path(cfg.tiered_data_dir) / CLEAN_STOP_NAME
        self._watched = watched
        self._backend = {
            "provider": cfg.tiered_backend_service_provider,
            "path": str(cfg.tiered_store_file_path),
            "fsspecUrl": cfg.tiered_store_fsspec_url,
            "endpoint": str(cfg.object_store_endpoint),
            "bucket": str(cfg.object_store_bucket),
            "prefix": cfg.object_store_prefix,
            "cluster": cfg.broker_cluster_name,
            "broker": cfg.broker_name,
        }

    def _body(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "backend": self._backend,
            "files": {p.name: _stat(p) for p in self._watched},
        }

    def record(self) -> None:
        """Record a clean stop (after the metadata's last write); a failure is logged: the next
        start reconciles, as after a crash."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            write_synced(tmp, json.dumps(self._body()).encode("utf-8"))
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
        except OSError as e:
            log.warning("cannot record the clean stop in %s (the next start reconciles every "
                        "queue with the backend, as after a crash): %s", self.path, e)  # fmt: skip
            with contextlib.suppress(OSError):
                tmp.unlink()

    def take(self) -> bool:
        """Remove the record (durably, before the caller writes anything); whether it said the
        last writer stopped cleanly with the metadata and backend as they are now. A record that
        cannot be removed counts as none."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as e:
            log.warning("cannot read %s (%s): reconciling every queue with the backend",
                        self.path, e)  # fmt: skip
            return False
        try:
            self.path.unlink()
            fsync_dir(self.path.parent)
        except OSError as e:
            log.warning("cannot remove %s (%s): reconciling every queue with the backend; "
                        "remove it by hand", self.path, e)  # fmt: skip
            return False
        try:
            body = json.loads(raw)
        except ValueError:
            log.warning("%s is damaged: reconciling every queue with the backend", self.path)
            return False
        if body != self._body():
            log.info("%s does not describe this metadata and backend (replaced or changed since "
                     "the stop): reconciling every queue with the backend", self.path)  # fmt: skip
            return False
        return True
