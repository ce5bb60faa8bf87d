"""Session-wide fixtures: the shared real broker files, the one moto S3 server, the one local Spark
session and the one Spark standalone cluster of a run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tiered.providers.testing.servers import HttpFaults
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import running_moto

from tiered import metrics
from tiered.testing.spark_cluster import running_spark_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REAL_DATA = SHARED / "testdata" / "real"


@pytest.fixture(autouse=True, scope="session")
def _queue_metrics() -> None:
    """In-process tests read the per-queue metric families one series per queue (upstream's
    labels, ``tieredMetricsDetail=queue``); ``run`` sets its process's level from its config."""
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
