"""The tiered metadata document: upstream's ``tieredStoreMetadata.json`` schema (spec §7).

Versioning: the schema *is* upstream's (RocketMQ 5.x ``DefaultMetadataStore``, fastjson 1.2.83),
so a Java broker and this sidecar can read each other's file. It has no version field and we add
none (an unknown top-level key would make the file less upstream-shaped); a future schema change
would be recognised by its shape in :func:`parse_metadata`, the one function every reader goes
through. Unknown keys inside entities are ignored on read (fastjson does the same).

Reading accepts fastjson's bare integer map keys (``{0:{...},1:{...}}``); writing
(:func:`dump_metadata`) emits standard JSON with quoted keys, TAB-indented, entity properties in
upstream's ``@JSONField(ordinal)`` order, which fastjson reads back identically.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from enum import IntEnum
from typing import Annotated
from typing import Any
from typing import Final

from pydantic import BaseModel
from pydantic import BeforeValidator
from pydantic import ConfigDict
from pydantic import Field
from pydantic import Strict
from pydantic import TypeAdapter
from pydantic import ValidationError
from pydantic import model_validator
from pydantic.alias_generators import to_camel

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

I64 = Annotated[int, Strict(), Field(ge=_LONG_MIN, le=LONG_MAX)]
"""A Java ``long``; strict: ``true``, ``"5"`` and ``5.0`` are rejected."""
I32 = Annotated[int, Strict(), Field(ge=-(2**31), le=_INT_MAX)]
"""A Java ``int``."""


class FileSegmentType(IntEnum):
    """The segment kind; the value is upstream's ``FileSegmentType`` code in the JSON.

    Upstream maps an unknown code to COMMIT_LOG when it picks a table, but only ever writes these
    three, so :func:`parse_metadata` rejects any other code as damage.
    """

    COMMIT_LOG = 0
    CONSUME_QUEUE = 1
    INDEX = 2


_SEGMENT_TYPES: Final = {int(t): t for t in FileSegmentType}


def _segment_type(value: object) -> FileSegmentType:
    # Java writes only these three codes; anything else (incl. true, "1") is not its file.
    if isinstance(value, FileSegmentType):
        return value
    if type(value) is int and value in _SEGMENT_TYPES:
        return _SEGMENT_TYPES[value]  # a dict look-up: the enum's call costs more, per segment
    raise ValueError(
        f"segment type {value!r} is not 0 (COMMIT_LOG), 1 (CONSUME_QUEUE) or 2 (INDEX)"
    )


class _Entity(BaseModel):
    """camelCase on disk, snake_case in code; fields declared in upstream's JSON order."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", validate_assignment=True
    )


class TopicMetadata(_Entity):
    """One ``topicMetadataTable`` entry; ``reserve_time`` is hours, only ``> 0`` overrides."""

    topic_id: I64
    topic: str
    status: I32 = 0
    reserve_time: I64 = -1
    update_timestamp: I64


class MessageQueue(_Entity):
    """``{brokerName, queueId, topic}`` (alphabetical, as fastjson writes this plain bean)."""

    model_config = ConfigDict(frozen=True)

    broker_name: str
    queue_id: Annotated[int, Strict(), Field(ge=0, le=_INT_MAX)]
    topic: str


class QueueMetadata(_Entity):
    """One ``queueMetadataTable`` entry; min/max stay -1 on a Java broker (spec §7.3)."""

    queue: MessageQueue
    min_offset: I64 = -1
    max_offset: I64 = -1
    update_timestamp: I64


class FileSegmentMetadata(_Entity):
    """One segment record; ``path`` is the logical flat-file path ``{broker}/{topic}/{queueId}``."""

    path: str
    type: Annotated[FileSegmentType, BeforeValidator(_segment_type)]
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
_REQUIRED_KEYS: Final = (
    "commitLogFileSegmentTable",
    "consumeQueueFileSegmentTable",
    "indexFileSegmentTable",
    "queueMetadataTable",
    "topicMetadataTable",
)


class MetadataDocument(_Entity):
    """The whole file; top-level properties alphabetical, as fastjson writes them.

    Construction checks that every record agrees with the keys it is filed under (segment path,
    base offset and type; queue topic and id; topic name), as upstream's store always writes.
    Assignments are not re-validated (that check is O(document)).
    """

    model_config = ConfigDict(validate_assignment=False)

    commit_log_file_segment_table: SegmentTable = Field(default_factory=dict)
    consume_queue_file_segment_table: SegmentTable = Field(default_factory=dict)
    index_file_segment_table: SegmentTable = Field(default_factory=dict)
    queue_metadata_table: dict[str, dict[int, QueueMetadata]] = Field(default_factory=dict)
    topic_metadata_table: dict[str, TopicMetadata] = Field(default_factory=dict)
    topic_serial_number: I64 = -1

    def segment_table(self, type: FileSegmentType) -> SegmentTable:
        """The table holding segments of ``type`` (the live dict, not a copy)."""
        table: SegmentTable = getattr(self, _TABLE_FIELDS[type])
        return table

    @model_validator(mode="after")
    def _check_keys(self) -> MetadataDocument:
        problems: list[str] = []
        for kind, field in _TABLE_FIELDS.items():
            name = to_camel(field)
            for path, by_base in getattr(self, field).items():
                for base, seg in by_base.items():
                    share_fields_set(seg)
                    if seg.path != path or seg.base_offset != base or seg.type is not kind:
                        problems.append(
                            f"{name}[{path!r}][{base}] holds path={seg.path!r} "
                            f"baseOffset={seg.base_offset} type={seg.type.name}"
                        )
        for topic, by_id in self.queue_metadata_table.items():
            for queue_id, meta in by_id.items():
                share_fields_set(meta)
                share_fields_set(meta.queue)
                if meta.queue.topic != topic or meta.queue.queue_id != queue_id:
                    problems.append(
                        f"queueMetadataTable[{topic!r}][{queue_id}] holds topic="
                        f"{meta.queue.topic!r} queueId={meta.queue.queue_id}"
                    )
        for topic, topic_meta in self.topic_metadata_table.items():
            if topic_meta.topic != topic:
                problems.append(f"topicMetadataTable[{topic!r}] holds topic={topic_meta.topic!r}")
        if problems:
            shown = "; ".join(problems[:3]) + (
                f"; and {len(problems) - 3} more" * (len(problems) > 3)
            )
            raise ValueError(f"records filed under the wrong key: {shown}")
        return self


_ALL_FIELDS: dict[type[BaseModel], set[str]] = {}


def share_fields_set(model: BaseModel) -> None:
    """Give ``model`` its class's one shared set of every field name as its set of fields set,
    when it has them all (every record the sidecar writes or reads does): pydantic keeps a set
    per instance, 728 B of a segment record's 1.3 KB, hundreds of MB at 100,000 queues. pydantic
    only ever adds names to it (a no-op here) and copies it before a copy's update."""
    cls = type(model)
    full = _ALL_FIELDS.get(cls)
    if full is None:
        full = _ALL_FIELDS.setdefault(cls, set(cls.model_fields))
    if model.__pydantic_fields_set__ == full:
        object.__setattr__(model, "__pydantic_fields_set__", full)


def parse_metadata(text: str, *, source: str) -> MetadataDocument:
    """Parse and validate a metadata file (fastjson bare integer keys accepted).

    ``source`` names where the text came from (a path or a backend key) for the error message.

    Raises:
        MetadataError: the text is not JSON, is not the upstream shape, or is inconsistent.
    """
    if not text.strip():
        raise MetadataError(f"{source}: metadata file is empty; restore it from its .bak copy")
    doc = _parse_standard(text)
    if doc is not None:
        return doc
    try:
        data: Any = json.loads(text)  # our own files: standard JSON, the C parser
    except ValueError:
        from tiered.broker.configjson import parse_fastjson  # (its pydantic models: not here)

        try:
            data = parse_fastjson(text)  # a Java broker's: bare integer keys
        except ValueError as e:  # json.JSONDecodeError
            raise MetadataError(f"{source}: not JSON ({e}); the file is damaged") from e
    if not isinstance(data, dict):
        raise MetadataError(
            f"{source}: top level is a JSON {type(data).__name__}, not an object; "
            "this is not a tieredStoreMetadata.json"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in data]
    if missing:
        raise MetadataError(
            f"{source}: missing top-level keys {missing}; this is not a tieredStoreMetadata.json"
        )
    try:
        return MetadataDocument.model_validate(data)
    except ValidationError as e:
        raise MetadataError(f"{source}: {_describe(e)}; the file is damaged") from e


_REQUIRED_FIELDS: Final = frozenset(
    field for field in MetadataDocument.model_fields if to_camel(field) in _REQUIRED_KEYS
)


def _parse_standard(text: str) -> MetadataDocument | None:
    """The document of a file in standard JSON (ours), parsed and validated in one pass of
    pydantic's JSON parser (no intermediate Python objects); None when that does not give the
    answer :func:`parse_metadata` would -- fastjson's bare keys, damage, a missing table, or a
    ``\\u`` escape (Python's parser and pydantic's may differ on a lone surrogate) -- so the
    general path decides and names the problem."""
    if "\\u" in text:
        return None
    try:
        doc = MetadataDocument.model_validate_json(text)
    except ValidationError:
        return None
    return doc if doc.model_fields_set >= _REQUIRED_FIELDS else None


def _describe(error: ValidationError) -> str:
    details = error.errors(include_url=False)
    parts = []
    for detail in details[:3]:
        where = ".".join(str(part) for part in detail["loc"]) or "document"
        parts.append(f"{where}: {detail['msg']}")
    more = f" (and {len(details) - 3} more)" if len(details) > 3 else ""
    return "; ".join(parts) + more


def dump_metadata(doc: MetadataDocument) -> str:
    """The document as standard JSON in fastjson's pretty layout (TABs, no space after ``:``).

    Map keys are quoted (``{"0":{...}}``), which fastjson reads like its own bare keys; entity
    properties follow upstream's order; non-ASCII text is written as UTF-8, not escaped.
    """
    return dump_metadata_json(doc).decode("utf-8")


def dump_metadata_json(doc: MetadataDocument) -> bytes:
    """:func:`dump_metadata` as the UTF-8 bytes written to the file."""
    return b"".join(dump_metadata_parts(doc))


_PART_FIELDS: Final = tuple(f for f in MetadataDocument.model_fields if f != "topic_serial_number")
"""The document's tables in its order (fastjson's: alphabetical); ``topicSerialNumber`` last."""
PART_ENTRIES: Final = 1024
"""Table entries (paths, topics) serialized together by :func:`dump_metadata_parts`."""


@functools.cache
def _table_adapters() -> dict[str, TypeAdapter[Any]]:
    # built on first use: a TypeAdapter's schema costs milliseconds at import
    hints = MetadataDocument.model_fields
    return {field: TypeAdapter(hints[field].annotation or Any) for field in _PART_FIELDS}


def dump_metadata_parts(doc: MetadataDocument, entries: int = PART_ENTRIES) -> Iterator[bytes]:
    """:func:`dump_metadata_json` in parts of at most ``entries`` table entries each, so the
    file (tens of MB at 100,000 queues) is written without its text ever whole in memory.

    Each part is pydantic's writer with one space of indentation (the entries one level deeper
    than on their own, as inside the document), laid out by the kernel in one pass
    (``fastjson_layout``); a document whose tables hold at most ``entries`` entries each is one
    part. The document must not change while the parts are taken.
    """
    layout = native.kernel().fastjson_layout
    if all(len(getattr(doc, field)) <= entries for field in _PART_FIELDS):  # small: at once
        yield layout(doc.__pydantic_serializer__.to_json(doc, by_alias=True, indent=1))
        return
    yield b"{"
    for field, adapter in _table_adapters().items():
        yield b'\n\t"' + to_camel(field).encode() + b'":'
        table: dict[Any, Any] = getattr(doc, field)
        if not table:
            yield b"{},"
            continue
        items = iter(table.items())
        lead = b"{"
        while chunk := dict(itertools.islice(items, entries)):
            raw = adapter.dump_json(chunk, by_alias=True, indent=1)
            # b'{\n "k": ...\n}' -> b'\n  "k": ...' (the braces off, every line one deeper)
            yield lead + layout(raw[1:-2].replace(b"\n", b"\n "))
            lead = b","
        yield b"\n\t},"
    yield b'\n\t"topicSerialNumber":%d\n}' % doc.topic_serial_number
