"""The security of ``rmq-tiered run``: the accounts, the certificate and the guard of both ports.

:class:`Security` is a daemon service. It loads ``tieredAclFile`` and the ``tieredTls*`` files at
start (a file that does not load is a :class:`ConfigError`: the sidecar does not start open), then
looks at them every ``tieredSecurityReloadIntervalMs`` and reloads one that changed -- a
Kubernetes Secret update swaps the mounted files, and the next requests and handshakes use the new
accounts or certificate, with no restart and no connection dropped. A file that changed but does
not load keeps the last good accounts or certificate: one ERROR line per bad version of the file,
``security_file_ok{file}`` 0 until a good one arrives.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic
from typing import TypeVar

from tiered import metrics
from tiered.config import TieredConfig
from tiered.errors import ConfigError

from .accounts import Acl
from .guard import FAILURE_DELAY_S
from .guard import Guard
from .tls import DISABLED
from .tls import ServerTls

log = logging.getLogger("tiered.access")

T = TypeVar("T")
Signature = tuple[tuple[int, int, int, int], ...]


def _signature(paths: tuple[Path, ...]) -> Signature:
    """What changes when a file is rewritten or its symlink swapped (as kubelet does)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, 0, -1, 0))
    return tuple(out)


class Reloading(Generic[T]):
    """The value loaded from ``paths``, loaded again when they change."""

    def __init__(self, name: str, paths: tuple[Path, ...], load: Callable[[], T]) -> None:
        self.name = name
        self.paths = paths
        self._load = load
        self._seen = _signature(paths)
        self.value: T = load()  # ConfigError: not started on a bad file
        self._bad: Signature | None = None
        metrics.SECURITY_FILE_OK.labels(name).set(1)

    def check(self) -> bool:
        """Reload if a file changed; whether the value is now the files' (no bad version)."""
        seen = _signature(self.paths)
        if seen == self._seen:
            return self._bad is None
        try:
            value = self._load()
        except ConfigError as e:
            if seen != self._bad:
                log.error(
                    "%s changed but does not load: still using the last good one (%s); fix the "
                    "file, it is looked at again",
                    ", ".join(map(str, self.paths)),
                    e,
                    extra={"event": "security_reload_failed", "file": self.name},
                )
                metrics.SECURITY_RELOADS.labels(self.name, "failed").inc()
            self._bad = seen
            metrics.SECURITY_FILE_OK.labels(self.name).set(0)
            return False
        self.value, self._seen, self._bad = value, seen, None
        metrics.SECURITY_RELOADS.labels(self.name, "ok").inc()
        metrics.SECURITY_FILE_OK.labels(self.name).set(1)
        log.info("%s reloaded", ", ".join(map(str, self.paths)))
        return True


class Security:
    """Accounts (None: ``tieredAclEnable=false``), server TLS (None: both ports ``disabled``),
    the per-port TLS modes and the guard; a service that reloads the files."""

    def __init__(
        self,
        *,
        accounts_file: Path | None = None,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        client_ca_file: Path | None = None,
        http_tls_mode: str = DISABLED,
        remoting_tls_mode: str = DISABLED,
        metrics_auth: bool = False,
        max_failures_per_minute: int = 10,
        failed_auth_delay_s: float = FAILURE_DELAY_S,
        reload_interval_s: float = 10.0,
    ) -> None:
        """Load the files (``accounts_file`` None: no access control; the certificate is loaded
        when a port's mode is not disabled).

        Raises:
            ConfigError: a file does not load (named, with the fix).
        """
        self.http_tls_mode = http_tls_mode
        self.remoting_tls_mode = remoting_tls_mode
        self.metrics_auth = metrics_auth
        self.interval_s = reload_interval_s
        self.guard = Guard(max_failures_per_minute, failed_auth_delay_s)
        self.accounts: Reloading[Acl] | None = None
        self.tls: Reloading[ServerTls] | None = None
        if accounts_file is not None:
            acl_file = accounts_file
            self.accounts = Reloading("acl", (acl_file,), lambda: Acl.load(acl_file))
        if http_tls_mode != DISABLED or remoting_tls_mode != DISABLED:
            if cert_file is None or key_file is None:
                raise ConfigError("TLS needs tieredTlsCertFile and tieredTlsKeyFile")
            cert, key, ca = cert_file, key_file, client_ca_file
            paths = (cert, key) if ca is None else (cert, key, ca)
            self.tls = Reloading("tls", paths, lambda: ServerTls.load(cert, key, ca))
            self._export_expiry()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_config(cls, cfg: TieredConfig) -> Security:
        """The security ``tieredAcl*``, ``tieredTls*`` and ``tieredHttpMetricsAuth`` ask for.

        Raises:
            ConfigError: a file does not load (named, with the fix).
        """

        def path(value: str) -> Path | None:
            return Path(value) if value.strip() else None

        return cls(
            accounts_file=path(cfg.tiered_acl_file) if cfg.tiered_acl_enable else None,
            cert_file=path(cfg.tiered_tls_cert_file),
            key_file=path(cfg.tiered_tls_key_file),
            client_ca_file=path(cfg.tiered_tls_client_ca_file),
            http_tls_mode=cfg.tiered_http_tls_mode,
            remoting_tls_mode=cfg.tiered_remoting_tls_mode,
            metrics_auth=cfg.tiered_http_metrics_auth,
            max_failures_per_minute=cfg.tiered_acl_max_failures_per_minute,
            failed_auth_delay_s=cfg.tiered_acl_failed_auth_delay_ms / 1000,
            reload_interval_s=cfg.tiered_security_reload_interval_ms / 1000,
        )

    @property
    def acl(self) -> Acl | None:
        """The current accounts (None: no access control)."""
        return None if self.accounts is None else self.accounts.value

    def tls_mode(self, port: str) -> str:
        """``disabled``, ``permissive`` or ``enforcing`` of ``port`` (``http``/``remoting``)."""
        return self.http_tls_mode if port == "http" else self.remoting_tls_mode

    def _export_expiry(self) -> None:
        if self.tls is not None:
            metrics.TLS_CERT_EXPIRY.labels("tls").set(self.tls.value.not_after.timestamp())

    def reload(self) -> None:
        """Look at the files once (what the service does every interval)."""
        if self.accounts is not None:
            self.accounts.check()
        if self.tls is not None:
            self.tls.check()
            self._export_expiry()

    def start(self) -> None:
        if self._thread is not None or (self.accounts is None and self.tls is None):
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tiered-security", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.reload()
            except Exception:  # a bug: logged in full, the last good files stay
                log.exception("reloading the accounts or the certificate failed")

    def stop(self) -> None:
        self._stop.set()
        self.guard.release()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
