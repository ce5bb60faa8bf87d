"""Session-wide fixtures: the shared real broker files, the one moto S3 server, the one local Spark
session and the one Spark standalone cluster of a run; and the markers of what a test needs
besides Python (``jvm``, ``spark``, ``node``, ``ceph``, ``prometheus``, ``helm``, ``s3``), given
from where it lives and the fixtures it uses: ``make test-fast`` deselects them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest
from tiered.providers.testing.servers import HttpFaults
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import running_moto

from tiered import metrics
from tiered.testing.spark_cluster import running_spark_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TESTS = Path(__file__).resolve().parent
SHARED = TESTS.parents[1] / "shared"
REAL_DATA = SHARED / "testdata" / "real"

#: what a test needs besides Python and the ``s3``, ``spark`` and ``slow`` of pyproject.toml
MARKERS = {
    "jvm": "starts a Java VM (a real RocketMQ name server and broker, the Java driver, Spark)",
    "node": "runs Node.js (ali-ons, tests/remoting/js)",
    "ceph": "needs a real Ceph RADOS Gateway (../shared/tools/ceph-rgw)",
    "prometheus": "runs Debian's promtool or prometheus (tests/ops)",
    "helm": "the chart and image tests (tests/helm; the Helm v4 engine of helm-python-sdk)",
}
#: the markers of a test that uses the fixture (directly or through other fixtures)
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "rocketmq": ("jvm",),  # tests/realbroker: the name server, brokers and the Java driver
    "spark": ("spark", "jvm"),
    "spark_cluster": ("spark", "jvm"),
    "ceph_s3": ("ceph", "s3"),
    "moto_s3": ("s3",),
    "chart": ("helm",),
}
#: the markers of every test under a directory of tests/
DIRECTORY_MARKS: dict[str, tuple[str, ...]] = {
    "realbroker": ("jvm",),
    "ops": ("prometheus",),  # promtool and prometheus
    "helm": ("helm",),  # the Helm v4 engine (helm-python-sdk), the image's Dockerfile
}
#: a module with this name (tests/remoting/conftest.py's ali-ons runner) runs Node.js
NODE_RUNNER = "ali_ons"
#: under ``--dist loadgroup``, the tests whose node ids start so run on one worker, the rest on
#: the other
WORKER_GROUP = "tests/realbroker/"


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: xdist's scope scheduling with two scopes, the tests under
    :data:`WORKER_GROUP` and the others (each scope runs whole on one worker, in order). The
    ``xdist_group`` mark cannot say it: pytest-xdist 3.8 groups by a suffix of ``item._nodeid``,
    which pytest 9.2 no longer reads."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TwoGroups(LoadScopeScheduling):  # type: ignore[misc]  # (xdist has no types)
        def _split_scope(self, nodeid: str) -> str:
            return WORKER_GROUP if nodeid.startswith(WORKER_GROUP) else "rest"

    return TwoGroups(config, log)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what it needs: by fixture, by directory, Spark (marked by hand or
    by fixture) as a JVM, and a module that runs ali-ons as Node.js."""
    for item in items:
        names: set[str] = set()
        for fixture in getattr(item, "fixturenames", ()):
            names.update(FIXTURE_MARKS.get(fixture, ()))
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if len(parts) > 1:
            names.update(DIRECTORY_MARKS.get(parts[0], ()))
        if item.get_closest_marker("spark"):
            names.add("jvm")
        module = getattr(item, "module", None)
        if module is not None and callable(getattr(module, NODE_RUNNER, None)):
            names.add("node")
        for name in sorted(names - {m.name for m in item.iter_markers()}):
            item.add_marker(name)


@pytest.fixture(autouse=True)
def _queue_metrics() -> None:
    """In-process tests read the per-queue metric families one series per queue (upstream's
    labels, ``tieredMetricsDetail=queue``). ``run`` and ``serve`` set their process's level from
    their config, so a test that runs one in-process would change it for the tests after it:
    every test starts at ``queue``."""
    metrics.set_detail("queue")


@pytest.fixture(scope="session")
def real_data() -> Path:
    """``../shared/testdata/real`` beside the repo; its absence is a failure, never a skip."""
    if not REAL_DATA.is_dir():
        pytest.fail(f"real broker files missing: {REAL_DATA} (clone the repo next to ../shared)")
    return REAL_DATA


@pytest.fixture(scope="session")
def http_faults_session() -> HttpFaults:
    """The fault layer in front of the session's moto server (empty unless a test fills it)."""
    return HttpFaults()


@pytest.fixture
def http_faults(http_faults_session: HttpFaults) -> Iterator[HttpFaults]:
    """Inject S3 errors into moto's answers for one test."""
    http_faults_session.clear()
    yield http_faults_session
    http_faults_session.clear()


@pytest.fixture(scope="session")
def moto_s3(http_faults_session: HttpFaults) -> Iterator[S3Endpoint]:
    """One moto S3 server over HTTP on 127.0.0.1 (port 0), for the whole test run."""
    with running_moto(http_faults_session) as endpoint:
        yield endpoint


@pytest.fixture
def s3_keys(moto_s3: S3Endpoint) -> dict[str, str]:
    """Configuration keys of an S3 backend in a fresh bucket of the session's moto server."""
    return moto_s3.config_keys(moto_s3.new_bucket())


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A real ``local[2]`` Spark session shared by every Spark test of the run."""
    from tiered.jobs.session import local_spark_session

    session = local_spark_session("local[2]", app_name="rmq-tiered-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a real standalone master with one worker (1 core, 1 GiB),
    shared by the run's cluster tests."""
    with running_spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as url:
        yield url
