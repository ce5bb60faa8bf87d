"""Encryption at rest on S3 (``objectStoreServerSideEncryption``, ``objectStoreKmsKeyId``,
``objectStoreSseCustomerKeyFile``): the conformance suite and a real offload with each mode, every
object checked after each test, and a wrong SSE-C key failing clearly.

What the servers enforce: moto records SSE-S3/SSE-KMS (its HEAD shows them) but ignores SSE-C
altogether (it stores no key and serves any GET), so there the wire is the oracle: the fault layer
in front of moto records every request's headers. Ceph RGW 16 (started with SSE-C allowed over
HTTP and a testing KMS, :func:`~tiered.providers.testing.servers.start_ceph`) enforces SSE-C on
every GET, HEAD and copy, answers a wrong key with 400, and implements aws:kms; it ignores
AES256 (stores the object in clear, confirms nothing), which the provider reports.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import pickle
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest
from botocore.exceptions import ClientError
from tiered.providers import S3Provider
from tiered.providers import build_provider
from tiered.providers.s3_encryption import KEY_FILE
from tiered.providers.s3_encryption import S3Encryption
from tiered.providers.testing import BotoOracle
from tiered.providers.testing import ChunkedProviderTests
from tiered.providers.testing import fill
from tiered.providers.testing import requests_of
from tiered.providers.testing import seg
from tiered.providers.testing.s3_suite import OnCeph
from tiered.providers.testing.s3_suite import OnMoto
from tiered.providers.testing.s3_suite import S3Fixtures
from tiered.providers.testing.servers import CEPH_KMS_KEY_ID
from tiered.providers.testing.servers import HttpFaults
from tiered.providers.testing.servers import S3Endpoint
from tiered.providers.testing.servers import SeenRequest

from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.errors import AccessDeniedError
from tiered.errors import ConfigError
from tiered.process import logs
from tiered.read.fetcher import GetStatus
from tiered.testing.sample_tier import SMALL_SEGMENTS
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec

MIB = 1 << 20
KEY = hashlib.sha256(b"rocketmq-tiered SSE-C test key").digest()
OTHER_KEY = hashlib.sha256(b"another SSE-C key").digest()
MODES = ("AES256", "aws:kms", "SSE-C")
MOTO_KMS_KEY = "alias/rocketmq-tiered"

# what carries which headers: S3's request kinds, as the fault layer sees them
CREATES = frozenset({"PutObject", "CreateMultipartUpload", "CopyObject"})
CUSTOMER = CREATES | {"UploadPart", "UploadPartCopy", "GetObject", "HeadObject"}
COPIES = frozenset({"CopyObject", "UploadPartCopy"})
SSE_HEADER = "x-amz-server-side-encryption"
COPY_SOURCE_HEADER = "x-amz-copy-source-server-side-encryption"


def make_provider(endpoint: S3Endpoint, bucket: str, key_prefix: str, **kwargs: Any) -> S3Provider:
    """A provider on ``endpoint`` (path-style, quick retries); ``kwargs`` override."""
    options: dict[str, Any] = {
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
    return S3Provider(bucket, **options)


def encryption_for(
    mode: str, endpoint: S3Endpoint, key_file: str = "/keys/sse-c.key"
) -> S3Encryption:
    """The provider's setting for ``mode`` on ``endpoint`` (Ceph's test KMS has its own key)."""
    if mode == "SSE-C":
        return S3Encryption(customer_key=KEY, key_file=key_file)
    if mode == "aws:kms":
        return S3Encryption("aws:kms", CEPH_KMS_KEY_ID if endpoint.name == "ceph" else MOTO_KMS_KEY)
    return S3Encryption(mode)


def write_key(path: Path, key: bytes = KEY) -> Path:
    path.write_text(base64.b64encode(key).decode() + "\n", encoding="ascii")
    path.chmod(0o600)
    return path


def request_kind(request: SeenRequest) -> str:
    """Which S3 operation a request is (``Bucket`` for one without an object key)."""
    query, copy = request.query, "x-amz-copy-source" in request.headers
    if "/" not in request.path.strip("/"):
        return "Bucket"  # LIST, DeleteObjects, CreateBucket
    if request.method == "PUT":
        if "partNumber=" in query:
            return "UploadPartCopy" if copy else "UploadPart"
        return "CopyObject" if copy else "PutObject"
    if request.method == "POST":
        return "CompleteMultipartUpload" if "uploadId=" in query else "CreateMultipartUpload"
    if request.method == "DELETE":
        return "AbortMultipartUpload" if "uploadId=" in query else "DeleteObject"
    return {"GET": "GetObject", "HEAD": "HeadObject"}[request.method]


def check_wire(seen: list[SeenRequest], encryption: S3Encryption) -> Counter[str]:
    """Every request carried exactly the encryption headers its kind needs (and no other
    request any); returns the kinds seen."""
    kinds: Counter[str] = Counter()
    key_b64 = base64.b64encode(encryption.customer_key or b"").decode()
    for request in seen:
        kind = request_kind(request)
        kinds[kind] += 1
        sse = {k: v for k, v in request.headers.items() if k.startswith(SSE_HEADER)}
        source = {k: v for k, v in request.headers.items() if k.startswith(COPY_SOURCE_HEADER)}
        want: dict[str, str] = {}
        want_source: dict[str, str] = {}
        if encryption.customer:
            customer = {
                f"{SSE_HEADER}-customer-algorithm": "AES256",
                f"{SSE_HEADER}-customer-key": key_b64,
                f"{SSE_HEADER}-customer-key-md5": encryption.key_md5,
            }
            want = customer if kind in CUSTOMER else {}
            if kind in COPIES:
                want_source = {
                    k.replace(SSE_HEADER, COPY_SOURCE_HEADER): v for k, v in customer.items()
                }
        elif kind in CREATES:
            want = {SSE_HEADER: encryption.mode}
            if encryption.kms_key_id:
                want[f"{SSE_HEADER}-aws-kms-key-id"] = encryption.kms_key_id
        assert (sse, source) == (want, want_source), (kind, request.path, request.query)
    return kinds


def check_objects(oracle: BotoOracle, encryption: S3Encryption, endpoint: S3Endpoint) -> int:
    """HEAD every object below the oracle's prefix: encrypted as asked (moto keeps no SSE-C:
    there its HEAD only answers). Returns how many."""
    names = oracle.names()
    for name in names:
        head = oracle.head(name)
        if encryption.customer:
            if endpoint.name != "moto":
                assert head.get("SSECustomerAlgorithm") == "AES256", name
                assert head.get("SSECustomerKeyMD5") == encryption.key_md5, name
            continue
        assert head.get("ServerSideEncryption") == encryption.mode, (name, head)
        if encryption.kms_key_id:
            assert head.get("SSEKMSKeyId") == encryption.kms_key_id, (name, head)
    return len(names)


# --- the conformance suite with each mode ---------------------------------------------------------


class EncryptedS3Tests(S3Fixtures, ChunkedProviderTests):
    """The suite with encryption on; after each test every object below its prefix is checked
    (HEAD), and on moto every request it sent (the wire)."""

    @pytest.fixture
    def mode(self) -> str:
        raise NotImplementedError("parametrise `mode` in the server's class")

    @pytest.fixture
    def encryption(self, mode: str, endpoint: S3Endpoint) -> S3Encryption:
        return encryption_for(mode, endpoint)

    @pytest.fixture
    def provider(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str, encryption: S3Encryption
    ) -> S3Provider:
        return make_provider(endpoint, bucket, key_prefix, encryption=encryption)

    @pytest.fixture
    def oracle(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str, encryption: S3Encryption
    ) -> BotoOracle:
        return BotoOracle(
            endpoint.client(),
            bucket,
            key_prefix,
            read_args=encryption.on_read(),
            write_args=encryption.on_create(),
        )

    @pytest.fixture(autouse=True)
    def _all_encrypted(
        self,
        endpoint: S3Endpoint,
        encryption: S3Encryption,
        oracle: BotoOracle,
        key_prefix: str,
        http_faults: HttpFaults,
    ) -> Iterator[None]:
        seen = http_faults.watch(key_prefix)
        yield
        check_objects(oracle, encryption, endpoint)
        if endpoint.name == "moto":
            check_wire(seen, encryption)

    def test_seal_copies_big_chunks_server_side(
        self,
        provider: S3Provider,
        oracle: BotoOracle,
        encryption: S3Encryption,
        http_faults: HttpFaults,
        key_prefix: str,
    ) -> None:
        """UploadPartCopy of an encrypted chunk into an encrypted multipart upload."""
        seen = http_faults.watch(key_prefix)
        key = seg(90)
        content = fill(provider, key, (5 * MIB + 1, 100))
        ops = Counter(requests_of(provider, lambda: provider.seal(key)))
        assert ops["MPU_PART_COPY"] == 1
        assert oracle.content(key) == content
        assert provider.read(key, 5 * MIB - 2, 10) == content[5 * MIB - 2 : 5 * MIB + 8]
        if seen:  # moto: the copy carried the source's key (SSE-C) and the upload's setting
            kinds = check_wire(seen, encryption)
            assert kinds["UploadPartCopy"] == 1 and kinds["CreateMultipartUpload"] == 1

    def test_large_put_is_an_encrypted_multipart_upload(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str, encryption: S3Encryption
    ) -> None:
        provider = make_provider(
            endpoint, bucket, key_prefix, encryption=encryption, part_size_bytes=5 * MIB
        )
        data = bytes(range(256)) * (5 * MIB // 256) + b"tail"
        ops = Counter(requests_of(provider, lambda: provider.put(seg(91), data)))
        assert (ops["MPU_CREATE"], ops["MPU_PART"]) == (1, 2)
        assert provider.read(seg(91), 5 * MIB - 3, 10) == data[5 * MIB - 3 :]


@pytest.mark.s3
class TestEncryptedMoto(OnMoto, EncryptedS3Tests):
    seal_layouts: ClassVar[tuple[tuple[int, ...], ...]] = ((4096,), (3000, 1, 5000))

    @pytest.fixture(params=MODES)
    def mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)


@pytest.mark.s3
class TestEncryptedCeph(OnCeph, EncryptedS3Tests):
    """SSE-C and aws:kms (RGW 16 ignores AES256: ``test_unconfirmed_encryption_is_reported``)."""

    seal_layouts: ClassVar[tuple[tuple[int, ...], ...]] = ((4096,), (3000, 1, 5000))

    @pytest.fixture(params=("SSE-C", "aws:kms"))
    def mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def provider(
        self, endpoint: S3Endpoint, bucket: str, key_prefix: str, encryption: S3Encryption
    ) -> S3Provider:
        """A provider that has sealed (and deleted) a one-chunk segment: RGW refused its
        CopyObject once, so every seal of the test sends the same requests (the crash-point
        sweep counts them on a first seal)."""
        provider = make_provider(endpoint, bucket, key_prefix, encryption=encryption)
        provider.append(seg(99), b"learn", 0)
        provider.seal(seg(99))
        provider.delete(seg(99))
        return provider


# --- a wrong SSE-C key ---------------------------------------------------------------------------


@pytest.mark.s3
def test_a_wrong_sse_c_key_is_access_denied_on_ceph(ceph_s3: S3Endpoint, tmp_path: Path) -> None:
    """RGW refuses the other key (400 InvalidArgument): the error names the key file setting."""
    bucket = ceph_s3.shared_bucket()
    writer = make_provider(
        ceph_s3, bucket, "wrong-key", encryption=encryption_for("SSE-C", ceph_s3)
    )
    fill(writer, seg(1), (300, 200))
    writer.seal(seg(1))
    fill(writer, seg(2), (100,))  # unsealed: chunk objects
    key_file = str(write_key(tmp_path / "other.key", OTHER_KEY))
    other = S3Encryption.from_settings(key_file=key_file)
    reader = make_provider(ceph_s3, bucket, "wrong-key", encryption=other, read_ahead_bytes=0)
    for key in (seg(1), seg(2)):
        with pytest.raises(AccessDeniedError) as info:
            reader.read(key, 0, 10)
        message = str(info.value)
        assert KEY_FILE in message and key_file in message and "another SSE-C key" in message
        assert base64.b64encode(OTHER_KEY).decode() not in message
        assert not info.value.retriable and isinstance(info.value, PermissionError)
    plain = make_provider(ceph_s3, bucket, "wrong-key", read_ahead_bytes=0)
    with pytest.raises(AccessDeniedError, match=f"written with SSE-C: set {KEY_FILE} to the key"):
        plain.read(seg(1), 0, 10)
    assert len(writer.read(seg(1), 0, 500)) == 500  # the right key still reads


@pytest.mark.s3
def test_a_refused_sse_c_read_maps_to_access_denied(
    moto_s3: S3Endpoint, http_faults: HttpFaults
) -> None:
    """moto checks no key; AWS answers a wrong one with 403 AccessDenied (injected here)."""
    provider = make_provider(
        moto_s3, moto_s3.shared_bucket(), "refused", encryption=encryption_for("SSE-C", moto_s3)
    )
    provider.append(seg(0), b"secret bytes", 0)
    provider.seal(seg(0))
    http_faults.add(403, "AccessDenied", method="GET")
    with pytest.raises(
        AccessDeniedError, match="another SSE-C key than objectStoreSseCustomerKeyFile"
    ):
        provider.read(seg(0), 0, 6)


# --- the provider's other answers -------------------------------------------------------------


@pytest.mark.s3
def test_unconfirmed_encryption_is_reported(
    ceph_s3: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """RGW 16 takes AES256 and stores the object in clear: the provider warns, once."""
    provider = make_provider(
        ceph_s3, ceph_s3.shared_bucket(), "aes256", encryption=encryption_for("AES256", ceph_s3)
    )
    with caplog.at_level(logging.WARNING, logger="tiered.providers.s3"):
        provider.append(seg(0), b"a", 0)
        provider.append(seg(0), b"b", 1)
    warnings = [r.getMessage() for r in caplog.records if "did not confirm" in r.getMessage()]
    assert len(warnings) == 1 and "AES256" in warnings[0]


@pytest.mark.s3
def test_ceph_cannot_copy_encrypted_objects_so_seals_do_not(
    ceph_s3: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """RGW 16 answers CopyObject of an encrypted object with 501: one-chunk seals fall back."""
    encryption = encryption_for("SSE-C", ceph_s3)
    provider = make_provider(ceph_s3, ceph_s3.shared_bucket(), "no-copy", encryption=encryption)
    content = fill(provider, seg(0), (5 * MIB + 10,))
    fill(provider, seg(1), (1000,))
    with caplog.at_level(logging.WARNING, logger="tiered.providers.s3"):
        first = Counter(requests_of(provider, lambda: provider.seal(seg(0))))
        second = Counter(requests_of(provider, lambda: provider.seal(seg(1))))
    assert first["COPY"] == 1 and first["MPU_PART_COPY"] == 1  # refused, then a part copy
    assert second["COPY"] == 0 and second["PUT"] == 1  # small: uploaded again
    assert sum("cannot copy an encrypted object" in r.getMessage() for r in caplog.records) == 1
    assert provider.read(seg(0), 5 * MIB, 10) == content[5 * MIB :]


@pytest.mark.s3
def test_the_key_is_never_logged(
    moto_s3: S3Endpoint, http_faults: HttpFaults, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """At DEBUG (botocore stays at WARNING), through writes, reads, a seal and a refused read,
    nothing prints the key; the repr and the errors name the file."""
    key_file = str(write_key(tmp_path / "sse-c.key"))
    encryption = S3Encryption.from_settings(key_file=key_file)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure(logging.DEBUG, "text")
    try:
        provider = make_provider(moto_s3, moto_s3.shared_bucket(), "quiet", encryption=encryption)
        fill(provider, seg(0), (100, 200))
        provider.seal(seg(0))
        assert len(provider.read(seg(0), 0, 300)) == 300
        http_faults.add(403, "AccessDenied", method="GET", count=100)
        with pytest.raises(AccessDeniedError) as info:
            pickle.loads(pickle.dumps(provider)).read(seg(0), 0, 10)
        logging.getLogger("tiered.test").error("read failed: %s", info.value)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    out, err = capfd.readouterr()
    shown = out + err + repr(provider) + repr(encryption) + str(info.value)
    assert key_file in repr(provider) and key_file in str(info.value)
    for secret in (base64.b64encode(KEY).decode(), KEY.hex(), repr(KEY)):
        assert secret not in shown


# --- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such file"),
        ("not base64 at all!", "does not hold base64"),
        (base64.b64encode(b"x" * 16).decode(), "holds 16 bytes after base64, not 32"),
        ("", "holds 0 bytes"),
    ],
)
def test_a_bad_key_file_is_a_config_error(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "sse-c.key"
    if content is not None:
        path.write_text(content, encoding="ascii")
    with pytest.raises(ConfigError, match=problem) as info:
        S3Encryption.from_settings(key_file=str(path))
    assert f"{KEY_FILE}={str(path)!r}" in str(info.value)


def test_an_unreadable_key_file_and_a_pasted_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"{KEY_FILE}=.* cannot be read"):
        S3Encryption.from_settings(key_file=str(tmp_path))  # a directory
    pasted = base64.b64encode(KEY).decode()
    with pytest.raises(ConfigError, match="looks like a key, not a file") as info:
        S3Encryption.from_settings(key_file=pasted)
    assert pasted not in str(info.value)


def test_the_key_file_is_read_and_kept_out_of_sight(tmp_path: Path) -> None:
    path = write_key(tmp_path / "sse-c.key")
    encryption = S3Encryption.from_settings(key_file=f" {path} ")
    assert encryption.customer_key == KEY and encryption.customer
    assert encryption.key_md5 == base64.b64encode(hashlib.md5(KEY).digest()).decode()
    assert KEY.hex() not in repr(encryption) and repr(KEY) not in repr(encryption)
    assert encryption.on_read() == {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": KEY}
    assert S3Encryption("AES256").on_read() == {} == S3Encryption("aws:kms").on_part()


def s3_config(**keys: str) -> TieredConfig:
    base = {"tieredBackendServiceProvider": "s3", "objectStoreBucket": "tier"}
    return TieredConfig.from_properties(base | keys)


def test_the_settings_and_their_combinations(tmp_path: Path) -> None:
    cfg = s3_config(objectStoreServerSideEncryption="aws:KMS", objectStoreKmsKeyId="alias/t")
    assert (cfg.object_store_server_side_encryption, cfg.object_store_kms_key_id) == (
        "aws:kms",
        "alias/t",
    )
    assert S3Encryption.from_config(cfg).on_create() == {
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "alias/t",
    }
    with pytest.raises(ConfigError, match="'SSE-C' is not one of AES256, aws:kms"):
        s3_config(objectStoreServerSideEncryption="SSE-C")
    with pytest.raises(ConfigError, match=r"objectStoreKmsKeyId is set but .*=aws:kms"):
        s3_config(objectStoreServerSideEncryption="AES256", objectStoreKmsKeyId="k")
    with pytest.raises(ConfigError, match=r"are exclusive.*Pick SSE-C"):
        s3_config(objectStoreServerSideEncryption="AES256", objectStoreSseCustomerKeyFile="/k")
    with pytest.raises(ConfigError, match="with tieredBackendServiceProvider=s3 only, not posix"):
        TieredConfig.from_properties(
            {"tieredBackendServiceProvider": "posix", "objectStoreSseCustomerKeyFile": "/k"}
        )
    missing = s3_config(objectStoreSseCustomerKeyFile=str(tmp_path / "absent.key"))
    assert missing.as_properties()[KEY_FILE] == str(tmp_path / "absent.key")
    with pytest.raises(ConfigError, match=f"{KEY_FILE}=.*absent.key.*no such file"):
        build_provider(missing)  # read when the provider starts


# --- a real offload with each mode -------------------------------------------------------------


def read_back(tier: SampleTier) -> int:
    """Read every queue from offset 0 under FORCE (the tier's ranged GETs and read-ahead) and
    compare each message with what the broker held; returns how many came from the tier."""
    store = tier.store(StorageLevel.FORCE)
    from_tier = 0
    for topic, qid in tier.queues:
        offset, end = 0, store.get_max_offset(topic, qid)
        while offset < end:
            r = store.get_message(topic, qid, offset, 64)
            assert r.status is GetStatus.FOUND, (topic, qid, offset, r.status)
            for unit in r.units:
                want = tier.expected[(topic, qid, unit.queue_offset)]
                assert unit.data[:28] + unit.data[36:] == want[:28] + want[36:]
            from_tier += len(r.units) if r.tier == "tiered" else 0
            offset = r.next_begin_offset
    return from_tier


def offload_encrypted(work: Path, endpoint: S3Endpoint, mode: str) -> tuple[SampleTier, str]:
    """A sample store offloaded to a fresh bucket with ``mode``; the tier and its bucket."""
    bucket = endpoint.new_bucket()
    keys: dict[str, Any] = endpoint.config_keys(bucket) | SMALL_SEGMENTS
    if mode == "SSE-C":
        keys[KEY_FILE] = str(write_key(work.parent / f"{work.name}.key"))
    else:
        keys["objectStoreServerSideEncryption"] = mode
        if mode == "aws:kms":
            keys["objectStoreKmsKeyId"] = encryption_for(mode, endpoint).kms_key_id
    spec = rolling_spec(seed=48, topics=1, queues=2, messages=1200)
    return build_sample_tier(work, spec, "s3", deleted_files=1, **keys), bucket


@pytest.mark.s3
@pytest.mark.parametrize("mode", MODES)
def test_an_offload_round_trip_on_moto(
    mode: str, moto_s3: S3Endpoint, http_faults: HttpFaults, tmp_path: Path
) -> None:
    seen = http_faults.watch("/rmq-")  # every object of the test's fresh buckets
    tier, bucket = offload_encrypted(tmp_path / "t", moto_s3, mode)
    try:
        assert read_back(tier) > 0
    finally:
        tier.sidecar.close()
    encryption = S3Encryption.from_config(tier.cfg)
    kinds = check_wire([r for r in seen if r.path.startswith(f"/{bucket}/")], encryption)
    assert kinds["PutObject"] > 0 and kinds["GetObject"] > 0
    assert kinds["CopyObject"] + kinds["CreateMultipartUpload"] + kinds["PutObject"] > 0
    oracle = BotoOracle(moto_s3.client(), bucket, read_args=encryption.on_read())
    assert check_objects(oracle, encryption, moto_s3) > 10


@pytest.mark.s3
def test_an_sse_c_offload_round_trip_on_ceph(ceph_s3: S3Endpoint, tmp_path: Path) -> None:
    """The whole path against a server that checks the key on every read and copy."""
    tier, bucket = offload_encrypted(tmp_path / "t", ceph_s3, "SSE-C")
    try:
        assert read_back(tier) > 0
    finally:
        tier.sidecar.close()
    encryption = S3Encryption.from_config(tier.cfg)
    oracle = BotoOracle(ceph_s3.client(), bucket, read_args=encryption.on_read())
    assert check_objects(oracle, encryption, ceph_s3) > 10
    plain = BotoOracle(ceph_s3.client(), bucket)
    with pytest.raises(ClientError) as info:  # without the key RGW serves nothing
        plain.get(sorted(plain.names())[0])
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
