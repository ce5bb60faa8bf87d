"""``rmq-tiered inspect``: decode the broker's store files (a table, or ``--json`` lines)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from tiered.broker import broker_index
from tiered.broker import checkpoint
from tiered.broker import configjson
from tiered.broker import consumequeue as cqmod
from tiered.broker import message as msgcodec
from tiered.broker import verify
from tiered.broker.commitlog import CommitLog
from tiered.broker.commitlog import list_files
from tiered.broker.commitlog import parse_file_name
from tiered.broker.commitlog import scan_file
from tiered.cli.common import EXIT_DATA_ERROR
from tiered.cli.common import Group
from tiered.cli.common import Rows
from tiered.cli.common import commitlog_file_size_option
from tiered.cli.common import console
from tiered.cli.common import emit_json
from tiered.cli.common import fail
from tiered.cli.common import warn

_path = click.Path(exists=True, path_type=Path)


def _iso(ms: int) -> str:
    if ms <= 0:
        return str(ms)
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


@click.group("inspect", cls=Group)
def inspect_group() -> None:
    """Decode broker store files: commitlog, consumequeue, checkpoint, config JSON, index."""


@inspect_group.command("commitlog")
@click.argument("target", type=_path)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
@click.option("--limit", type=int, default=0, help="Stop after this many messages (0 = all).")
def inspect_commitlog(target: Path, as_json: bool, limit: int) -> None:
    """Every message of a commitlog FILE, or of every file of a commitlog DIR.

    Exit status 1 when a file holds a corrupt unit or a body whose CRC does not match.
    """
    if target.is_dir():
        files = [(f.path, f.base) for f in list_files([target])]
        if not files:
            fail(f"{target} holds no commitlog files (20-digit names)")
    else:
        files = [(target, parse_file_name(target) or 0)]
    table = Rows(MESSAGE_HEADERS, right=("phys offset", "qid", "q offset", "size"))
    shown = 0
    problems = 0
    for path, base in files:
        count = 0
        for item in scan_file(path, base):
            if item.kind == "message" and item.message is not None:
                m = item.message
                count += 1
                if not m.crc_ok:
                    problems += 1
                    warn(
                        f"{path}: body CRC mismatch at position {item.position} (physical offset "
                        f"{item.offset}): stored {m.body_crc}, computed {msgcodec.body_crc(m.body)}"
                    )
                if limit and shown >= limit:
                    continue
                shown += 1
                if as_json:
                    emit_json(_message_json(m, path, item.position))
                else:
                    _add_message_row(table, m)
            elif item.kind == "corrupt":
                problems += 1
                warn(
                    f"{path}: corrupt unit at position {item.position} (physical offset "
                    f"{item.offset}): {item.reason}; the broker would truncate the log here"
                )
            elif not as_json:
                end = "a BLANK unit" if item.kind == "blank" else item.reason
                table.flush()
                console.print(
                    f"[dim]{path.name}: {count} messages, ends at position {item.position} "
                    f"with {end}[/dim]",
                )
    if not as_json:
        table.flush()
    if problems:
        raise SystemExit(EXIT_DATA_ERROR)


def _message_json(m: msgcodec.Message, path: Path, position: int) -> dict[str, Any]:
    out = msgcodec.to_json(m)
    out["file"] = str(path)
    out["filePosition"] = position
    return out


MESSAGE_HEADERS = (
    "phys offset", "topic", "qid", "q offset", "store time", "size", "flags", "crc", "tags",
    "keys", "body",
)  # fmt: skip
"""The columns of ``inspect commitlog``'s table."""


def _add_message_row(t: Rows, m: msgcodec.Message) -> None:
    body = m.decompressed_body()
    preview = body[:32].decode("utf-8", "replace") + ("…" if len(body) > 32 else "")
    flags = [m.version]
    if m.compression:
        flags.append(m.compression)
    if m.sys_flag & (msgcodec.BORNHOST_V6_FLAG | msgcodec.STOREHOST_V6_FLAG):
        flags.append("ipv6")
    t.add(
        str(m.physical_offset),
        m.topic,
        str(m.queue_id),
        str(m.queue_offset),
        _iso(m.store_timestamp),
        str(m.total_size),
        ",".join(flags),
        "ok" if m.crc_ok else "BAD",
        m.tags or "",
        " ".join(m.keys),
        repr(preview),
    )


@inspect_group.command("consumequeue")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per unit.")
@click.option(
    "--all", "show_all", is_flag=True, help="Also show the zero tail after the last unit."
)
def inspect_consumequeue(file: Path, as_json: bool, show_all: bool) -> None:
    """The units of a consumequeue FILE (named by its start byte offset), with queue offsets."""
    raw = file.read_bytes()
    units = cqmod.decode_units(raw, path=file)
    start = int(file.name) // cqmod.CQ_UNIT_SIZE if file.name.isdigit() else 0
    end = len(units) if show_all else cqmod.first_invalid(units)
    blank = cqmod.is_blank_unit(units)
    ext = cqmod.is_ext_tags_code(units["tags_code"])
    table = Rows(
        ("queue offset", "commitlog offset", "size", "tags code", "note"),
        right=("queue offset", "commitlog offset", "size", "tags code"),
    )
    for i in range(end):
        u = units[i]
        note = "pre-blank fill" if blank[i] else ("ConsumeQueueExt address" if ext[i] else "")
        row = {
            "queueOffset": start + i,
            "physicalOffset": int(u["offset"]),
            "size": int(u["size"]),
            "tagsCode": int(u["tags_code"]),
            "blank": bool(blank[i]),
            "extAddress": bool(ext[i]),
        }
        if as_json:
            emit_json(row)
        else:
            table.add(*(str(v) for v in list(row.values())[:4]), note)
    if not as_json:
        table.flush()
        console.print(
            f"[dim]{file.name}: {end} units from queue offset {start}; "
            f"{len(units) - cqmod.first_invalid(units)} unwritten slots[/dim]"
        )


@inspect_group.command("checkpoint")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def inspect_checkpoint(file: Path, as_json: bool) -> None:
    """The broker's checkpoint FILE (flush timestamps and HA offsets)."""
    ck = checkpoint.read_checkpoint(file)
    fields = dataclasses.asdict(ck)
    if as_json:
        emit_json({_camel(k): v for k, v in fields.items()})
        return
    table = Table("field", "value", "as time (UTC)")
    for k, v in fields.items():
        table.add_row(_camel(k), str(v), _iso(v) if k.endswith("timestamp") else "")
    console.print(table)


@inspect_group.command("config")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the parsed JSON on one line.")
def inspect_config(file: Path, as_json: bool) -> None:
    """A broker config JSON FILE (topics.json, consumerOffset.json, ...), fastjson dialect.

    Like the broker, a missing, empty or unparsable file falls back to FILE.bak (with a warning).
    """
    data = configjson.load_config_json(file)
    if as_json:
        emit_json(data)
        return
    table_data = data.get("topicConfigTable")
    if isinstance(table_data, dict):
        table = Rows(
            ("topic", "read queues", "write queues", "perm", "filter", "sysflag", "order"),
            right=("read queues", "write queues", "perm", "sysflag"),
        )
        for name, t in sorted(table_data.items()):
            table.add(
                name,
                str(t.get("readQueueNums")),
                str(t.get("writeQueueNums")),
                str(t.get("perm")),
                str(t.get("topicFilterType")),
                str(t.get("topicSysFlag")),
                str(t.get("order")),
            )
        table.flush()
    else:
        console.print_json(data=data)


@inspect_group.command("index")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--topic", required=True, help="Topic of the key.")
@click.option("--key", required=True, help="A KEYS token or a UNIQ_KEY.")
@click.option(
    "--slots",
    type=int,
    default=broker_index.DEFAULT_MAX_HASH_SLOT_NUM,
    show_default=True,
    help="The broker's maxHashSlotNum.",
)
@click.option(
    "--commitlog",
    "commitlog_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Also decode each hit from this commitlog directory.",
)
@click.option(
    "--commitlog-file-size",
    type=int,
    default=1 << 30,
    show_default=True,
    help="mappedFileSizeCommitLog, bytes (with --commitlog).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per hit.")
def inspect_index(
    file: Path,
    topic: str,
    key: str,
    slots: int,
    commitlog_dir: Path | None,
    commitlog_file_size: int,
    as_json: bool,
) -> None:
    """Look TOPIC#KEY up in a broker IndexFile (store/index/yyyyMMddHHmmssSSS)."""
    with broker_index.IndexFile.open(file, slots=slots) as idx:
        hits = idx.lookup(topic, key)
    log = CommitLog(commitlog_dir, commitlog_file_size) if commitlog_dir else None
    table = Table("physical offset", "store time", "message")
    for h in hits:
        m = log.read_message(h.phys_offset) if log else None
        if as_json:
            row: dict[str, Any] = {
                "physicalOffset": h.phys_offset,
                "storeTimestamp": h.store_timestamp,
            }
            if m is not None:
                row["message"] = msgcodec.to_json(m)
            emit_json(row)
        else:
            desc = f"{m.topic}/{m.queue_id}@{m.queue_offset} keys={m.keys}" if m else ""
            table.add_row(str(h.phys_offset), _iso(h.store_timestamp), desc)
    if not as_json:
        console.print(table)
        console.print(f"[dim]{len(hits)} hits for {topic}#{key}[/dim]")
    if not hits:
        raise SystemExit(EXIT_DATA_ERROR)


@inspect_group.command("store")
@click.argument("root", type=click.Path(exists=True, file_okay=False, path_type=Path))
@commitlog_file_size_option
@click.option(
    "--cq-file-size",
    type=int,
    default=cqmod.DEFAULT_CQ_FILE_SIZE,
    show_default=True,
    help="mappedFileSizeConsumeQueue, bytes.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue.")
def inspect_store(root: Path, commitlog_file_size: int, cq_file_size: int, as_json: bool) -> None:
    """A whole broker store under ROOT: every queue, cross-checked against the commitlog."""
    report = verify.check_store(root, commitlog_file_size, cq_file_size)
    table = Rows(
        ("topic", "queue", "min offset", "max offset", "checked", "unavailable", "problems"),
        right=("queue", "min offset", "max offset", "checked", "unavailable"),
    )
    for q in report.queues:
        if as_json:
            emit_json(
                {
                    "topic": q.topic,
                    "queueId": q.queue_id,
                    "minOffset": q.min_offset,
                    "maxOffset": q.max_offset,
                    "checked": q.checked,
                    "unavailable": q.unavailable,
                    "extTags": q.ext_tags,
                    "problems": q.problems,
                }
            )
        else:
            table.add(
                q.topic,
                str(q.queue_id),
                str(q.min_offset),
                str(q.max_offset),
                str(q.checked),
                str(q.unavailable),
                str(len(q.problems)),
            )
    if not as_json:
        table.flush()
    for p in report.problems:
        warn(p)
    if report.problems:
        raise SystemExit(EXIT_DATA_ERROR)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)
