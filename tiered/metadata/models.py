"""The tiered metadata document: upstream's ``tieredStoreMetadata.json`` schema (spec §7).

Versioning: the schema *is* upstream's (RocketMQ 5.x ``DefaultMetadataStore``, fastjson 1.2.83),
so a Java broker and this sidecar can read each other's file. It has no version field and we add
none (an unknown top-level key would make the file less upstream-shaped); a future schema change
would be recognised by its shape in :func:`parse_metadata`, the one function every reader goes
through. Unknown keys inside entities are ignored on read (fastjson does the same).

Reading accepts fastjson's bare integer map keys (``{0:{...},1:{...}}``); writing
(:func:`dump_metadata`) emits standard JSON with quoted keys, TAB-indented, entity properties in
upstream's ``@JSONField(ordinal)`` order, which fastjson reads back identically.

The records are msgspec structs: decoded and checked from the file's bytes in one pass of compiled
code, a fraction of the memory of a general model per record (hundreds of thousands at 100,000
queues), and cheap to import for the one-shot commands. Code that builds records passes the
declared types (the type checker holds it to that); what comes from a file or a journal is checked.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from collections.abc import Mapping
from enum import IntEnum
from typing import Annotated
from typing import Any
from typing import Final
from typing import Self

import msgspec

from tiered.errors import MetadataError
from tiered.process import native

__all__ = [
    "LONG_MAX",
    "STATUS_DELETED",
    "STATUS_NEW",
    "STATUS_SEALED",
    "FileSegmentMetadata",
    "FileSegmentType",
    "MessageQueue",
    "MetadataDocument",
    "QueueMetadata",
    "SegmentTable",
    "TopicMetadata",
    "dump_metadata",
    "dump_metadata_json",
    "dump_metadata_parts",
    "parse_metadata",
]

LONG_MAX: Final = 9223372036854775807
"""``Long.MAX_VALUE``: an unset begin/end timestamp."""
_LONG_MIN: Final = -(2**63)
_INT_MAX: Final = 2**31 - 1

STATUS_NEW: Final = 0
STATUS_SEALED: Final = 1
STATUS_DELETED: Final = 2

I64 = Annotated[int, msgspec.Meta(ge=_LONG_MIN, le=LONG_MAX)]
"""A Java ``long``; strict, as every field: ``true``, ``"5"`` and ``5.0`` are rejected."""
I32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=_INT_MAX)]
"""A Java ``int``."""


class FileSegmentType(IntEnum):
    """The segment kind; the value is upstream's ``FileSegmentType`` code in the JSON.

    Upstream maps an unknown code to COMMIT_LOG when it picks a table, but only ever writes these
    three, so :func:`parse_metadata` rejects any other code as damage.
    """

    COMMIT_LOG = 0
    CONSUME_QUEUE = 1
    INDEX = 2


class _Entity(msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """camelCase on disk, snake_case in code; fields declared in upstream's JSON order. Records
    hold no references back, so the cyclic collector never needs to look at them (``gc``)."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy, with ``update`` (Python names) applied."""
        return msgspec.structs.replace(self, **(update or {}))

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """A record of ``data`` (camelCase keys, as in the file), checked.

        Raises:
            msgspec.ValidationError: a field is missing or of the wrong type or range.
        """
        return msgspec.convert(data, cls, str_keys=True)


class TopicMetadata(_Entity, kw_only=True):
    """One ``topicMetadataTable`` entry; ``reserve_time`` is hours, only ``> 0`` overrides."""

    topic_id: I64
    topic: str
    status: I32 = 0
    reserve_time: I64 = -1
    update_timestamp: I64


class MessageQueue(msgspec.Struct, kw_only=True, rename="camel", gc=False, frozen=True):
    """``{brokerName, queueId, topic}`` (alphabetical, as fastjson writes this plain bean)."""

    broker_name: str
    queue_id: Annotated[int, msgspec.Meta(ge=0, le=_INT_MAX)]
    topic: str


class QueueMetadata(_Entity, kw_only=True):
    """One ``queueMetadataTable`` entry; min/max stay -1 on a Java broker (spec §7.3)."""

    queue: MessageQueue
    min_offset: I64 = -1
    max_offset: I64 = -1
    update_timestamp: I64


class FileSegmentMetadata(_Entity, kw_only=True):
    """One segment record; ``path`` is the logical flat-file path ``{broker}/{topic}/{queueId}``."""

    path: str
    type: FileSegmentType
    base_offset: I64
    status: I32 = STATUS_NEW
    size: I64 = 0
    create_timestamp: I64
    begin_timestamp: I64 = LONG_MAX
    end_timestamp: I64 = LONG_MAX
    seal_timestamp: I64 = 0


SegmentTable = dict[str, dict[int, FileSegmentMetadata]]
"""logical path -> base offset -> segment record."""

_TABLE_FIELDS: Final = {
    FileSegmentType.COMMIT_LOG: "commit_log_file_segment_table",
    FileSegmentType.CONSUME_QUEUE: "consume_queue_file_segment_table",
    FileSegmentType.INDEX: "index_file_segment_table",
}


class MetadataDocument(msgspec.Struct, kw_only=True, rename="camel"):
    """The whole file; top-level properties alphabetical, as fastjson writes them.

    :func:`parse_metadata` and :meth:`model_validate` check that every record agrees with the
    keys it is filed under (segment path, base offset and type; queue topic and id; topic name),
    as upstream's store always writes. Code that files records keeps them so.
    """

    commit_log_file_segment_table: SegmentTable = msgspec.field(default_factory=dict)
    consume_queue_file_segment_table: SegmentTable = msgspec.field(default_factory=dict)
    index_file_segment_table: SegmentTable = msgspec.field(default_factory=dict)
    queue_metadata_table: dict[str, dict[int, QueueMetadata]] = msgspec.field(default_factory=dict)
    topic_metadata_table: dict[str, TopicMetadata] = msgspec.field(default_factory=dict)
    topic_serial_number: I64 = -1

    def segment_table(self, type: FileSegmentType) -> SegmentTable:
        """The table holding segments of ``type`` (the live dict, not a copy)."""
        table: SegmentTable = getattr(self, _TABLE_FIELDS[type])
        return table

    def model_copy(self, *, deep: bool = False) -> MetadataDocument:
        """A copy: of the tables (``deep``: of every record too, in one compiled pass)."""
        if deep:
            return _MSGPACK_DECODER.decode(msgspec.msgpack.encode(self))
        return msgspec.structs.replace(self)

    @classmethod
    def model_validate(cls, data: Any) -> MetadataDocument:
        """A document of ``data`` (a whole or partial document as JSON gives it), checked.

        Raises:
            MetadataError: a record is of the wrong shape or filed under the wrong key.
        """
        doc = _convert_tables(data, source=None)
        _check_keys(doc)
        return doc


_MSGPACK_DECODER: Final = msgspec.msgpack.Decoder(MetadataDocument)
_FIELDS: Final = msgspec.structs.fields(MetadataDocument)
_KEYS: Final = {f.encode_name: f for f in _FIELDS}
_KEYS_BY_NAME: Final = {f.name: f.encode_name for f in _FIELDS}
_REQUIRED_KEYS: Final = tuple(f.encode_name for f in _FIELDS if f.name != "topic_serial_number")
_DECODERS: Final = {f.encode_name: msgspec.json.Decoder(f.type) for f in _FIELDS}


def _check_keys(doc: MetadataDocument) -> None:
    problems: list[str] = []
    for kind, field in _TABLE_FIELDS.items():
        name = _KEYS_BY_NAME[field]
        for path, by_base in getattr(doc, field).items():
            for base, seg in by_base.items():
                if seg.path != path or seg.base_offset != base or seg.type is not kind:
                    problems.append(
                        f"{name}[{path!r}][{base}] holds path={seg.path!r} "
                        f"baseOffset={seg.base_offset} type={seg.type.name}"
                    )
    for topic, by_id in doc.queue_metadata_table.items():
        for queue_id, meta in by_id.items():
            if meta.queue.topic != topic or meta.queue.queue_id != queue_id:
                problems.append(
                    f"queueMetadataTable[{topic!r}][{queue_id}] holds topic="
                    f"{meta.queue.topic!r} queueId={meta.queue.queue_id}"
                )
    for topic, topic_meta in doc.topic_metadata_table.items():
        if topic_meta.topic != topic:
            problems.append(f"topicMetadataTable[{topic!r}] holds topic={topic_meta.topic!r}")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" * (len(problems) > 3))
        raise MetadataError(f"records filed under the wrong key: {shown}")


def parse_metadata(text: str | bytes, *, source: str) -> MetadataDocument:
    """Parse and validate a metadata file (fastjson bare integer keys accepted).

    ``source`` names where the text came from (a path or a backend key) for the error message.

    Raises:
        MetadataError: the text is not JSON, is not the upstream shape, or is inconsistent.
    """
    if not text.strip():
        raise MetadataError(f"{source}: metadata file is empty; restore it from its .bak copy")
    try:
        doc = _parse_standard(text, source)
        if doc is None:
            doc = _parse_general(text, source)
        _check_keys(doc)
    except MetadataError as e:
        raise MetadataError(f"{source}: {e}; the file is damaged") from None
    return doc


def _parse_standard(text: str | bytes, source: str) -> MetadataDocument | None:
    """The document of a file in standard JSON (ours), parsed and checked by compiled code in
    one pass over each table (no intermediate Python objects); None when that does not give the
    answer the general path would -- fastjson's bare keys, damage, or a ``\\u`` escape
    (Python's parser and msgspec's may differ on a lone surrogate) -- so the general path
    decides and names the problem. A table of the wrong shape is named here."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if b"\\u" in data:
        return None
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:
        return None
    if any(key not in top for key in _REQUIRED_KEYS):
        return None
    tables: dict[str, Any] = {}
    for key, raw in top.items():
        field = _KEYS.get(key)
        if field is None:
            continue  # an unknown top-level key, ignored as fastjson does
        try:
            tables[field.name] = _DECODERS[key].decode(raw)
        except msgspec.ValidationError:
            return None  # the general path names every problem, with its keys
    return MetadataDocument(**tables)


def _parse_general(text: str | bytes, source: str) -> MetadataDocument:
    """The document of any other file: fastjson's bare integer keys are quoted and the result
    taken by the one-pass path when it can; otherwise (damage, a ``\\u`` escape) Python's
    parser and a check of each record that names every problem by its keys."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetadataError(f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    try:
        data: Any = json.loads(text)  # standard JSON, the C parser
    except ValueError:
        # a Java broker's file: its bare keys quoted by the kernel in one pass
        quoted = native.kernel().quote_bare_keys(text.encode("utf-8"))
        doc = _parse_standard(quoted, source)
        if doc is not None:
            return doc
        try:
            data = json.loads(quoted)
        except ValueError as e:  # json.JSONDecodeError
            raise MetadataError(f"not JSON ({e})") from e
    if not isinstance(data, dict):
        raise MetadataError(
            f"top level is a JSON {type(data).__name__}, not an object; "
            "this is not a tieredStoreMetadata.json"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in data]
    if missing:
        raise MetadataError(
            f"missing top-level keys {missing}; this is not a tieredStoreMetadata.json"
        )
    return _convert_tables(data, source)


def _convert_tables(data: Any, source: str | None) -> MetadataDocument:
    """A document of JSON values (string keys), each record checked; every problem is named by
    the keys it is filed under (the first three, and how many more)."""
    if not isinstance(data, dict):
        raise MetadataError(f"a document is a JSON object, not {type(data).__name__}")
    tables: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        field = _KEYS.get(key)
        if field is None:
            continue
        try:
            tables[field.name] = msgspec.convert(value, field.type, str_keys=True)
        except msgspec.ValidationError:
            problems += _problems(key, value, field.type)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise MetadataError("; ".join(problems[:3]) + more)
    return MetadataDocument(**tables)


def _problems(key: str, value: Any, kind: Any) -> list[str]:
    """What is wrong in table ``key``, record by record (the slow path, only for damage)."""
    depth = 0
    record = kind
    while getattr(record, "__origin__", None) is dict:
        record = record.__args__[1]
        depth += 1
    out: list[str] = []

    def walk(where: str, node: Any, level: int) -> None:
        if level == 0:
            try:
                msgspec.convert(node, record, str_keys=True)
            except msgspec.ValidationError as e:
                out.append(_where(where, str(e)))
            return
        if not isinstance(node, dict):
            out.append(f"{where}: Expected `object`, got `{_json_type(node)}`")
            return
        for name, inner in node.items():
            if level > 1 or depth == 1:
                walk(f"{where}[{name!r}]", inner, level - 1)
            else:
                if not (isinstance(name, int) or _INT_KEY.fullmatch(name)):
                    out.append(f"{where}[{name!r}]: Expected an integer key, got {name!r}")
                    continue
                walk(f"{where}[{int(name)}]", inner, level - 1)

    if depth == 0:
        try:
            msgspec.convert(value, kind, str_keys=True)
        except msgspec.ValidationError as e:
            out.append(_where(key, str(e)))
    else:
        walk(key, value, depth)
    return out


_INT_KEY: Final = re.compile(r"-?[0-9]+")


def _where(where: str, message: str) -> str:
    problem, _, at = message.rpartition(" - at `$")
    if not problem:
        return f"{where}: {message}"
    return f"{where}{at.rstrip('`')}: {problem}"


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "str", bool: "bool", int: "int", float: "float"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def dump_metadata(doc: MetadataDocument) -> str:
    """The document as standard JSON in fastjson's pretty layout (TABs, no space after ``:``).

    Map keys are quoted (``{"0":{...}}``), which fastjson reads like its own bare keys; entity
    properties follow upstream's order; non-ASCII text is written as UTF-8, not escaped.
    """
    return dump_metadata_json(doc).decode("utf-8")


def dump_metadata_json(doc: MetadataDocument) -> bytes:
    """:func:`dump_metadata` as the UTF-8 bytes written to the file."""
    return b"".join(dump_metadata_parts(doc))


_PART_FIELDS: Final = tuple(f for f in _FIELDS if f.name != "topic_serial_number")
"""The document's tables in its order (fastjson's: alphabetical); ``topicSerialNumber`` last."""
PART_ENTRIES: Final = 1024
"""Table entries (paths, topics) serialized together by :func:`dump_metadata_parts`."""


def dump_metadata_parts(doc: MetadataDocument, entries: int = PART_ENTRIES) -> Iterator[bytes]:
    """:func:`dump_metadata_json` in parts of at most ``entries`` table entries each, so the
    file (tens of MB at 100,000 queues) is written without its text ever whole in memory.

    Each part is msgspec's writer reformatted with one space of indentation (the entries one
    level deeper than on their own, as inside the document), laid out by the kernel in one pass
    (``fastjson_layout``); a document whose tables hold at most ``entries`` entries each is one
    part. The document must not change while the parts are taken.
    """
    layout = native.kernel().fastjson_layout
    encode, indent = msgspec.json.encode, msgspec.json.format
    if all(len(getattr(doc, f.name)) <= entries for f in _PART_FIELDS):  # small: at once
        yield layout(indent(encode(doc), indent=1))
        return
    yield b"{"
    for field in _PART_FIELDS:
        yield b'\n\t"' + field.encode_name.encode() + b'":'
        table: dict[Any, Any] = getattr(doc, field.name)
        if not table:
            yield b"{},"
            continue
        items = iter(table.items())
        lead = b"{"
        while chunk := dict(itertools.islice(items, entries)):
            raw = indent(encode(chunk), indent=1)
            # b'{\n "k": ...\n}' -> b'\n  "k": ...' (the braces off, every line one deeper)
            yield lead + layout(raw[1:-2].replace(b"\n", b"\n "))
            lead = b","
        yield b"\n\t},"
    yield b'\n\t"topicSerialNumber":%d\n}' % doc.topic_serial_number
