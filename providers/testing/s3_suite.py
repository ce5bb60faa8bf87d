"""The conformance suite's S3 side, shared by every provider that talks to an S3 server (the s3
provider, fsspec over s3fs): each test gets the server's shared bucket and a fresh key prefix,
and checks what landed through boto3 (:class:`~.oracle.BotoOracle`).

A test class names its server with a mixin: ``class TestXMoto(OnMoto, XTests)``. The
``moto_s3`` and ``ceph_s3`` fixtures are the test run's (one moto server and one Ceph RGW per
session).
"""

from __future__ import annotations

import uuid

import pytest

from .oracle import BotoOracle
from .servers import S3Endpoint
from .suite import REMOTE_SETTINGS


class S3Fixtures:
    """``endpoint`` (from the server mixin), ``bucket``, ``key_prefix`` and the boto3 oracle."""

    state_machine_settings = REMOTE_SETTINGS

    @pytest.fixture
    def endpoint(self) -> S3Endpoint:
        raise NotImplementedError("mix in OnMoto or OnCeph")

    @pytest.fixture
    def bucket(self, endpoint: S3Endpoint) -> str:
        return endpoint.shared_bucket()

    @pytest.fixture
    def key_prefix(self) -> str:
        return f"tiered/{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def oracle(self, endpoint: S3Endpoint, bucket: str, key_prefix: str) -> BotoOracle:
        return BotoOracle(endpoint.client(), bucket, key_prefix)


class OnMoto:
    """The run's moto server over HTTP."""

    @pytest.fixture
    def endpoint(self, moto_s3: S3Endpoint) -> S3Endpoint:
        return moto_s3


class OnCeph:
    """The run's Ceph RADOS Gateway."""

    @pytest.fixture
    def endpoint(self, ceph_s3: S3Endpoint) -> S3Endpoint:
        return ceph_s3
