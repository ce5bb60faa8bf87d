"""The s3 provider passes the conformance suite over HTTP against moto and a real Ceph RGW.

Beyond the suite: retries of injected throttling, 5xx and timeouts (over the wire, answered by the
fault layer in front of moto), the error table, multipart uploads and server-side part copies,
credentials from the AWS chain, and a missing boto3.
"""

from __future__ import annotations

import io
import pickle
import sys
import uuid
from collections import Counter
from typing import ClassVar

import pytest
from tiered.providers import S3Provider
from tiered.providers.chunks import chunk_name
from tiered.providers.testing import BotoOracle
from tiered.providers.testing import ChunkedProviderTests
from tiered.providers.testing import blob
from tiered.providers.testing import fill
from tiered.providers.testing import requests_of
from tiered.providers.testing import seg
from tiered.providers.testing.s3_suite import OnCeph
from tiered.providers.testing.s3_suite import OnMoto
from tiered.providers.testing.s3_suite import S3Fixtures
from tiered.providers.testing.servers import HttpFaults
from tiered.providers.testing.servers import S3Endpoint

from tiered.errors import AccessDeniedError
from tiered.errors import ConfigError
from tiered.errors import InvalidKeyError
from tiered.errors import MissingDependencyError
from tiered.errors import PositionMismatchError
from tiered.errors import ProviderError
from tiered.errors import ProviderTimeoutError
from tiered.errors import ProviderUnavailableError
from tiered.errors import SegmentExistsError
from tiered.errors import SegmentNotFoundError
from tiered.errors import ThrottledError

MIB = 1 << 20


def make_provider(
    endpoint: S3Endpoint, bucket: str, key_prefix: str, **kwargs: object
) -> S3Provider:
    options: dict[str, object] = {
        "prefix": key_prefix,
        "endpoint": endpoint.url,
        "region": endpoint.region,
        "access_key": endpoint.access_key,
        "secret_key": endpoint.secret_key,
        "path_style": True,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        **kwargs,
    }
    return S3Provider(bucket, **options)  # type: ignore[arg-type]


class S3ProviderTests(S3Fixtures, ChunkedProviderTests):
    """The suite on one S3 server; every test gets its own bucket and prefix."""

    seal_layouts: ClassVar[tuple[tuple[int, ...], ...]] = (
        (4096,),
        (3000, 1, 5000),
        # a part copied server-side (UploadPartCopy), then small and large chunks re-uploaded
        (5 * MIB + 7, 10, 5 * MIB),
    )

    @pytest.fixture
    def provider(self, endpoint: S3Endpoint, bucket: str, key_prefix: str) -> S3Provider:
        return make_provider(endpoint, bucket, key_prefix)

    def test_seal_copies_big_chunks_server_side(
        self, provider: S3Provider, oracle: BotoOracle
    ) -> None:
        key = seg(90)
        content = fill(provider, key, (6 * MIB, 6 * MIB, 100))
        ops = Counter(requests_of(provider, lambda: provider.seal(key)))
        assert ops["MPU_PART_COPY"] == 2
        assert ops["MPU_PART"] == 1
        assert ops["GET"] == 1
        assert oracle.content(key) == content
        assert oracle.multipart_uploads() == []

    def test_seal_of_small_chunks_is_one_upload(self, provider: S3Provider) -> None:
        key = seg(91)
        fill(provider, key, (1000,) * 5)
        ops = Counter(requests_of(provider, lambda: provider.seal(key)))
        assert ops == {"LIST": 1, "GET": 5, "PUT": 1, "DELETE": 2}

    def test_large_put_is_a_multipart_upload(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str, oracle: BotoOracle
    ) -> None:
        provider = make_provider(endpoint, bucket, key_prefix, part_size_bytes=5 * MIB)
        data = blob(16 * MIB + 3, 9)
        key = seg(92)
        ops = Counter(requests_of(provider, lambda: provider.put(key, io.BytesIO(data))))
        assert ops["MPU_PART"] == 4
        assert ops["MPU_COMPLETE"] == 1
        assert oracle.content(key) == data
        ops = Counter(requests_of(provider, lambda: provider.put(key, data, overwrite=True)))
        assert ops["MPU_PART"] == 4
        assert provider.read(key, 16 * MIB, 10) == data[16 * MIB :]

    def test_missing_bucket_is_not_a_missing_segment(self, endpoint: S3Endpoint) -> None:
        provider = make_provider(endpoint, f"absent-{uuid.uuid4().hex[:8]}", "x")
        with pytest.raises(ProviderError, match="objectStoreBucket") as info:
            provider.size(seg(0))
        assert not isinstance(info.value, SegmentNotFoundError)
        assert not info.value.retriable

    def test_ensure_bucket(self, endpoint: S3Endpoint) -> None:
        provider = make_provider(endpoint, f"made-{uuid.uuid4().hex[:8]}", "x")
        provider.ensure_bucket()
        provider.ensure_bucket()
        provider.append(seg(0), b"ok", 0)
        assert provider.read(seg(0), 0, 2) == b"ok"

    def test_own_appends_cost_one_put_each(self, provider: S3Provider, oracle: BotoOracle) -> None:
        key = seg(93)
        first = Counter(requests_of(provider, lambda: provider.append(key, b"a" * 100, 0)))
        assert first == {"LIST": 1, "PUT": 1}  # a key this instance has not written: listed
        later = Counter(
            requests_of(
                provider, lambda: [provider.append(key, b"b" * 10, 100 + 10 * i) for i in range(5)]
            )
        )
        assert later == {"PUT": 5}
        assert Counter(requests_of(provider, lambda: provider.size(key))) == {}
        reads = Counter(requests_of(provider, lambda: provider.read(key, 95, 15)))
        assert reads == {"GET": 2}  # straight to the two chunks, no failed GET, no LIST
        content = b"a" * 100 + b"b" * 50
        assert oracle.content(key) == content
        # (not to the end: a read to the end opens read-ahead windows, which a read after the
        # seal would be answered from)
        assert provider.read(key, 0, 149) == content[:149]
        provider.seal(key)
        assert Counter(requests_of(provider, lambda: provider.read(key, 0, 150))) == {"GET": 1}

    def test_replacing_an_own_object_costs_one_put(
        self, provider: S3Provider, oracle: BotoOracle
    ) -> None:
        key = "cluster/broker/config/tieredStoreMetadata.json"
        assert Counter(requests_of(provider, lambda: provider.put(key, b"v1"))) == {
            "LIST": 1,
            "PUT": 1,
        }
        again = Counter(requests_of(provider, lambda: provider.put(key, b"v2!", overwrite=True)))
        assert again == {"PUT": 1}
        assert provider.size(key) == 3 and oracle.content(key) == b"v2!"
        with pytest.raises(SegmentExistsError):
            provider.put(key, b"v3")  # without overwrite the listing decides, as before

    def test_another_writer_is_never_overwritten(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str, oracle: BotoOracle
    ) -> None:
        """Two instances append to one key: the stale one's conditional PUT fails, it lists the
        key and reports the real size; nothing the other wrote is replaced."""
        key = seg(94)
        mine = make_provider(endpoint, bucket, key_prefix)
        other = make_provider(endpoint, bucket, key_prefix)
        mine.append(key, b"1" * 10, 0)
        assert other.append(key, b"2" * 5, 10) == 15  # other lists: it sees 10 bytes
        with pytest.raises(PositionMismatchError) as info:
            mine.append(key, b"3" * 7, 10)  # mine still believes 10 bytes
        assert (info.value.expected, info.value.given) == (15, 10)
        assert oracle.content(key) == b"1" * 10 + b"2" * 5
        assert mine.append(key, b"3" * 7, 15) == 22  # after the mismatch it knows the truth
        assert other.read(key, 0, 22) == b"1" * 10 + b"2" * 5 + b"3" * 7

    def test_a_key_said_unsealed_is_read_chunk_by_chunk(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str
    ) -> None:
        """A reader that knows nothing of an unsealed segment (a sidecar restarted after a clean
        stop) tries the sealed object first: a failed GET, a LIST, the GET. Told by the records
        that the key is unsealed, it GETs its chunks by name, the first at 0, each one's size
        telling where the next begins: no LIST, no failed GET. A read to the end the records
        give is held by the read-ahead, chunk by chunk, for the reads of its pieces that
        follow."""
        key = seg(96)
        writer = make_provider(endpoint, bucket, key_prefix)
        writer.append(key, b"c" * 10, 0)
        writer.append(key, b"d" * 5, 10)
        guessing = make_provider(endpoint, bucket, key_prefix)
        assert Counter(requests_of(guessing, lambda: guessing.read(key, 2, 3))) == {
            "GET": 2,
            "LIST": 1,
        }
        told = make_provider(endpoint, bucket, key_prefix)
        told.expect_unsealed(key, 15)
        assert Counter(requests_of(told, lambda: told.read(key, 2, 3))) == {"GET": 1}
        across = Counter(requests_of(told, lambda: told.read(key, 8, 6)))
        assert across == {"GET": 2}  # the rest of the first chunk, then the second by name
        assert told.read(key, 8, 6) == b"cc" + b"d" * 4
        whole = make_provider(endpoint, bucket, key_prefix)
        whole.expect_unsealed(key, 15)
        got = Counter(requests_of(whole, lambda: whole.read(key, 0, 15)))
        assert got == {"GET": 2}, got  # to the end: held, for its pieces
        assert Counter(requests_of(whole, lambda: whole.read(key, 3, 9))) == {}
        assert whole.read(key, 3, 9) == b"c" * 7 + b"dd"
        writer.seal(key)
        late = make_provider(endpoint, bucket, key_prefix)
        late.expect_unsealed(key, 15)  # a hint a seal has overtaken: the listing shows the object
        assert late.read(key, 0, 15) == b"c" * 10 + b"d" * 5
        assert late.read(key, 4, 9) == b"c" * 6 + b"d" * 3

    def test_a_pickled_copy_trusts_nothing(self, provider: S3Provider, oracle: BotoOracle) -> None:
        key = seg(95)
        provider.append(key, b"x" * 10, 0)
        copy = pickle.loads(pickle.dumps(provider))
        assert Counter(requests_of(copy, lambda: copy.size(key))) == {"LIST": 1}
        oracle.client.delete_object(Bucket=oracle.bucket, Key=oracle.root + chunk_name(key, 0))
        with pytest.raises(SegmentNotFoundError):
            copy.size(key)


@pytest.mark.s3
class TestS3ProviderMoto(OnMoto, S3ProviderTests):
    pass


@pytest.mark.s3
class TestS3ProviderCeph(OnCeph, S3ProviderTests):
    # the multipart crash points run on moto; here the copy path runs once, uninterrupted
    seal_layouts = ((4096,), (3000, 1, 5000))

    def test_wrong_credentials_are_access_denied(self, endpoint: S3Endpoint, bucket: str) -> None:
        provider = make_provider(endpoint, bucket, "x", secret_key="wrong-secret")
        with pytest.raises(AccessDeniedError, match="objectStoreSecretKey") as info:
            provider.size(seg(0))
        assert isinstance(info.value, PermissionError)

    def test_credentials_from_the_environment(
        self, endpoint: S3Endpoint, bucket: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", endpoint.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", endpoint.secret_key)
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        provider = make_provider(endpoint, bucket, "env", access_key=None, secret_key=None)
        provider.append(seg(0), b"chain", 0)
        assert provider.read(seg(0), 0, 5) == b"chain"


# --- retries over the wire (moto with the fault layer) -------------------------------------------


@pytest.fixture
def moto_provider(moto_s3: S3Endpoint) -> S3Provider:
    """A provider on moto behind the fault layer, with the default timeouts (a tight one would
    time out, and send again, a request a busy machine answered late)."""
    return make_provider(moto_s3, moto_s3.new_bucket(), "faults")


@pytest.mark.s3
def test_throttling_is_retried(moto_provider: S3Provider, http_faults: HttpFaults) -> None:
    rule = http_faults.add(503, "SlowDown", count=2, method="PUT")
    ops = requests_of(moto_provider, lambda: moto_provider.append(seg(0), b"abc", 0))
    assert rule.hits == 2
    assert ops.count("PUT") == 3
    assert moto_provider.read(seg(0), 0, 3) == b"abc"


@pytest.mark.s3
def test_server_errors_are_retried(moto_provider: S3Provider, http_faults: HttpFaults) -> None:
    moto_provider.append(seg(0), b"abc", 0)
    moto_provider.seal(seg(0))
    rule = http_faults.add(500, "InternalError", count=3, method="GET")
    assert moto_provider.read(seg(0), 1, 2) == b"bc"
    assert rule.hits == 3


@pytest.mark.s3
def test_exhausted_retries_raise_a_retriable_error(
    moto_provider: S3Provider, http_faults: HttpFaults
) -> None:
    http_faults.add(503, "SlowDown", count=100)
    with pytest.raises(ThrottledError) as info:
        moto_provider.size(seg(0))
    assert info.value.retriable
    assert isinstance(info.value, ConnectionError)
    assert type(info.value.__cause__).__name__ == "ClientError"
    http_faults.clear()
    http_faults.add(502, "BadGateway", count=100)
    with pytest.raises(ProviderUnavailableError) as unavailable:
        moto_provider.size(seg(0))
    assert unavailable.value.retriable


@pytest.mark.s3
def test_a_server_without_conditional_puts_falls_back_to_listing(
    moto_provider: S3Provider, http_faults: HttpFaults
) -> None:
    key = seg(7)
    moto_provider.append(key, b"abc", 0)
    rule = http_faults.add(501, "NotImplemented", count=1, method="PUT")
    assert moto_provider.append(key, b"def", 3) == 6
    assert rule.hits == 1  # 501 is final: not retried
    ops = Counter(requests_of(moto_provider, lambda: moto_provider.append(key, b"ghi", 6)))
    assert ops == {"LIST": 1, "PUT": 1}  # unconditional from now on
    assert moto_provider.read(key, 0, 9) == b"abcdefghi"


@pytest.mark.s3
def test_timeouts_are_retried(moto_provider: S3Provider, http_faults: HttpFaults) -> None:
    moto_provider.append(seg(0), b"abc", 0)
    endpoint = S3Endpoint(moto_provider.endpoint or "", "testing", "testing", "us-east-1", "moto")
    tight = make_provider(endpoint, moto_provider.bucket, "faults", read_timeout_s=0.5)
    rule = http_faults.add(0, "", count=1, method="GET", delay_s=1.0)
    fresh = pickle.loads(pickle.dumps(tight))  # lists: it has not written the key
    assert fresh.size(seg(0)) == 3
    assert rule.hits == 1
    http_faults.add(0, "", count=100, method="GET", delay_s=0.7)
    slow = make_provider(
        endpoint, moto_provider.bucket, "faults", read_timeout_s=0.3, max_attempts=2
    )
    with pytest.raises(ProviderTimeoutError) as info:
        slow.size(seg(0))
    assert info.value.retriable


@pytest.mark.s3
def test_a_failed_seal_aborts_its_upload_and_stays_readable(
    moto_s3: S3Endpoint, http_faults: HttpFaults
) -> None:
    bucket = moto_s3.new_bucket()
    provider = make_provider(moto_s3, bucket, "abort", max_attempts=2)
    oracle = BotoOracle(moto_s3.client(), bucket, "abort")
    key = seg(0)
    content = fill(provider, key, (6 * MIB, 10, 6 * MIB))
    http_faults.add(500, "InternalError", count=2, method="POST", query="uploadId")
    with pytest.raises(ProviderUnavailableError):
        provider.seal(key)
    assert oracle.multipart_uploads() == []
    assert provider.read(key, 0, len(content)) == content
    provider.seal(key)
    assert oracle.names_of(key) == {key}


# --- configuration and errors without a server ---------------------------------------------------


def test_bad_settings_name_the_key() -> None:
    with pytest.raises(ConfigError, match="objectStoreBucket"):
        S3Provider("")
    with pytest.raises(ConfigError, match="objectStoreSecretKey"):
        S3Provider("b", access_key="AK")
    with pytest.raises(ConfigError, match="5 MiB"):
        S3Provider("b", part_size_bytes=MIB)
    with pytest.raises(InvalidKeyError):
        S3Provider("b", prefix="../x")


def test_the_secret_never_shows() -> None:
    provider = S3Provider("b", access_key="AK", secret_key="s3cr3t-value")
    assert "s3cr3t-value" not in repr(provider)


def test_keys_longer_than_s3_allows() -> None:
    provider = S3Provider("b", prefix="/".join(["p" * 200] * 4))
    with pytest.raises(InvalidKeyError, match="1024"):
        provider.size("k" * 250 + "/" + "k" * 100)


def test_missing_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    provider = S3Provider("bucket")
    with pytest.raises(MissingDependencyError, match=r"rocketmq-tiered\[s3\]"):
        provider.size(seg(0))


@pytest.mark.s3
def test_a_lost_complete_response_is_recognised(
    moto_s3: S3Endpoint, http_faults: HttpFaults
) -> None:
    """The first CompleteMultipartUpload lands but times out; the retry finds it done."""
    bucket = moto_s3.new_bucket()
    provider = make_provider(
        moto_s3, bucket, "lost", read_timeout_s=1.0, max_attempts=3, part_size_bytes=5 * MIB
    )
    data = blob(11 * MIB, 4)
    rule = http_faults.add(0, "", count=2, method="POST", query="uploadId", delay_s=1.5)
    ops = requests_of(provider, lambda: provider.put(seg(0), data))
    assert rule.hits == 2
    assert ops.count("MPU_COMPLETE") == 3
    assert provider.read(seg(0), 0, len(data)) == data
    assert BotoOracle(moto_s3.client(), bucket, "lost").multipart_uploads() == []
