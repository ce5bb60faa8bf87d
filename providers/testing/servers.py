"""S3 servers for tests: moto over real HTTP with injectable faults, and a real Ceph RADOS Gateway.

Used by the provider tests' fixtures (``tests/providers/conftest.py``) and by any other test that
needs an S3 endpoint. moto and boto3 are imported only when a server is started.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from tiered.providers.object_store import ObjectStoreOptions

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class S3Endpoint:
    """Where an S3 server listens and how to sign in."""

    url: str
    access_key: str
    secret_key: str
    region: str
    name: str

    def client(self) -> Any:
        """A plain boto3 client (path-style), for oracles and set-up; one per endpoint."""
        return _client(self)

    def shared_bucket(self) -> str:
        """A bucket created once per endpoint and process (tests use their own prefixes)."""
        return _shared_bucket(self)

    def new_bucket(self) -> str:
        """Create a fresh bucket and return its name."""
        bucket = f"rmq-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def options(self) -> ObjectStoreOptions:
        """This endpoint as the providers' S3 client settings (path-style)."""
        return ObjectStoreOptions(
            endpoint=self.url,
            region=self.region,
            access_key=self.access_key,
            secret_key=self.secret_key,
            path_style=True,
        )

    def config_keys(self, bucket: str) -> dict[str, str]:
        """The ``objectStore*`` configuration keys of this endpoint and ``bucket``."""
        return {
            "objectStoreEndpoint": self.url,
            "objectStoreBucket": bucket,
            "objectStoreAccessKey": self.access_key,
            "objectStoreSecretKey": self.secret_key,
            "objectStoreRegion": self.region,
            "objectStorePathStyle": "true",
        }


@functools.cache
def _shared_bucket(endpoint: S3Endpoint) -> str:
    return endpoint.new_bucket()


@functools.cache
def _client(endpoint: S3Endpoint) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint.url,
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
        region_name=endpoint.region,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )


@dataclass
class FaultRule:
    """Answer ``count`` matching requests with ``status``/``code`` (0 = only delay them)."""

    status: int
    code: str
    count: int
    method: str | None = None
    query: str | None = None
    delay_s: float = 0.0
    hits: int = 0


@dataclass(frozen=True)
class SeenRequest:
    """One request as it reached the server: method, path, query and its ``x-amz-*`` headers
    (lower-case names)."""

    method: str
    path: str
    query: str
    headers: dict[str, str]


@dataclass
class HttpFaults:
    """The rules the WSGI layer in front of moto consults, first match wins; and the requests
    it was asked to record (:meth:`watch`), so a test sees what went over the wire."""

    rules: list[FaultRule] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    watches: list[tuple[str, list[SeenRequest]]] = field(default_factory=list)

    def watch(self, path_part: str) -> list[SeenRequest]:
        """Record every request whose path holds ``path_part`` (until :meth:`clear`)."""
        seen: list[SeenRequest] = []
        with self.lock:
            self.watches.append((path_part, seen))
        return seen

    def _record(self, environ: Environ) -> None:
        path = str(environ.get("PATH_INFO", ""))
        with self.lock:
            logs = [seen for part, seen in self.watches if part in path]
        if not logs:
            return
        headers = {
            k[5:].replace("_", "-").lower(): str(v)
            for k, v in environ.items()
            if k.startswith("HTTP_X_AMZ_")
        }
        request = SeenRequest(
            str(environ.get("REQUEST_METHOD", "")),
            path,
            str(environ.get("QUERY_STRING", "")),
            headers,
        )
        for seen in logs:
            seen.append(request)

    def add(
        self,
        status: int = 503,
        code: str = "SlowDown",
        *,
        count: int = 1,
        method: str | None = None,
        query: str | None = None,
        delay_s: float = 0.0,
    ) -> FaultRule:
        """Fail (or delay) the next ``count`` requests with ``method`` and ``query`` in the URL."""
        rule = FaultRule(status, code, count, method, query, delay_s)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.watches.clear()

    def match(self, environ: Environ) -> FaultRule | None:
        with self.lock:
            for rule in self.rules:
                if rule.hits >= rule.count:
                    continue
                if rule.method and environ.get("REQUEST_METHOD") != rule.method:
                    continue
                if rule.query is not None and rule.query not in environ.get("QUERY_STRING", ""):
                    continue
                rule.hits += 1
                return rule
        return None

    def wrap(self, app: WsgiApp) -> WsgiApp:
        def faulty(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            self._record(environ)
            rule = self.match(environ)
            if rule is None:
                return app(environ, start_response)
            if rule.delay_s:
                time.sleep(rule.delay_s)
            if rule.status == 0:
                return app(environ, start_response)
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length:
                environ["wsgi.input"].read(length)
            body = (
                '<?xml version="1.0" encoding="UTF-8"?><Error>'
                f"<Code>{rule.code}</Code><Message>injected by the test</Message>"
                "<RequestId>injected</RequestId></Error>"
            ).encode()
            headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
            start_response(f"{rule.status} Injected", headers)
            return [body]

        return faulty


@contextlib.contextmanager
def running_moto(
    faults: HttpFaults | None = None, account: str = "testing"
) -> Iterator[S3Endpoint]:
    """A started moto server (:func:`moto_server`), as an endpoint signed in as ``account``
    (access and secret key); stopped on exit."""
    server = moto_server(faults or HttpFaults())
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield S3Endpoint(f"http://{host}:{port}", account, account, "us-east-1", "moto")
    finally:
        server.stop()


def moto_server(faults: HttpFaults) -> Any:
    """A ``ThreadedMotoServer`` on 127.0.0.1, port 0, with ``faults`` in front (not started)."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from moto.moto_server.werkzeug_app import create_backend_app
    from werkzeug.serving import make_server

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    class FaultyMotoServer(ThreadedMotoServer):
        """moto's threaded server with the fault layer in front of its app."""

        def _server_entry(self) -> None:
            app = faults.wrap(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=QuietHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return FaultyMotoServer(ip_address="127.0.0.1", port=0, verbose=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


CEPH_KMS_KEY_ID = "testkey-1"
"""The one key of the test gateway's KMS (``rgw_crypt_s3_kms_backend=testing``), for aws:kms."""


def _ceph_args() -> str:
    """Options for the test gateway (``CEPH_ARGS``): SSE-C over its plain-HTTP loopback endpoint
    (``rgw_crypt_require_ssl=false``) and a testing KMS holding :data:`CEPH_KMS_KEY_ID`, so
    encryption at rest is tested against it."""
    key = base64.b64encode(os.urandom(32)).decode()
    args = (
        "--rgw_crypt_require_ssl=false",
        "--rgw_crypt_s3_kms_backend=testing",
        f"--rgw_crypt_s3_kms_encryption_keys={CEPH_KMS_KEY_ID}={key}",
    )
    return " ".join((os.environ.get("CEPH_ARGS", ""), *args)).strip()


class CephStartError(RuntimeError):
    """Raised when the Ceph gateway does not start; the message carries the tool's output."""


def start_ceph(tool: Path, directory: Path) -> tuple[S3Endpoint, dict[str, str]]:
    """Boot a Ceph RADOS Gateway in ``directory`` on free ports (with :func:`_ceph_args`);
    returns it and the tool's env."""
    env = {
        **os.environ,
        "RGW_PORT": str(free_port()),
        "MON_PORT": str(free_port()),
        "CEPH_ARGS": _ceph_args(),
    }
    command = [str(tool), "start", str(directory)]
    try:
        started = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=900, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CephStartError(f"Ceph RGW could not start: {' '.join(command)}: {e}") from e
    exports = dict(re.findall(r"^export (\w+)=(\S*)$", started.stdout, re.MULTILINE))
    if started.returncode != 0 or "RGW_ENDPOINT" not in exports:
        tail = (started.stderr or started.stdout).strip().splitlines()[-15:]
        raise CephStartError(
            f"Ceph RGW did not start ({' '.join(command)} exited {started.returncode}); "
            f"logs in {directory}/log:\n" + "\n".join(tail)
        )
    endpoint = S3Endpoint(
        exports["RGW_ENDPOINT"],
        exports["RGW_ACCESS_KEY"],
        exports["RGW_SECRET_KEY"],
        exports.get("RGW_REGION", "us-east-1"),
        "ceph",
    )
    return endpoint, env


def stop_ceph(tool: Path, directory: Path, env: dict[str, str]) -> None:
    """Stop the daemons started in ``directory`` (by their pids)."""
    subprocess.run(
        [str(tool), "stop", str(directory)], env=env, capture_output=True, timeout=120, check=False
    )
