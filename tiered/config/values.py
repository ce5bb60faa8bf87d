"""The configuration's value types: constants, enums, and the strict parsers every key's value
goes through (Java semantics: a bad value is an error naming what is allowed)."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated
from typing import TypeVar

from tiered.config.keyed import Parse
from tiered.config.overrides import TOPIC_GLOB
from tiered.config.overrides import TopicOverride
from tiered.config.overrides import parse_overrides
from tiered.process.offload_priority import NICE_MAX
from tiered.providers.registry import BUILTIN_NAMES
from tiered.providers.registry import BUILTINS
from tiered.providers.registry import builtin_name

E = TypeVar("E", bound=enum.StrEnum)

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


def _member(cls: type[E]) -> Callable[[object], E]:
    """A member of string enum ``cls`` by its value (case-sensitive, as Java's ``valueOf``)."""
    choose = _choice([member.value for member in cls])

    def parse(value: object) -> E:
        return cls(choose(value))

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


SSE_MODES = ("AES256", "aws:kms")


def _sse(value: object) -> str:
    """``objectStoreServerSideEncryption``: empty, or S3's spelling of a mode (any case)."""
    text = value.strip() if isinstance(value, str) else None
    if text == "":
        return text
    for mode in SSE_MODES:
        if text is not None and text.lower() == mode.lower():
            return mode
    raise ValueError(
        f"is not one of {', '.join(SSE_MODES)} (or empty for none; for SSE-C set "
        "objectStoreSseCustomerKeyFile instead)"
    )


def _token(value: object) -> str:
    """A value without spaces (a KMS key id, ARN or alias), or empty."""
    if isinstance(value, str) and not re.search(r"\s", value.strip()):
        return value.strip()
    raise ValueError("holds spaces (allowed: a key id, key ARN or alias/name, or empty)")


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


_TOPIC_NAME = re.compile(r"[A-Za-z0-9%|_\-]{1,127}")


def _topic_names(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise ValueError("is not a comma-separated list of topic names")
    out = tuple(str(p).strip() for p in items if str(p).strip())
    for name in out:
        if not _TOPIC_NAME.fullmatch(name):
            raise ValueError(
                f"holds {name!r}, not a topic name (letters, digits, %|_- ; 127 at most)"
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
    import socket  # only without brokerName: every command would pay for its import

    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


Int = Annotated[int, Parse(_int(1, INT_MAX))]  # Java int > 0
IntOrZero = Annotated[int, Parse(_int(0, INT_MAX))]
Long = Annotated[int, Parse(_int(1, LONG_MAX))]  # Java long > 0
LongOrZero = Annotated[int, Parse(_int(0, LONG_MAX))]
LongOrOff = Annotated[int, Parse(_int(-1, LONG_MAX))]  # -1: off
Bool = Annotated[bool, Parse(_bool)]
Text = Annotated[str, Parse(_text)]
DirPath = Annotated[Path, Parse(_path)]
DirList = Annotated[tuple[Path, ...], Parse(_paths)]
BrokerId = Annotated[int, Parse(_int(0, LONG_MAX))]
Role = Annotated[BrokerRole, Parse(_member(BrokerRole))]
MetricsLevel = Annotated[MetricsDetail, Parse(_member(MetricsDetail))]
StartPolicy = Annotated[DispatchStartPolicy, Parse(_member(DispatchStartPolicy))]
Globs = Annotated[tuple[str, ...], Parse(_globs)]
TopicNames = Annotated[tuple[str, ...], Parse(_topic_names)]
ReserveOverrides = Annotated[tuple[TopicOverride[int], ...], Parse(_reserve_overrides)]
LevelOverrides = Annotated[tuple[TopicOverride[StorageLevel], ...], Parse(_level_overrides)]
Port = Annotated[int, Parse(_int(0, 65535))]
CqFileSize = Annotated[int, Parse(_int(CQ_UNIT_SIZE, INT_MAX // CQ_UNIT_SIZE * CQ_UNIT_SIZE))]
Level = Annotated[StorageLevel, Parse(_storage_level)]
AdvertisedAddress = Annotated[str, Parse(_advertised)]
Addresses = Annotated[tuple[str, ...], Parse(_addresses)]
FrameBytes = Annotated[int, Parse(_int(1024, INT_MAX))]
NewGroupOffset = Annotated[str, Parse(_choice(("EARLIEST", "CLIENT")))]
TLS_MODES = ("disabled", "permissive", "enforcing")
_tls_mode = _choice(TLS_MODES)
TlsMode = Annotated[str, Parse(lambda v: _tls_mode(str(v).strip().lower()))]
Provider = Annotated[str, Parse(_provider)]
MetadataStore = Annotated[str, Parse(_metadata_provider)]
Endpoint = Annotated[str, Parse(_endpoint)]
Bucket = Annotated[str, Parse(_bucket)]
ServerSideEncryption = Annotated[str, Parse(_sse)]
Token = Annotated[str, Parse(_token)]
PendingLimit = Annotated[int, Parse(_int(4, INT_MAX))]  # upstream semaphores get 1/4
IndexItems = Annotated[int, Parse(_int(2, INT_MAX))]  # item 0 is never used
Rate = Annotated[float, Parse(_rate)]
LogLevel = Annotated[str, Parse(_log_level)]
Nice = Annotated[int, Parse(_nice)]
LogFormat = Annotated[str, Parse(_log_format)]
