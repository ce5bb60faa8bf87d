"""S3 servers for the provider tests: moto over real HTTP (with injectable faults) and Ceph RGW.

``moto_s3`` is one ``ThreadedMotoServer`` on 127.0.0.1, port 0, for the whole session; a small
WSGI layer in front of moto's app answers chosen requests with S3 errors or delays them
(``http_faults``), so retries are tested over the wire. ``ceph_s3`` is a real Ceph RADOS Gateway
booted by ``../shared/tools/ceph-rgw`` in a private directory on free ports: the boot (about
20 s) starts in the background as soon as collection shows a test that needs it, and the gateway
is stopped when the session ends. If it cannot start, every test that needs it fails with the
reason; none is skipped.
"""

from __future__ import annotations

import subprocess
import tempfile
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tiered.providers.testing.servers import CephStartError
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import start_ceph

CEPH_RGW = Path(__file__).resolve().parents[2].parent / "shared" / "tools" / "ceph-rgw"
_ceph: dict[str, object] = {}


def _boot_ceph() -> tuple[S3Endpoint, dict[str, str]]:
    directory = Path(tempfile.mkdtemp(prefix="rmq-tiered-rgw-"))
    _ceph["directory"] = directory
    return start_ceph(CEPH_RGW, directory)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """At the first test of this directory the process runs, start booting Ceph in the
    background if a selected test needs it (under ``make test``'s two xdist workers, only the
    worker that runs these tests boots it)."""
    if "started" in _ceph:
        return
    _ceph["started"] = True
    if any("ceph_s3" in getattr(i, "fixturenames", ()) for i in item.session.items):
        pool = ThreadPoolExecutor(1, thread_name_prefix="ceph-boot")
        _ceph["future"] = pool.submit(_boot_ceph)
        pool.shutdown(wait=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the gateway (in the background: its daemons take a few seconds to exit)."""
    future = _ceph.pop("future", None)
    directory = _ceph.pop("directory", None)
    if not isinstance(future, Future) or not isinstance(directory, Path):
        return
    try:
        _, env = future.result()
        script = f'"{CEPH_RGW}" stop "{directory}"; rm -rf "{directory}"'
    except CephStartError:  # keep the logs the failure message points to
        env = None
        script = f'"{CEPH_RGW}" stop "{directory}"'
    # the shell returns at once; the stop (and clean-up) goes on detached from pytest
    subprocess.run(
        ["/bin/sh", "-c", f"({script}) >/dev/null 2>&1 &"],
        env=env,
        start_new_session=True,
        check=False,
    )


@pytest.fixture(scope="session")
def ceph_s3() -> S3Endpoint:
    """A real Ceph RADOS Gateway on 127.0.0.1; fails (never skips) when it cannot start."""
    future = _ceph.get("future")
    if not isinstance(future, Future):  # pragma: no cover - the first test here starts it
        future = ThreadPoolExecutor(1).submit(_boot_ceph)
        _ceph["future"] = future
    try:
        endpoint, _ = future.result()
    except CephStartError as e:
        pytest.fail(str(e))
    assert isinstance(endpoint, S3Endpoint)
    return endpoint
