"""The broker's ``config/*.json``: fastjson dialect, ``.bak`` fallback, typed models (spec §1.5).

fastjson writes integer map keys unquoted (``{0:23,1:23}``), which :func:`parse_fastjson` accepts
(bare ``-?digits`` keys right after ``{`` or ``,`` are quoted; string literals are copied verbatim,
so digits inside values are never touched). Loading follows the broker's ``ConfigManager.load``:
a missing, empty or unparseable (or wrongly shaped) ``X`` falls back to ``X.bak``, which is what
a reader racing a broker persist (rename ``X`` -> ``X.bak``, then write a fresh ``X``) needs.
Fallbacks are logged; nothing is ever written, moved or deleted in the broker's directory.

:func:`dumps_fastjson` writes fastjson's pretty format (``\\n``, one TAB per level, no space after
``:``, integer keys bare and without a line break) for the store generator.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Final
from typing import TypeVar

import msgspec

from tiered.broker.fastjson import dumps_fastjson
from tiered.broker.fastjson import parse_fastjson
from tiered.errors import CorruptStoreFileError
from tiered.errors import StoreFileNotFoundError

log = logging.getLogger(__name__)

# --- typed models -------------------------------------------------------------------------------


class _Bean(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    """camelCase on disk, snake_case in code; properties this model does not know are kept in
    :attr:`extra` (newer brokers add some), written back by :func:`bean`. Read with
    :func:`parse`: fastjson's lax values (``"8"`` for 8, ``"true"``) are taken as Java takes
    them."""

    extra: dict[str, Any] = msgspec.field(default_factory=dict, name="@extra")
    """The properties of the file's object that no field names (set by :func:`parse`)."""


class DataVersion(_Bean, kw_only=True, frozen=True):
    """``{"counter":N,"stateVersion":N,"timestamp":ms}``; 3.x brokers spelled it ``timestatmp``."""

    counter: int = 0
    state_version: int = 0
    timestamp: int = 0


class TopicConfig(_Bean, kw_only=True, frozen=True):
    """One entry of ``topicConfigTable``. ``perm``: 4 read, 2 write, 1 inherit, 8 priority."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = msgspec.field(default_factory=dict)


class TopicsConfig(_Bean, kw_only=True, frozen=True):
    """``topics.json``."""

    data_version: DataVersion | None = None
    topic_config_table: dict[str, TopicConfig] = msgspec.field(default_factory=dict)

    @property
    def topics(self) -> dict[str, TopicConfig]:
        """``topicConfigTable``: topic name -> config."""
        return self.topic_config_table


class ConsumerOffsets(_Bean, kw_only=True, frozen=True):
    """``consumerOffset.json``: ``offsetTable["topic@group"] = {queueId: nextConsumeOffset}``."""

    data_version: DataVersion | None = None
    offset_table: dict[str, dict[int, int]] = msgspec.field(default_factory=dict)

    def by_topic_group(self) -> dict[tuple[str, str], dict[int, int]]:
        """The offset table keyed by ``(topic, group)`` (topic and group never contain ``@``)."""
        out: dict[tuple[str, str], dict[int, int]] = {}
        for key, offsets in self.offset_table.items():
            topic, sep, group = key.partition("@")
            if not sep:
                log.warning("consumerOffset.json: ignoring key %r without '@'", key)
                continue
            out[topic, group] = offsets
        return out


class SubscriptionGroupConfig(_Bean, kw_only=True, frozen=True):
    """One entry of ``subscriptionGroupTable`` (defaults are the broker's)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    group_retry_policy: dict[str, Any] | None = None
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    subscription_data_set: list[dict[str, Any]] | None = None
    attributes: dict[str, str] = msgspec.field(default_factory=dict)


class SubscriptionGroups(_Bean, kw_only=True, frozen=True):
    """``subscriptionGroup.json``."""

    data_version: DataVersion | None = None
    subscription_group_table: dict[str, SubscriptionGroupConfig] = msgspec.field(
        default_factory=dict
    )
    forbidden_table: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)


class DelayOffsets(_Bean, kw_only=True, frozen=True):
    """``delayOffset.json``: ``offsetTable = {delayLevel: offset}``; queue id = level - 1."""

    data_version: DataVersion | None = None
    offset_table: dict[int, int] = msgspec.field(default_factory=dict)

    def queue_offsets(self) -> dict[int, int]:
        """The offsets keyed by ``SCHEDULE_TOPIC_XXXX`` queue id."""
        return {level - 1: offset for level, offset in self.offset_table.items()}


ConfigModel = TopicsConfig | ConsumerOffsets | SubscriptionGroups | DelayOffsets
CONFIG_KINDS: Final[dict[str, type[ConfigModel]]] = {
    "topics.json": TopicsConfig,
    "consumerOffset.json": ConsumerOffsets,
    "subscriptionGroup.json": SubscriptionGroups,
    "delayOffset.json": DelayOffsets,
}
M = TypeVar("M", bound=_Bean)


def config_kind(path: str | os.PathLike[str]) -> type[ConfigModel] | None:
    """The model for a config file by its name (``X`` or ``X.bak``), ``None`` if not modelled."""
    return CONFIG_KINDS.get(Path(path).name.removesuffix(".bak"))


def parse(model: type[M], data: dict[str, Any]) -> M:
    """``data`` (a file's object, as :func:`parse_fastjson` reads it) as ``model``, unknown
    properties in :attr:`_Bean.extra` (of the model and of each table entry).

    Raises:
        msgspec.ValidationError: a property has a value of the wrong type.
    """
    return _with_extra(msgspec.convert(_respelled(data), model, strict=False), data)


def _respelled(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a 3.x broker's ``timestatmp`` read as ``timestamp``, in it or in its
    ``dataVersion``."""
    if "timestatmp" in data and "timestamp" not in data:
        data = {**data, "timestamp": data["timestatmp"]}
    version = data.get("dataVersion")
    if isinstance(version, dict) and "timestatmp" in version and "timestamp" not in version:
        data = {**data, "dataVersion": _respelled(version)}
    return data


def _with_extra(got: M, data: dict[str, Any]) -> M:
    """``got`` with the properties of ``data`` that no field of it names in its ``extra``, and
    so each model in it (its ``dataVersion``, the entries of its tables)."""
    names, known = _fields(type(got))
    changes: dict[str, Any] = {}
    extra = {k: v for k, v in data.items() if k not in known}
    if extra:
        changes["extra"] = extra
    for name, encoded in names:
        value, raw = getattr(got, name), data.get(encoded)
        if not isinstance(raw, dict):
            continue
        if isinstance(value, _Bean):
            model = _with_extra(value, raw)
            if model is not value:
                changes[name] = model
        elif isinstance(value, dict):
            models = {k: v for k, v in value.items() if isinstance(v, _Bean) and k in raw}
            redone = {k: _with_extra(v, raw[k]) for k, v in models.items()}
            if any(v is not models[k] for k, v in redone.items()):
                changes[name] = {**value, **redone}
    return msgspec.structs.replace(got, **changes) if changes else got


_Fields = tuple[tuple[tuple[str, str], ...], frozenset[str]]
_FIELDS: dict[type[_Bean], _Fields] = {}


def _fields(model: type[_Bean]) -> _Fields:
    """A model's fields as ``(name, property)``, and the properties it knows (made once)."""
    got = _FIELDS.get(model)
    if got is None:
        fields = tuple((f.name, f.encode_name) for f in msgspec.structs.fields(model))
        spelled = {"timestatmp"} if model is DataVersion else set()
        got = _FIELDS[model] = (fields, frozenset({e for _, e in fields} | spelled))
    return got


_EXTRA: Final = "@extra"
""":attr:`_Bean.extra`'s name in :func:`msgspec.to_builtins`' output (no Java bean property
can be named so)."""


def bean(model: _Bean) -> dict[str, Any]:
    """A model as fastjson writes a bean: camelCase properties (its :attr:`~_Bean.extra` ones
    among them) in alphabetical order, and so each model in it."""
    plain: dict[str, Any] = _plain(msgspec.to_builtins(model))
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if not isinstance(value, dict):
        return value
    if _EXTRA not in value:
        return {k: _plain(v) for k, v in value.items()}
    fields = {k: _plain(v) for k, v in value.items() if k != _EXTRA}  # a model's
    fields.update(value[_EXTRA])
    return {k: fields[k] for k in sorted(fields)}


# --- loading ------------------------------------------------------------------------------------


def _read_one(path: Path) -> Any:
    """Parsed content of ``path``; ``None`` if it is missing or empty."""
    try:
        with open(path, "rb") as fh:  # read-only
            raw = fh.read()
    except FileNotFoundError:
        return None
    text = raw.decode("utf-8")
    return parse_fastjson(text) if text.strip() else None


def _load(path: str | os.PathLike[str], convert: type[M] | None, *, use_bak: bool) -> Any:
    primary = Path(path)
    candidates = [primary]
    if use_bak and primary.suffix != ".bak":
        candidates.append(primary.with_name(primary.name + ".bak"))
    problems: list[str] = []
    corrupt = False
    for candidate in candidates:
        try:
            data = _read_one(candidate)
            if data is None:
                problems.append(f"{candidate.name} missing or empty")
                continue
            if not isinstance(data, dict):
                raise ValueError(f"top level is a {type(data).__name__}, not an object")
            result = parse(convert, data) if convert is not None else data
        except (ValueError, msgspec.ValidationError) as e:  # JSONDecodeError, UnicodeDecodeError
            problems.append(f"{candidate.name} unparseable ({str(e).splitlines()[0]})")
            corrupt = True
            continue
        if problems:
            log.warning("%s: %s; using %s", primary, "; ".join(problems), candidate.name)
        return result
    if not corrupt:
        raise StoreFileNotFoundError(
            f"{primary}: {'; '.join(problems)}; point storePathRootDir at the broker's store"
        )
    raise CorruptStoreFileError(
        f"{primary}: {'; '.join(problems)}; retry (a broker may be writing it) or repair the file",
        path=str(primary),
    )


def load_config_json(path: str | os.PathLike[str], *, use_bak: bool = True) -> dict[str, Any]:
    """The parsed content of a broker config file, falling back to ``X.bak`` as the broker does.

    Raises:
        StoreFileNotFoundError: neither ``X`` nor ``X.bak`` exists (or both are empty).
        CorruptStoreFileError: nothing usable could be parsed.
    """
    data: dict[str, Any] = _load(path, None, use_bak=use_bak)
    return data


def _typed(path: str | os.PathLike[str], model: type[M], use_bak: bool) -> M:
    result: M = _load(path, model, use_bak=use_bak)
    return result


def load_topics(path: str | os.PathLike[str], *, use_bak: bool = True) -> TopicsConfig:
    """``topics.json`` (see :func:`load_config_json` for the fallback and errors)."""
    return _typed(path, TopicsConfig, use_bak)


def load_consumer_offsets(path: str | os.PathLike[str], *, use_bak: bool = True) -> ConsumerOffsets:
    """``consumerOffset.json`` (see :func:`load_config_json` for the fallback and errors)."""
    return _typed(path, ConsumerOffsets, use_bak)


def load_subscription_groups(
    path: str | os.PathLike[str], *, use_bak: bool = True
) -> SubscriptionGroups:
    """``subscriptionGroup.json`` (see :func:`load_config_json` for the fallback and errors)."""
    return _typed(path, SubscriptionGroups, use_bak)


def load_delay_offsets(path: str | os.PathLike[str], *, use_bak: bool = True) -> DelayOffsets:
    """``delayOffset.json`` (see :func:`load_config_json` for the fallback and errors)."""
    return _typed(path, DelayOffsets, use_bak)


def load_config(
    path: str | os.PathLike[str], *, use_bak: bool = True
) -> ConfigModel | dict[str, Any]:
    """A config file as its typed model, chosen by file name; other files as a plain dict."""
    model = config_kind(path)
    if model is None:
        return load_config_json(path, use_bak=use_bak)
    return _typed(path, model, use_bak)


# --- writing (the store generator) --------------------------------------------------------------


def dump_topics_json(
    topics: Mapping[str, TopicConfig] | Iterable[TopicConfig],
    *,
    data_version: DataVersion | None = None,
) -> str:
    """``topics.json`` text as a broker writes it (fastjson pretty, properties alphabetical).

    Topics are written in the given order (the broker's own order is its hash map's).
    """
    configs = list(topics.values()) if isinstance(topics, Mapping) else list(topics)
    table = {t.topic_name: bean(t) for t in configs}
    return dumps_fastjson(
        {"dataVersion": bean(data_version or DataVersion()), "topicConfigTable": table}
    )
