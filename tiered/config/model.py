"""The configuration model: :class:`TieredConfig`, every key with its upstream name, default
and validator, and the rules that tie keys together.

No ``from __future__ import annotations`` here: the model reads each field's parser from its
annotation, which as an object costs nothing and as a string would have to be evaluated.
"""

import enum
from collections.abc import Mapping
from pathlib import Path

from tiered.config.keyed import KeyedModel
from tiered.config.keyed import Secret
from tiered.config.keyed import key as _key
from tiered.config.overrides import TopicOverride
from tiered.config.overrides import first_match
from tiered.config.values import _LEGACY_KEYS
from tiered.config.values import CQ_UNIT_SIZE
from tiered.config.values import INDEX_HEADER_SIZE
from tiered.config.values import INDEX_ITEM_SIZE
from tiered.config.values import INDEX_SLOT_SIZE
from tiered.config.values import INT_MAX
from tiered.config.values import Addresses
from tiered.config.values import AdvertisedAddress
from tiered.config.values import Bool
from tiered.config.values import BrokerId
from tiered.config.values import BrokerRole
from tiered.config.values import Bucket
from tiered.config.values import CqFileSize
from tiered.config.values import DirList
from tiered.config.values import DirPath
from tiered.config.values import DispatchStartPolicy
from tiered.config.values import Endpoint
from tiered.config.values import FrameBytes
from tiered.config.values import Globs
from tiered.config.values import IndexItems
from tiered.config.values import Int
from tiered.config.values import IntOrZero
from tiered.config.values import Level
from tiered.config.values import LevelOverrides
from tiered.config.values import LogFormat
from tiered.config.values import LogLevel
from tiered.config.values import Long
from tiered.config.values import LongOrOff
from tiered.config.values import LongOrZero
from tiered.config.values import MetadataStore
from tiered.config.values import MetricsDetail
from tiered.config.values import MetricsLevel
from tiered.config.values import NewGroupOffset
from tiered.config.values import Nice
from tiered.config.values import PendingLimit
from tiered.config.values import Port
from tiered.config.values import Provider
from tiered.config.values import Rate
from tiered.config.values import ReserveOverrides
from tiered.config.values import Role
from tiered.config.values import ServerSideEncryption
from tiered.config.values import StartPolicy
from tiered.config.values import StorageLevel
from tiered.config.values import Text
from tiered.config.values import TlsMode
from tiered.config.values import Token
from tiered.config.values import TopicNames
from tiered.config.values import _host_name

# --- the model -----------------------------------------------------------------------------------


class TieredConfig(KeyedModel):
    """The sidecar's validated, immutable configuration.

    Build it with :func:`load_config` or :meth:`from_properties`, which raise :class:`ConfigError`
    naming the source of a bad value; constructing it directly (Python field names or upstream
    keys) raises :class:`~tiered.config.keyed.FieldValueError`, a ``ConfigError`` too.
    """

    # broker keys (the broker's own values, from its broker.conf)
    store_path_root_dir: DirPath = _key(
        "storePathRootDir",
        "broker store root directory",
        default_factory=lambda: Path.home() / "store",
    )
    store_path_commit_log: DirList = _key(
        "storePathCommitLog", "commitlog directories, ','-separated; empty = {root}/commitlog", ()
    )
    broker_cluster_name: Text = _key("brokerClusterName", "cluster name", "DefaultCluster")
    broker_name: Text = _key(
        "brokerName", "broker name (default host name)", default_factory=_host_name
    )
    broker_id: BrokerId = _key("brokerId", "0 = master", 0)
    broker_role: Role = _key("brokerRole", "replication role", BrokerRole.ASYNC_MASTER)
    mapped_file_size_commit_log_bytes: Int = _key(
        "mappedFileSizeCommitLog", "commitlog file size, bytes", 1073741824
    )
    mapped_file_size_consume_queue_bytes: CqFileSize = _key(
        "mappedFileSizeConsumeQueue",
        "consumequeue file size, bytes (rounded up to 20)",
        6000000,
    )
    message_index_enable: Bool = _key("messageIndexEnable", "build the tiered key index", True)
    enable_consume_queue_ext: Bool = _key("enableConsumeQueueExt", "broker writes CQ ext", False)
    max_hash_slot_num: Int = _key(
        "maxHashSlotNum", "hash slots of the broker's own index files", 5000000
    )

    # tiered storage and providers
    tiered_storage_level: Level = _key(
        "tieredStorageLevel", "which reads the tier serves", StorageLevel.NOT_IN_DISK
    )
    tiered_storage_level_overrides: LevelOverrides = _key(
        "tieredStorageLevelOverrides",
        "per-topic tieredStorageLevel, topic:LEVEL (globs; first match wins)",
        (),
    )
    tiered_backend_service_provider: Provider = _key(
        "tieredBackendServiceProvider", "storage provider name", "memory"
    )
    tiered_metadata_service_provider: MetadataStore = _key(
        "tieredMetadataServiceProvider", "metadata store", "default"
    )
    tiered_metadata_journal_min_bytes: LongOrOff = _key(
        "tieredMetadataJournalMinBytes",
        "from this size of tieredStoreMetadata.json on, a persist appends what changed to a "
        "journal and the file is rewritten only at compaction, bytes; 0 = always, -1 = never",
        262_144,
    )
    tiered_store_file_path: str = _key("tieredStoreFilePath", "posix base directory", "")
    tiered_store_fsspec_url: str = _key("tieredStoreFsspecUrl", "fsspec base URL", "")
    tiered_store_commit_log_max_size_bytes: Long = _key(
        "tieredStoreCommitLogMaxSize", "flat commitlog segment size, bytes", 1073741824
    )
    tiered_store_consume_queue_max_size_bytes: Long = _key(
        "tieredStoreConsumeQueueMaxSize", "flat consumequeue segment size, bytes", 104857600
    )
    commit_log_rolling_interval_hours: Int = _key(
        "commitLogRollingInterval", "roll the flat commitlog segment after, hours", 24
    )
    commit_log_rolling_minimum_size_bytes: IntOrZero = _key(
        "commitLogRollingMinimumSize", "no time rolling below, bytes", 16777216
    )

    # S3
    object_store_endpoint: Endpoint = _key(
        "objectStoreEndpoint", "S3 endpoint URL; empty = AWS", ""
    )
    object_store_bucket: Bucket = _key("objectStoreBucket", "S3 bucket", "")
    object_store_access_key: str = _key("objectStoreAccessKey", "empty = AWS credential chain", "")
    object_store_secret_key: Secret = _key(
        "objectStoreSecretKey", "empty = AWS credential chain", Secret("")
    )
    object_store_prefix: str = _key("objectStorePrefix", "key prefix inside the bucket", "")
    object_store_region: Text = _key("objectStoreRegion", "S3 region", "us-east-1")
    object_store_path_style: Bool = _key("objectStorePathStyle", "path-style addressing", False)
    object_store_group_commit_size_bytes: Int = _key(
        "objectStoreGroupCommitSize", "object stores: upload a queue's batch at, bytes", 67108864
    )
    object_store_group_commit_timeout_ms: IntOrZero = _key(
        "objectStoreGroupCommitTimeout", "object stores: hold a batch at most, ms", 300000
    )
    object_store_read_ahead_size_bytes: IntOrZero = _key(
        "objectStoreReadAheadSize", "s3: sequential read window, bytes; 0 = off", 67108864
    )
    object_store_read_ahead_memory_bytes: IntOrZero = _key(
        "objectStoreReadAheadMemory", "s3: read-ahead windows held at most, bytes", 268435456
    )
    object_store_server_side_encryption: ServerSideEncryption = _key(
        "objectStoreServerSideEncryption",
        "s3: encryption at rest with a server-held key: AES256 or aws:kms; empty = none",
        "",
    )
    object_store_kms_key_id: Token = _key(
        "objectStoreKmsKeyId", "s3, aws:kms: the KMS key; empty = the bucket's or AWS's default", ""
    )
    object_store_sse_customer_key_file: str = _key(
        "objectStoreSseCustomerKeyFile",
        "s3: SSE-C, a file holding your base64 256-bit key; empty = no SSE-C",
        "",
    )

    # dispatch / commit
    tiered_store_dispatch_interval_ms: Int = _key(
        "tieredStoreDispatchIntervalMs", "dispatcher wake-up period, ms", 1000
    )
    tiered_store_queue_scan_interval_ms: IntOrZero = _key(
        "tieredStoreQueueScanIntervalMs",
        "run's passes look at the queues the commitlog shows moving and at those with work "
        "left; every other local queue's consumequeue is looked at once per this interval, in "
        "slices (the safety net), ms; 0 = every queue at every pass",
        300_000,
    )
    tiered_store_dispatch_start_policy: StartPolicy = _key(
        "tieredStoreDispatchStartPolicy",
        "first offset of a new queue: EARLIEST (local min) or RECENT",
        DispatchStartPolicy.EARLIEST,
    )
    tiered_offload_nice: Nice = _key(
        "tieredOffloadNice",
        "nice value of the offload's own threads, 0..19 (reads keep the process's priority)",
        10,
    )
    tiered_store_topic_include: Globs = _key(
        "tieredStoreTopicInclude", "topics offloaded, glob patterns", ("*",)
    )
    tiered_store_topic_exclude: Globs = _key(
        "tieredStoreTopicExclude", "topics never offloaded, glob patterns", ()
    )
    tiered_store_upload_on_slave: Bool = _key(
        "tieredStoreUploadOnSlave", "upload even when the broker is not the master", False
    )
    tiered_store_read_only: Bool = _key(
        "tieredStoreReadOnly", "never write the tier: no upload, expiry or index upload", False
    )
    tiered_replica_refresh_ms: Int = _key(
        "tieredReplicaRefreshMs",
        "rmq-tiered serve: reload the metadata mirror from the backend every, ms",
        30000,
    )
    tiered_store_group_commit: Bool = _key("tieredStoreGroupCommit", "batch uploads", True)
    tiered_store_group_commit_timeout_ms: IntOrZero = _key(
        "tieredStoreGroupCommitTimeout", "hold a batch at most, ms", 30000
    )
    tiered_store_group_commit_count: Int = _key(
        "tieredStoreGroupCommitCount", "send a batch at, messages", 4096
    )
    tiered_store_group_commit_size_bytes: Int = _key(
        "tieredStoreGroupCommitSize", "send a batch at, bytes", 4194304
    )
    tiered_store_max_group_commit_count: Int = _key(
        "tieredStoreMaxGroupCommitCount", "pending buffers per segment", 10000
    )
    tiered_store_max_pending_limit: PendingLimit = _key(
        "tieredStoreMaxPendingLimit", "concurrent uploads x4", 10000
    )
    tiered_store_crc_check_enable: Bool = _key(
        "tieredStoreCrcCheckEnable", "unused upstream", False
    )

    # read-ahead
    read_ahead_cache_enable: Bool = _key("readAheadCacheEnable", "use the read-ahead cache", True)
    read_ahead_message_count_threshold: Int = _key(
        "readAheadMessageCountThreshold", "read ahead, messages", 4096
    )
    read_ahead_message_size_threshold_bytes: Int = _key(
        "readAheadMessageSizeThreshold", "max bytes per tiered read", 16777216
    )
    read_ahead_cache_expire_duration_ms: Long = _key(
        "readAheadCacheExpireDuration", "expire after access, ms", 15000
    )
    read_ahead_cache_size_threshold_rate: Rate = _key(
        "readAheadCacheSizeThresholdRate", "cache budget, fraction of memory", 0.3
    )
    record_get_message_result: Bool = _key("recordGetMessageResult", "log tiered reads", False)

    # quotas and the read queue
    tiered_upload_max_bytes_per_second: LongOrZero = _key(
        "tieredUploadMaxBytesPerSecond",
        "bytes per second sent to the backend at most (offload batches, index uploads, the "
        "metadata mirror), shared by every worker; 0 = unlimited",
        0,
    )
    tiered_read_max_bytes_per_second: LongOrZero = _key(
        "tieredReadMaxBytesPerSecond",
        "bytes per second read from the backend at most (cold reads, read-ahead, prefetch); "
        "reads of the read-ahead cache cost nothing; 0 = unlimited",
        0,
    )
    tiered_read_max_pending: Int = _key(
        "tieredReadMaxPending",
        "cold reads waiting for the backend at once at most, across HTTP, the replay port and "
        "fetch; one more is refused at once (HTTP 503, remoting SYSTEM_BUSY)",
        64,
    )

    # index
    tiered_store_index_file_max_hash_slot_num: Int = _key(
        "tieredStoreIndexFileMaxHashSlotNum", "index slots per file", 5000000
    )
    tiered_store_index_file_max_index_num: IndexItems = _key(
        "tieredStoreIndexFileMaxIndexNum", "index items per file", 20000000
    )
    tiered_index_compaction_interval_ms: IntOrZero = _key(
        "tieredIndexCompactionIntervalMs", "compact sealed index files every, ms; 0 = never", 60000
    )
    tiered_index_spark_master: Text = _key(
        "tieredIndexSparkMaster", "Spark master of the in-process compaction job", "local[*]"
    )

    # expiry
    tiered_store_delete_file_enable: Bool = _key("tieredStoreDeleteFileEnable", "expire data", True)
    tiered_store_file_reserved_time_hours: Int = _key(
        "tieredStoreFileReservedTime", "keep tiered data, hours", 72
    )
    tiered_store_file_reserved_time_overrides: ReserveOverrides = _key(
        "tieredStoreFileReservedTimeOverrides", "per-topic keep time, topic:hours", ()
    )
    tiered_store_delete_file_interval_ms: Long = _key(
        "tieredStoreDeleteFileInterval", "expiry check period, ms", 3600000
    )
    tiered_scrub_interval_ms: IntOrZero = _key(
        "tieredScrubIntervalMs", "scrub the tier (rmq-tiered scrub) every, ms; 0 = never", 0
    )

    # sidecar
    tiered_http_host: Text = _key("tieredHttpHost", "address the HTTP API binds", "127.0.0.1")
    tiered_http_port: Port = _key("tieredHttpPort", "HTTP API port; 0 = any free port", 8081)
    tiered_http_max_response_bytes: Int = _key(
        "tieredHttpMaxResponseBytes", "message bytes per HTTP response at most", 16 << 20
    )
    tiered_http_max_connections: Int = _key(
        "tieredHttpMaxConnections", "HTTP connections served at once at most", 1024
    )
    # replay endpoint (RocketMQ remoting protocol)
    tiered_remoting_enable: Bool = _key(
        "tieredRemotingEnable", "serve the RocketMQ remoting protocol in run", True
    )
    tiered_remoting_host: Text = _key(
        "tieredRemotingHost", "address the replay endpoint binds", "127.0.0.1"
    )
    tiered_remoting_port: Port = _key(
        "tieredRemotingPort", "replay endpoint port; 0 = any free port", 10941
    )
    tiered_remoting_advertised_address: AdvertisedAddress = _key(
        "tieredRemotingAdvertisedAddress", "ip:port put in routes; empty = the listen address", ""
    )
    tiered_remoting_namesrv_addr: Addresses = _key(
        "tieredRemotingNamesrvAddr",
        "name servers (dedicated to replay) to register the endpoint with; empty = none",
        (),
    )
    tiered_remoting_register_interval_ms: Int = _key(
        "tieredRemotingRegisterIntervalMs", "register with the name servers every, ms", 30000
    )
    tiered_remoting_peers: Addresses = _key(
        "tieredRemotingPeers",
        "the other sidecars of the cluster (replay endpoints) whose routes are merged",
        (),
    )
    tiered_remoting_peer_cache_ms: IntOrZero = _key(
        "tieredRemotingPeerCacheMs", "keep a peer's routes for, ms; 0 = ask every time", 5000
    )
    tiered_remoting_max_frame_bytes: FrameBytes = _key(
        "tieredRemotingMaxFrameBytes", "largest request frame accepted, bytes", 16 << 20
    )
    tiered_remoting_max_connections: Int = _key(
        "tieredRemotingMaxConnections", "open client connections at most", 1024
    )
    tiered_remoting_new_group_offset: NewGroupOffset = _key(
        "tieredRemotingNewGroupOffset",
        "offset answered to a group the sidecar never saw: EARLIEST or CLIENT",
        "EARLIEST",
    )
    tiered_remoting_proxy_sync_topics: TopicNames = _key(
        "tieredRemotingProxySyncTopics",
        "RocketMQ Proxy heartbeat-sync topics (heartbeatSyncerTopicName) routed empty and "
        "read-only",
        ("DefaultHeartBeatSyncerTopic",),
    )
    # access control and TLS of both ports (HTTP API and replay endpoint)
    tiered_acl_enable: Bool = _key(
        "tieredAclEnable",
        "every request on both ports needs an account of tieredAclFile (HTTP Basic "
        "accessKey:secretKey; replay requests signed as AclClientRPCHook signs)",
        False,
    )
    tiered_acl_file: str = _key(
        "tieredAclFile",
        "the accounts, broker plain_acl.yml format; reloaded when it changes",
        "",
    )
    tiered_acl_max_failures_per_minute: Int = _key(
        "tieredAclMaxFailuresPerMinute",
        "failed authentications of one access key from one source address per minute before "
        "its further failures are answered one per 60 s / this (throttled); correct "
        "credentials are always answered at once",
        10,
    )
    tiered_acl_failed_auth_delay_ms: IntOrZero = _key(
        "tieredAclFailedAuthDelayMs",
        "a failed authentication is answered after this, ms (Kafka's "
        "connection.failed.authentication.delay.ms); 0 = at once",
        500,
    )
    tiered_metrics_detail: MetricsLevel = _key(
        "tieredMetricsDetail",
        "the per-queue metric families as one series for the broker (broker), one per topic "
        "(topic) or one per queue (queue, upstream's labels)",
        MetricsDetail.BROKER,
    )
    tiered_http_metrics_auth: Bool = _key(
        "tieredHttpMetricsAuth", "with tieredAclEnable, /metrics needs an account too", False
    )
    tiered_tls_cert_file: str = _key(
        "tieredTlsCertFile", "the server certificate (chain), PEM; reloaded when it changes", ""
    )
    tiered_tls_key_file: str = _key(
        "tieredTlsKeyFile", "the certificate's private key, PEM (unencrypted)", ""
    )
    tiered_tls_client_ca_file: str = _key(
        "tieredTlsClientCaFile",
        "CA certificates, PEM; when set a TLS client must present a certificate they signed "
        "(mutual TLS)",
        "",
    )
    tiered_http_tls_mode: TlsMode = _key(
        "tieredHttpTlsMode",
        "TLS on the HTTP port: disabled, permissive (TLS and plain) or enforcing (TLS only)",
        "disabled",
    )
    tiered_remoting_tls_mode: TlsMode = _key(
        "tieredRemotingTlsMode",
        "TLS on the replay port: disabled, permissive (TLS and plain, told apart by the first "
        "byte as the broker does) or enforcing (TLS only)",
        "disabled",
    )
    tiered_security_reload_interval_ms: Int = _key(
        "tieredSecurityReloadIntervalMs",
        "look for a changed tieredAclFile or certificate every, ms",
        10000,
    )
    tiered_data_dir: DirPath = _key(
        "tieredDataDir",
        "sidecar metadata and index files; never inside the broker store",
        default_factory=lambda: Path.home() / "rmq-tiered",
    )
    tiered_log_level: LogLevel = _key(
        "tieredLogLevel", "log level: DEBUG, INFO, WARNING or ERROR (any case)", "INFO"
    )
    tiered_log_format: LogFormat = _key(
        "tieredLogFormat", "stderr log lines: text, or json (one object per line)", "text"
    )

    def _check_together(self) -> None:
        problems = []
        provider = self.tiered_backend_service_provider
        if provider == "s3" and not self.object_store_bucket:
            problems.append("tieredBackendServiceProvider=s3 needs a bucket: set objectStoreBucket")
        if provider == "fsspec" and not self.tiered_store_fsspec_url:
            problems.append(
                "tieredBackendServiceProvider=fsspec needs tieredStoreFsspecUrl: set it to a base "
                "URL such as s3://bucket/prefix or file:///mnt/tiered"
            )
        problems += self._encryption_problems()
        if self.tiered_acl_enable and not self.tiered_acl_file.strip():
            problems.append(
                "tieredAclEnable=true needs tieredAclFile: set it to a file in "
                "the broker's plain_acl.yml format (accounts with accessKey, secretKey, topicPerms)"
            )
        tls_modes = {"tieredHttpTlsMode": self.tiered_http_tls_mode}
        tls_modes["tieredRemotingTlsMode"] = self.tiered_remoting_tls_mode
        for key, mode in tls_modes.items():
            if mode != "disabled" and not (
                self.tiered_tls_cert_file.strip() and self.tiered_tls_key_file.strip()
            ):
                problems.append(
                    f"{key}={mode} needs tieredTlsCertFile and tieredTlsKeyFile: set them to the "
                    "PEM certificate and its private key"
                )
        if self.tiered_tls_client_ca_file.strip() and "disabled" == self.tiered_http_tls_mode == (
            self.tiered_remoting_tls_mode
        ):
            problems.append(
                "tieredTlsClientCaFile is set but both tieredHttpTlsMode and "
                "tieredRemotingTlsMode are disabled: turn TLS on for a port, or unset it"
            )
        writable = [("tieredDataDir", self.tiered_data_dir)]
        if provider == "posix" and self.tiered_store_file_path:
            writable.append(("tieredStoreFilePath", Path(self.tiered_store_file_path)))
        if provider == "fsspec" and self.tiered_store_fsspec_url.startswith("file://"):
            writable.append(("tieredStoreFsspecUrl", Path(self.tiered_store_fsspec_url[7:])))
        store = [("storePathRootDir", self.store_path_root_dir)]
        store += [("storePathCommitLog", d) for d in self.commitlog_dirs]
        for key, path in writable:
            for store_key, store_dir in store:
                if _is_within(path, store_dir):
                    problems.append(
                        f"{key}='{path}' is inside the broker store ({store_key}='{store_dir}'); "
                        f"the sidecar never writes there: set {key} to a directory outside it"
                    )
                    break
        index_bytes = (
            INDEX_HEADER_SIZE
            + self.tiered_store_index_file_max_hash_slot_num * INDEX_SLOT_SIZE
            + self.tiered_store_index_file_max_index_num * INDEX_ITEM_SIZE
        )
        if index_bytes > INT_MAX:
            problems.append(
                "tieredStoreIndexFileMaxHashSlotNum and tieredStoreIndexFileMaxIndexNum make an "
                f"index file of {index_bytes} bytes, over the format's limit of {INT_MAX}: "
                "lower them"
            )
        if problems:
            raise ValueError("; ".join(problems))

    def _encryption_problems(self) -> list[str]:
        """What is wrong with the encryption-at-rest keys together (the SSE-C key file itself
        is read when the s3 provider starts). None set (most configurations) is nothing wrong,
        without loading the encryption module."""
        mode = self.object_store_server_side_encryption
        key_file = self.object_store_sse_customer_key_file.strip()
        kms_key_id = self.object_store_kms_key_id
        if not (mode or kms_key_id or key_file):
            return []
        from tiered.providers.s3_encryption import setting_problems

        problems = setting_problems(mode, kms_key_id, bool(key_file))
        provider = self.tiered_backend_service_provider
        if (mode or key_file) and provider != "s3":
            setting = "objectStoreServerSideEncryption" if mode else "objectStoreSseCustomerKeyFile"
            problems.append(
                f"{setting} encrypts at rest with tieredBackendServiceProvider=s3 only, not "
                f"{provider}: use the s3 provider, or unset it"
            )
        return problems

    @classmethod
    def model_keys(cls) -> list[str]:
        """The upstream key names of every field, sorted."""
        return sorted(str(field.validation_alias) for field in cls.model_fields.values())

    @classmethod
    def from_properties(cls, mapping: Mapping[str, str]) -> "TieredConfig":
        """Build from one flat ``key -> value`` mapping (upstream key names, string values).

        Raises:
            ConfigError: an unknown key or a bad value; the message names key, value and what is
                allowed.
        """
        from tiered.config.loader import _build  # the loader builds models from settings
        from tiered.config.loader import _Setting

        settings = {}
        for key, value in mapping.items():
            canonical = _LEGACY_KEYS.get(key, key)
            if canonical == key or canonical not in mapping:
                settings[canonical] = _Setting(value, None)
        return _build(settings)

    def as_properties(self) -> dict[str, str]:
        """Effective values by upstream key, spelled as in a properties file; the secret masked."""
        out = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, Secret):
                text = str(value) if value.get_secret_value() else ""
            elif isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, enum.StrEnum):
                text = value.value
            elif isinstance(value, enum.Enum):
                text = value.name
            elif isinstance(value, tuple):
                text = ",".join(str(p) for p in value)
            else:
                text = str(value)
            out[str(field.validation_alias)] = text
        return dict(sorted(out.items()))

    def storage_level_override(self, topic: str) -> TopicOverride[StorageLevel] | None:
        """The ``tieredStorageLevelOverrides`` entry that sets ``topic``'s storage level: the
        first whose pattern matches, else None."""
        return first_match(self.tiered_storage_level_overrides, topic)

    def storage_level_for(self, topic: str) -> StorageLevel:
        """The storage level of ``topic``: the first matching override, else the global level."""
        entry = self.storage_level_override(topic)
        return self.tiered_storage_level if entry is None else entry.value

    def reserved_time_hours_for(self, topic: str, metadata_hours: int = -1) -> int:
        """How long ``topic``'s tiered data is kept, in hours: the first matching
        ``tieredStoreFileReservedTimeOverrides`` entry, else ``metadata_hours`` (the topic's
        metadata ``reserveTime``) when above 0, else ``tieredStoreFileReservedTime``."""
        entry = first_match(self.tiered_store_file_reserved_time_overrides, topic)
        if entry is not None:
            return entry.value
        return metadata_hours if metadata_hours > 0 else self.tiered_store_file_reserved_time_hours

    def longest_reserved_time_hours(self, metadata_hours: int = -1) -> int:
        """The longest any topic may be kept, in hours: the global value, every override's (a
        pattern that matches no topic only keeps more) and ``metadata_hours`` (the longest
        metadata ``reserveTime``)."""
        overrides = (o.value for o in self.tiered_store_file_reserved_time_overrides)
        return max(self.tiered_store_file_reserved_time_hours, metadata_hours, *overrides)

    @property
    def uploads(self) -> bool:
        """Whether this sidecar uploads: the broker is the master, or tieredStoreUploadOnSlave."""
        master = self.broker_role != BrokerRole.SLAVE and self.broker_id == 0
        return master or self.tiered_store_upload_on_slave

    @property
    def writes_tier(self) -> bool:
        """Whether this sidecar writes the tier at all: it uploads (:attr:`uploads`) and is not
        read-only (``tieredStoreReadOnly``)."""
        return self.uploads and not self.tiered_store_read_only

    @property
    def role(self) -> str:
        """What ``status`` and the logs call this sidecar: ``read-only``
        (``tieredStoreReadOnly``), ``master`` (it uploads) or ``standby`` (its broker is a
        slave)."""
        if self.tiered_store_read_only:
            return "read-only"
        return "master" if self.uploads else "standby"

    @property
    def commitlog_dirs(self) -> tuple[Path, ...]:
        """The broker's commitlog directories (``storePathCommitLog`` or ``{root}/commitlog``)."""
        return self.store_path_commit_log or (self.store_path_root_dir / "commitlog",)

    @property
    def consume_queue_dir(self) -> Path:
        """``{storePathRootDir}/consumequeue``."""
        return self.store_path_root_dir / "consumequeue"

    @property
    def store_index_dir(self) -> Path:
        """The broker's own index directory, ``{storePathRootDir}/index``."""
        return self.store_path_root_dir / "index"

    @property
    def checkpoint_file(self) -> Path:
        """``{storePathRootDir}/checkpoint``."""
        return self.store_path_root_dir / "checkpoint"

    @property
    def effective_cq_file_size_bytes(self) -> int:
        """The consumequeue file size the broker really uses: rounded up to a multiple of 20."""
        units = -(-self.mapped_file_size_consume_queue_bytes // CQ_UNIT_SIZE)
        return units * CQ_UNIT_SIZE


_MODEL_KEYS = frozenset(TieredConfig.model_keys())


def _is_within(path: Path, parent: Path) -> bool:
    inner, outer = path.expanduser().resolve(), parent.expanduser().resolve()
    return inner == outer or outer in inner.parents
