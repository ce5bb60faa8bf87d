"""S3 servers for the provider tests: moto over real HTTP (with injectable faults) and Ceph RGW.

``moto_s3`` is one ``ThreadedMotoServer`` on 127.0.0.1, port 0, for the whole session; a small
WSGI layer in front of moto's app answers chosen requests with S3 errors or delays them
(``http_faults``), so retries are tested over the wire. ``ceph_s3`` boots a real Ceph RADOS
Gateway with ``../shared/tools/ceph-rgw`` (about 20 s) in a private directory on free ports and
stops it at the end; if it cannot start, every test that needs it fails with the reason.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiered.providers.testing.servers import (
    CephStartError,
    HttpFaults,
    S3Endpoint,
    moto_server,
    start_ceph,
    stop_ceph,
)

CEPH_RGW = Path(__file__).resolve().parents[2].parent / "shared" / "tools" / "ceph-rgw"


@pytest.fixture(scope="session")
def http_faults_session() -> HttpFaults:
    return HttpFaults()


@pytest.fixture
def http_faults(http_faults_session: HttpFaults) -> Iterator[HttpFaults]:
    """Inject S3 errors into moto's answers for one test."""
    http_faults_session.clear()
    yield http_faults_session
    http_faults_session.clear()


@pytest.fixture(scope="session")
def moto_s3(http_faults_session: HttpFaults) -> Iterator[S3Endpoint]:
    """One moto S3 server over HTTP on 127.0.0.1 (port 0), for the whole session."""
    server = moto_server(http_faults_session)
    server.start()
    host, port = server.get_host_and_port()
    yield S3Endpoint(f"http://{host}:{port}", "testing", "testing", "us-east-1", "moto")
    server.stop()


@pytest.fixture(scope="session")
def ceph_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """A real Ceph RADOS Gateway on 127.0.0.1; fails (never skips) when it cannot start."""
    directory = tmp_path_factory.mktemp("ceph-rgw")
    try:
        endpoint, env = start_ceph(CEPH_RGW, directory)
    except CephStartError as e:
        pytest.fail(str(e))
    try:
        yield endpoint
    finally:
        stop_ceph(CEPH_RGW, directory, env)
        shutil.rmtree(directory, ignore_errors=True)
