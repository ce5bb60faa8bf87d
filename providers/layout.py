"""Upstream key naming: where a segment of (cluster, broker, topic, queue, type, base) lives.

Every provider stores a segment under the same slash-separated relative key, the one the Java
``PosixFileSegment`` uses below ``tieredStoreFilePath`` (spec §5.1)::

    {md5(cluster)[:8]}_{cluster}/{broker}/{topic}/{queueId}/{COMMIT_LOG|CONSUME_QUEUE|INDEX}/{name}

where ``name`` is ``md5(str(base))[:8]`` followed by ``base`` zero-padded to 20 digits.

Keys are checked here, once, for every provider: a component is never empty, ``.``-led (which
covers ``.`` and ``..``), never holds ``/``, ``\\``, ``~`` (reserved for chunk objects), NUL or
another control character, and is at most 255 UTF-8 bytes, so no topic name can escape a root.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
from collections.abc import Sequence
from typing import NamedTuple

from tiered.errors import InvalidKeyError

INDEX_TOPIC = "rmq_sys_INDEX"
"""The pseudo topic of the tiered index "queue": ``{broker}/rmq_sys_INDEX/0`` (spec §5.1)."""

RESERVED_CHAR = "~"
"""Never part of a key component; object-store providers name chunk objects with it."""

MAX_COMPONENT_BYTES = 255
_MAX_OFFSET = 10**20 - 1
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f/\\~]")
_FILE_NAME = re.compile(r"[0-9a-f]{8}[0-9]{20}")
_SAFE_PART = r"[^./\\~\x00-\x1f\x7f][^/\\~\x00-\x1f\x7f]{0,254}"
_SAFE_ASCII_KEY = re.compile(f"{_SAFE_PART}(?:/{_SAFE_PART})*")
"""An ASCII key every part of which :func:`check_component` takes (ASCII: a character is a
byte, so at most 255 of them)."""
_SAFE_ASCII_KEYS = re.compile(f"{_SAFE_PART}(?:[/\n]{_SAFE_PART})*")
"""Such keys joined by newlines (which no key holds)."""


class FileType(enum.Enum):
    """The three kinds of flat file; the value is the upstream directory name."""

    COMMIT_LOG = "COMMIT_LOG"
    CONSUME_QUEUE = "CONSUME_QUEUE"
    INDEX = "INDEX"

    @property
    def label(self) -> str:
        """The metric label value upstream uses: ``commit_log``, ``consume_queue``, ``index``."""
        return self.value.lower()


@functools.lru_cache(maxsize=1 << 16)
def _md5_prefix(text: str) -> str:
    # cached: a queue's keys hash the same cluster name and base offsets at every call
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]


@functools.lru_cache(maxsize=1 << 12, typed=True)  # (typed: 5.0 or True is not taken for 5)
def offset_to_file_name(base_offset: int) -> str:
    """``MessageStoreUtil.offset2FileName``: ``0`` → ``cfcd208400000000000000000000`` (cached:
    every append names its segment, and most queues' segments begin at the same few offsets)."""
    if not 0 <= base_offset <= _MAX_OFFSET:
        raise InvalidKeyError(f"base offset {base_offset!r} is not in 0..{_MAX_OFFSET}")
    return _md5_prefix(str(base_offset)) + f"{base_offset:020d}"


def file_name_to_offset(name: str) -> int:
    """``MessageStoreUtil.fileName2Offset``: the base offset in the last 20 characters."""
    if not _FILE_NAME.fullmatch(name):
        raise InvalidKeyError(f"segment file name {name!r} is not 8 hex digits + 20 digits")
    return int(name[8:])


@functools.lru_cache(maxsize=64)
def cluster_dir_name(cluster: str) -> str:
    """The cluster directory: ``DefaultCluster`` → ``212d6b50_DefaultCluster`` (cached: every
    key names it)."""
    check_component(cluster, "cluster name")
    return f"{_md5_prefix(cluster)}_{cluster}"


def check_component(value: str, what: str = "key component") -> str:
    """Return ``value`` if it is a safe key component, else raise :class:`InvalidKeyError`."""
    if isinstance(value, str) and value and _safe_component(value):
        return value
    return _check_component(value, what)


@functools.lru_cache(maxsize=1 << 16)
def _safe_component(value: str) -> bool:
    """Whether ``value`` passes :func:`_check_component` (cached: every key of a queue repeats
    its broker, topic and directory names)."""
    try:
        _check_component(value, "")
    except InvalidKeyError:
        return False
    return True


def _check_component(value: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidKeyError(f"{what} {value!r} is empty or not a string")
    if value.startswith("."):
        raise InvalidKeyError(f"{what} {value!r} starts with '.'; use a name without it")
    bad = _BAD_CHARS.search(value)
    if bad:
        raise InvalidKeyError(
            f"{what} {value!r} contains {bad.group()!r}; '/', '\\', '~' and control characters "
            "are not allowed"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidKeyError(f"{what} {value!r} is not valid Unicode text") from e
    if size > MAX_COMPONENT_BYTES:
        raise InvalidKeyError(f"{what} {value[:40]!r}... is {size} bytes; at most 255 allowed")
    return value


def check_key(key: str) -> str:
    """Return ``key`` if every slash-separated component is safe, else raise InvalidKeyError."""
    if isinstance(key, str) and key.isascii() and _SAFE_ASCII_KEY.fullmatch(key):
        return key  # (every call of a provider checks its key: one match, not one per part)
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"key {key!r} is empty or not a string")
    try:
        for part in key.split("/"):
            check_component(part, f"component {part!r} of key")
    except InvalidKeyError as e:
        e.key = key
        raise
    return key


def all_keys_safe(keys: Sequence[str]) -> bool:
    """Whether every one of ``keys`` passes :func:`check_key`, known from one match over them
    all (a wide round's calls name thousands); False when any may not: the caller then checks
    each with :func:`check_key`, which says which and why."""
    if not keys:
        return True
    try:
        joined = "\n".join(keys)
    except TypeError:  # (one is not a string)
        return False
    return joined.isascii() and _SAFE_ASCII_KEYS.fullmatch(joined) is not None


def is_key(key: str) -> bool:
    """Whether ``key`` passes :func:`check_key` (listings skip foreign names that do not)."""
    try:
        check_key(key)
    except InvalidKeyError:
        return False
    return True


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a safe listing prefix.

    ``""`` lists everything; ``"a/b/"`` lists below a directory; ``"a/b/c"`` also matches ``c…``.
    """
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"prefix {prefix!r} is not a string")
    if not prefix:
        return prefix
    *dirs, last = prefix.split("/")
    for part in dirs:
        check_component(part, f"component {part!r} of prefix")
    if last:
        check_component(last, f"last component {last!r} of prefix")
    return prefix


def logical_path(broker: str, topic: str, queue_id: int) -> str:
    """``MessageStoreUtil.toFilePath``: ``broker-a/TopicTest/3`` (the metadata key)."""
    if not 0 <= queue_id <= 2**31 - 1:
        raise InvalidKeyError(f"queue id {queue_id!r} is not in 0..2147483647")
    check_component(broker, "broker name")
    check_component(topic, "topic")
    return f"{broker}/{topic}/{queue_id}"


def index_logical_path(broker: str) -> str:
    """``MessageStoreUtil.getIndexFilePath``: ``broker-a/rmq_sys_INDEX/0``."""
    return logical_path(broker, INDEX_TOPIC, 0)


class SegmentAddress(NamedTuple):
    """The coordinates of one segment; ``key`` is its provider key."""

    cluster: str
    broker: str
    topic: str
    queue_id: int
    file_type: FileType
    base_offset: int

    @property
    def logical_path(self) -> str:
        """``{broker}/{topic}/{queueId}``."""
        return logical_path(self.broker, self.topic, self.queue_id)

    @property
    def key(self) -> str:
        """The relative key, identical to the Java Posix path below ``tieredStoreFilePath``."""
        return "/".join(
            (
                cluster_dir_name(self.cluster),
                self.logical_path,
                self.file_type.value,
                offset_to_file_name(self.base_offset),
            )
        )

    @classmethod
    def parse(cls, key: str) -> SegmentAddress | None:
        """The address a key names, or ``None`` if the key is not in the segment layout."""
        parts = key.split("/")
        if len(parts) != 6:
            return None
        cluster_dir, broker, topic, queue, kind, name = parts
        hashed, sep, cluster = cluster_dir.partition("_")
        if not sep or not queue.isdigit() or kind not in FileType.__members__:
            return None
        try:
            address = cls(
                cluster, broker, topic, int(queue), FileType[kind], file_name_to_offset(name)
            )
            ok = address.key == key
        except InvalidKeyError:
            return None
        return address if ok and hashed == _md5_prefix(cluster) else None


def segment_key(
    cluster: str, broker: str, topic: str, queue_id: int, file_type: FileType, base_offset: int
) -> str:
    """The key of a segment: ``212d6b50_DefaultCluster/broker-a/TopicTest/3/COMMIT_LOG/cfcd…``
    (:attr:`SegmentAddress.key`, without making the address)."""
    return (
        f"{cluster_dir_name(cluster)}/{logical_path(broker, topic, queue_id)}/"
        f"{file_type.value}/{offset_to_file_name(base_offset)}"
    )
