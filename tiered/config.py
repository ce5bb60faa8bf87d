"""Configuration: RocketMQ-style properties files, ``RMQ_TIERED_<key>`` overrides, a frozen model.

Keys and defaults are upstream's (``org.apache.rocketmq.tieredstore.MessageStoreConfig``, spec
section 11) plus the broker keys the sidecar reads and a few of its own. Files use the upstream
camelCase names; the model's Python names are snake_case with the unit spelled out. The broker's own
``broker.conf`` may be one of the files: a key the sidecar does not use is ignored only when it is a
known broker key (:mod:`tiered.broker_keys`); anything else is an error with a did-you-mean.

Precedence, lowest first: model defaults, files in the order given (later wins), environment
variables ``RMQ_TIERED_<key>``, explicit ``overrides``.
"""

from __future__ import annotations

import enum
import logging
import os
import re
import socket
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated
from typing import Any
from typing import NamedTuple

from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import Field
from pydantic import GetCoreSchemaHandler
from pydantic import SecretStr
from pydantic import ValidationError
from pydantic import model_validator
from pydantic_core import ErrorDetails
from pydantic_core import core_schema

from tiered.broker_keys import KNOWN_BROKER_KEYS
from tiered.errors import ConfigError
from tiered.offload_priority import NICE_MAX
from tiered.properties import entries
from tiered.properties import parse_properties
from tiered.providers.registry import BUILTIN_NAMES
from tiered.providers.registry import BUILTINS
from tiered.providers.registry import builtin_name
from tiered.topic_overrides import TOPIC_GLOB
from tiered.topic_overrides import TopicOverride
from tiered.topic_overrides import first_match
from tiered.topic_overrides import parse_overrides

__all__ = [
    "ENV_PREFIX",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "PROVIDER_NAMES",
    "BrokerRole",
    "DispatchStartPolicy",
    "MetricsDetail",
    "StorageLevel",
    "TieredConfig",
    "load_config",
    "parse_properties",
]

_LOG = logging.getLogger(__name__)

ENV_PREFIX = "RMQ_TIERED_"
INT_MAX = 2**31 - 1  # Java int
LONG_MAX = 2**63 - 1  # Java long
CQ_UNIT_SIZE = 20
INDEX_HEADER_SIZE, INDEX_SLOT_SIZE, INDEX_ITEM_SIZE = 28, 8, 32

PROVIDER_NAMES = BUILTIN_NAMES
_UPSTREAM = "org.apache.rocketmq.tieredstore."
_METADATA_ALIASES = {
    "default": "default",
    f"{_UPSTREAM}metadata.DefaultMetadataStore": "default",
    f"{_UPSTREAM}metadata.TieredMetadataManager": "default",  # 5.1 name of the same store
}
_THIRD_PARTY_NAME = re.compile(r"[a-z][a-z0-9_]*")
# Spellings of older releases, read as today's key.
_LEGACY_KEYS = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
    "tieredStoreFilepath": "tieredStoreFilePath",
}
_DEPRECATED = {
    "tieredRemotingAclEnable": "tieredAclEnable",
    "tieredRemotingAclFile": "tieredAclFile",
}
"""Former names read as today's key, with one warning per process."""
_LEGACY_KEYS.update(_DEPRECATED)
_SECRET_KEYS = frozenset({"objectStoreSecretKey"})


class StorageLevel(enum.IntEnum):
    """Which reads the tier serves (upstream ``TieredStorageLevel``); see spec section 9.1."""

    DISABLE = 0
    NOT_IN_DISK = 1
    NOT_IN_MEM = 2
    FORCE = 3

    def check(self, target: StorageLevel) -> bool:
        """Upstream ``check``: this level is at least ``target``."""
        return self.value >= target.value


class BrokerRole(enum.StrEnum):
    """The broker's replication role (store ``brokerRole``)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class MetricsDetail(enum.StrEnum):
    """How many series the per-queue metric families export (``tieredMetricsDetail``)."""

    BROKER = "broker"
    TOPIC = "topic"
    QUEUE = "queue"


class DispatchStartPolicy(enum.StrEnum):
    """Where the dispatcher starts a queue it sees for the first time."""

    EARLIEST = "EARLIEST"  # the local store's min offset: the whole existing backlog
    RECENT = "RECENT"  # about two minutes back from now, as upstream


# --- value parsers (Java semantics, strict: a bad value is an error, never silently ignored) -----


def _int(lo: int, hi: int) -> Callable[[object], int]:
    allowed = f"{lo}..{hi}"

    def parse(value: object) -> int:
        if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"is not a whole number (allowed: {allowed})")
        if not lo <= value <= hi:
            raise ValueError(f"is out of range (allowed: {allowed})")
        return value

    return parse


def _rate(value: object) -> float:
    try:
        rate = float(value) if isinstance(value, str | int | float) else float("nan")
    except ValueError:
        rate = float("nan")
    if isinstance(value, bool) or not 0.0 < rate <= 1.0:
        raise ValueError("is not a fraction (allowed: a number > 0 and <= 1, e.g. 0.3)")
    return rate


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("is not a boolean (allowed: true, false)")


def _choice(names: Sequence[str], extra: str = "") -> Callable[[object], str]:
    def parse(value: object) -> str:
        if isinstance(value, str) and value.strip() in names:
            return value.strip()
        upper = str(value).strip().upper()
        hint = f"; names are case-sensitive: did you mean {upper!r}?" if upper in names else ""
        raise ValueError(f"is not one of {', '.join(names)}{extra}{hint}")

    return parse


def _storage_level(value: object) -> StorageLevel:
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= 3:
            return StorageLevel(value)
        raise ValueError(
            "is out of range (allowed: 0..3 or DISABLE, NOT_IN_DISK, NOT_IN_MEM, FORCE)"
        )
    names = [level.name for level in StorageLevel]
    return StorageLevel[_choice(names, " (or their numbers 0..3)")(value)]


def _provider(value: object) -> str:
    name = str(value).strip()
    builtin = builtin_name(name)  # the registry's table: names and upstream class aliases
    if builtin is not None:
        return builtin
    if _THIRD_PARTY_NAME.fullmatch(name):
        return name  # a third-party provider; the registry resolves it when the store starts
    classes = ", ".join(alias for _, _, aliases in BUILTINS for alias in aliases[:1])
    raise ValueError(
        f"is not a provider (allowed: {', '.join(PROVIDER_NAMES)}, a registered third-party "
        f"provider name in lower case, or the upstream classes {classes})"
    )


def _metadata_provider(value: object) -> str:
    if str(value).strip() in _METADATA_ALIASES:
        return _METADATA_ALIASES[str(value).strip()]
    raise ValueError(f"is not supported (allowed: {', '.join(_METADATA_ALIASES)})")


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must not be empty")
    return value.strip()


def _path(value: object) -> Path:
    if isinstance(value, Path):
        return value.expanduser()
    return Path(_text(value)).expanduser()


def _paths(value: object) -> tuple[Path, ...]:
    if isinstance(value, str):
        return tuple(Path(p.strip()).expanduser() for p in value.split(",") if p.strip())
    if isinstance(value, Sequence):
        return tuple(_path(p) for p in value)
    raise ValueError("is not a comma-separated list of directories")


def _endpoint(value: object) -> str:
    if isinstance(value, str) and (not value.strip() or re.match(r"https?://", value.strip())):
        return value.strip()
    raise ValueError("is not an endpoint URL (allowed: empty for AWS, or http://host[:port])")


def _bucket(value: object) -> str:
    if isinstance(value, str) and not re.search(r"[/\s]", value.strip()):
        return value.strip()
    raise ValueError(
        "is not a bucket name (no '/' or spaces; put a key prefix in objectStorePrefix)"
    )


def _globs(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise ValueError("is not a comma-separated list of topic patterns")
    out = tuple(str(p).strip() for p in items if str(p).strip())
    for pattern in out:
        if not TOPIC_GLOB.fullmatch(pattern):
            raise ValueError(
                f"holds {pattern!r}, not a topic pattern (topic characters plus * ? [...])"
            )
    return out


def _hours(entry: str, text: str) -> int | None:
    if not text.isdigit():
        return None
    if not 1 <= int(text) <= INT_MAX:
        raise ValueError(f"holds {entry!r}; hours must be 1..{INT_MAX}")
    return int(text)


def _reserve_overrides(value: object) -> tuple[TopicOverride[int], ...]:
    usage = "write topic:hours, e.g. TopicA:48,Orders*:720"
    return parse_overrides(value, "hours", usage, _hours)


def _level_overrides(value: object) -> tuple[TopicOverride[StorageLevel], ...]:
    usage = f"write topic:LEVEL with LEVEL one of {', '.join(m.name for m in StorageLevel)}"
    return parse_overrides(
        value, "LEVEL", usage, lambda _, text: StorageLevel.__members__.get(text)
    )


def _advertised(value: object) -> str:
    text = value.strip() if isinstance(value, str) else None
    if text == "":
        return text
    host, sep, port = (text or "").rpartition(":")
    if (
        text is None
        or not sep
        or not host
        or not port.isdigit()
        or not 1 <= int(port) <= 65535
        or re.search(r"[\s/]", host)
    ):
        raise ValueError(
            "is not ip:port (e.g. 10.0.0.7:10941); leave it empty to advertise the listen address"
        )
    return text


def _addresses(value: object) -> tuple[str, ...]:
    """``host:port`` list, separated by ``;`` (RocketMQ's ``namesrvAddr``) or ``,``."""
    text = value if isinstance(value, str) else ""
    if not isinstance(value, str | tuple | list):
        raise ValueError("is not a list of host:port")
    parts = value if isinstance(value, tuple | list) else re.split(r"[;,]", text)
    out = []
    for part in (str(p).strip() for p in parts):
        if not part:
            continue
        try:
            out.append(_advertised(part))
        except ValueError as e:
            raise ValueError(
                f"{part!r} is not host:port (a list: 10.0.0.7:9876;10.0.0.8:9876)"
            ) from e
    return tuple(out)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


def _log_level(value: object) -> str:
    if isinstance(value, str) and value.strip().upper() in LOG_LEVELS:
        return value.strip().upper()
    raise ValueError(f"is not one of {', '.join(LOG_LEVELS)} (any case)")


def _log_format(value: object) -> str:
    if isinstance(value, str) and value.strip().lower() in LOG_FORMATS:
        return value.strip().lower()
    raise ValueError(f"is not one of {', '.join(LOG_FORMATS)} (any case)")


def _nice(value: object) -> int:
    try:
        return _int(0, NICE_MAX)(value)
    except ValueError as e:
        raise ValueError(
            f"{e}: set a Linux nice value, 0 for the process's own priority up to {NICE_MAX} for "
            "the lowest"
        ) from None


def _host_name() -> str:
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


def _key(key: str, doc: str, default: Any = None, **kw: Any) -> Any:
    """A model field read from upstream key ``key``; ``doc`` gives meaning and unit."""
    if "default_factory" not in kw:
        kw["default"] = default
    return Field(validation_alias=key, serialization_alias=key, description=doc, **kw)


class _Before:
    """pydantic's ``BeforeValidator`` for a function of the value alone: the same core schema
    (``function-before``, no info argument), without pydantic inspecting the function's
    signature again at each of the model's 85 fields (a tenth of building the model, which every
    command does at start)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.func, handler(source))


Int = Annotated[int, _Before(_int(1, INT_MAX))]  # Java int > 0
IntOrZero = Annotated[int, _Before(_int(0, INT_MAX))]
Long = Annotated[int, _Before(_int(1, LONG_MAX))]  # Java long > 0
Bool = Annotated[bool, _Before(_bool)]
Text = Annotated[str, _Before(_text)]
DirPath = Annotated[Path, _Before(_path)]
DirList = Annotated[tuple[Path, ...], _Before(_paths)]
BrokerId = Annotated[int, _Before(_int(0, LONG_MAX))]
Role = Annotated[BrokerRole, _Before(_choice(list(BrokerRole)))]
MetricsLevel = Annotated[MetricsDetail, _Before(_choice(list(MetricsDetail)))]
StartPolicy = Annotated[DispatchStartPolicy, _Before(_choice(list(DispatchStartPolicy)))]
Globs = Annotated[tuple[str, ...], _Before(_globs)]
ReserveOverrides = Annotated[tuple[TopicOverride[int], ...], _Before(_reserve_overrides)]
LevelOverrides = Annotated[tuple[TopicOverride[StorageLevel], ...], _Before(_level_overrides)]
Port = Annotated[int, _Before(_int(0, 65535))]
CqFileSize = Annotated[int, _Before(_int(CQ_UNIT_SIZE, INT_MAX // CQ_UNIT_SIZE * CQ_UNIT_SIZE))]
Level = Annotated[StorageLevel, _Before(_storage_level)]
AdvertisedAddress = Annotated[str, _Before(_advertised)]
Addresses = Annotated[tuple[str, ...], _Before(_addresses)]
FrameBytes = Annotated[int, _Before(_int(1024, INT_MAX))]
NewGroupOffset = Annotated[str, _Before(_choice(("EARLIEST", "CLIENT")))]
TLS_MODES = ("disabled", "permissive", "enforcing")
_tls_mode = _choice(TLS_MODES)
TlsMode = Annotated[str, _Before(lambda v: _tls_mode(str(v).strip().lower()))]
Provider = Annotated[str, _Before(_provider)]
MetadataStore = Annotated[str, _Before(_metadata_provider)]
Endpoint = Annotated[str, _Before(_endpoint)]
Bucket = Annotated[str, _Before(_bucket)]
PendingLimit = Annotated[int, _Before(_int(4, INT_MAX))]  # upstream semaphores get 1/4
IndexItems = Annotated[int, _Before(_int(2, INT_MAX))]  # item 0 is never used
Rate = Annotated[float, _Before(_rate)]
LogLevel = Annotated[str, _Before(_log_level)]
Nice = Annotated[int, _Before(_nice)]
LogFormat = Annotated[str, _Before(_log_format)]


# --- the model -----------------------------------------------------------------------------------


class TieredConfig(BaseModel):
    """The sidecar's validated, immutable configuration.

    Build it with :func:`load_config` or :meth:`from_properties`, which raise :class:`ConfigError`;
    constructing it directly (Python field names) raises pydantic's ``ValidationError`` instead.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

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
    object_store_secret_key: SecretStr = _key(
        "objectStoreSecretKey", "empty = AWS credential chain", SecretStr("")
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

    @model_validator(mode="after")
    def _check_together(self) -> TieredConfig:
        problems = []
        provider = self.tiered_backend_service_provider
        if provider == "s3" and not self.object_store_bucket:
            problems.append("tieredBackendServiceProvider=s3 needs a bucket: set objectStoreBucket")
        if provider == "fsspec" and not self.tiered_store_fsspec_url:
            problems.append(
                "tieredBackendServiceProvider=fsspec needs tieredStoreFsspecUrl: set it to a base "
                "URL such as s3://bucket/prefix or file:///mnt/tiered"
            )
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
        return self

    @classmethod
    def model_keys(cls) -> list[str]:
        """The upstream key names of every field, sorted."""
        return sorted(str(field.validation_alias) for field in cls.model_fields.values())

    @classmethod
    def from_properties(cls, mapping: Mapping[str, str]) -> TieredConfig:
        """Build from one flat ``key -> value`` mapping (upstream key names, string values).

        Raises:
            ConfigError: an unknown key or a bad value; the message names key, value and what is
                allowed.
        """
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
            if isinstance(value, SecretStr):
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


# --- loading -------------------------------------------------------------------------------------


class _Setting(NamedTuple):
    value: str
    source: str | None  # "file:line", "environment variable X", "override"; None when unknown


def load_config(
    paths: str | Path | Sequence[str | Path],
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> TieredConfig:
    """Read properties ``paths`` (later wins), then ``RMQ_TIERED_<key>`` variables of ``env``
    (default ``os.environ``), then ``overrides``; validate once.

    Raises:
        ConfigError: a file cannot be read or parsed, a key is unknown, or a value is bad. The
            message is one line naming the file (and line), the key, the value and the fix.
    """
    if isinstance(paths, str | Path):  # one file (a str is also a Sequence of characters)
        paths = [paths]
    settings: dict[str, _Setting] = {}

    def put(key: str, setting: _Setting) -> None:
        if key in _DEPRECATED:
            _warn_deprecated(key, setting.source)
        settings[_LEGACY_KEYS.get(key, key)] = setting

    for path in paths:
        text = _read_text(Path(path))
        for key, value, lineno in entries(text, str(path)):
            put(key, _Setting(value, f"{path}:{lineno}"))
    lowered = {key.lower(): key for key in (*_MODEL_KEYS, *_DEPRECATED)}
    for name, value in (os.environ if env is None else env).items():
        if name.startswith(ENV_PREFIX):
            key = name.removeprefix(ENV_PREFIX)
            if key not in _MODEL_KEYS and key not in KNOWN_BROKER_KEYS:
                key = lowered.get(key.lower(), key)  # RMQ_TIERED_TIEREDSTORAGELEVEL
            put(key, _Setting(value, f"environment variable {name}"))
    for key, value in (overrides or {}).items():
        put(key, _Setting(value, "override"))
    return _build(settings)


_warned: set[str] = set()


def _warn_deprecated(key: str, source: str | None) -> None:
    """One warning per process for a deprecated key (read at every config load)."""
    if key not in _warned:
        _warned.add(key)
        _LOG.warning(
            "%s (%s) is deprecated: rename it %s (it now covers both ports); the old name is "
            "still read",
            key,
            source or "config",
            _DEPRECATED[key],
        )


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist: check the path") from e
    except IsADirectoryError as e:
        raise ConfigError(f"config file {path} is a directory: give a properties file") from e
    except PermissionError as e:
        raise ConfigError(f"config file {path} is not readable (permission denied)") from e
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})"
            ": save it as UTF-8"
        ) from e


def _build(settings: Mapping[str, _Setting]) -> TieredConfig:
    unknown = [k for k in settings if k not in _MODEL_KEYS and k not in KNOWN_BROKER_KEYS]
    if unknown:
        raise ConfigError("; ".join(_unknown_key(k, settings[k].source) for k in unknown))
    ignored = sorted(k for k in settings if k not in _MODEL_KEYS)
    if ignored:
        _LOG.debug("ignoring broker keys the sidecar does not use: %s", ", ".join(ignored))
    values = {k: s.value for k, s in settings.items() if k in _MODEL_KEYS}
    try:
        return TieredConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError("; ".join(_describe(err, settings) for err in e.errors())) from e


def _unknown_key(key: str, source: str | None) -> str:
    where = f"{source}: " if source else ""
    lowered = {k.lower(): k for k in sorted(KNOWN_BROKER_KEYS) + sorted(_MODEL_KEYS)}
    import difflib  # only for a misspelt key

    close = difflib.get_close_matches(key.lower(), lowered, n=1, cutoff=0.75)
    hint = f" (did you mean {lowered[close[0]]!r}?)" if close else ""
    return (
        f"{where}unknown key {key!r}{hint}: it is neither a sidecar key nor a known RocketMQ "
        "broker key; fix or remove it"
    )


def _describe(err: ErrorDetails, settings: Mapping[str, _Setting]) -> str:
    ctx = err.get("ctx") or {}
    problem = str(ctx["error"]) if "error" in ctx else str(err["msg"])
    if not err["loc"]:
        return problem
    key = str(err["loc"][0])
    setting = settings.get(key)
    where = f"{setting.source}: " if setting and setting.source else ""
    value = "'***'" if key in _SECRET_KEYS else repr(setting.value if setting else err["input"])
    return f"{where}{key}={value} {problem}"
