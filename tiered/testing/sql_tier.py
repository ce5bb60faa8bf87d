"""Tiers for the SQL tests and benchmarks: a generated store (v1/v2 messages, IPv6 hosts,
compressed bodies, non-ASCII properties, two keys a message) offloaded by the real dispatcher, its
key index sealed, compacted and uploaded -- and what ``fetch`` returns for every message, in the
shape a table row is compared with."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered.broker import message as msgcodec
from tiered.config import StorageLevel
from tiered.config import TieredConfig
from tiered.http.app import message_json
from tiered.metadata.models import FileSegmentType
from tiered.metadata.models import parse_metadata
from tiered.providers.layout import FileType
from tiered.providers.layout import segment_key
from tiered.read.message_store import TieredMessageStore
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sample_tier import write_conf

SPEC = rolling_spec(
    seed=5, topics=3, queues=3, messages=2400, java_client=True, user_property_fraction=0.3,
    client_ipv6_fraction=0.2, keys_per_message=2, max_body=500,
)  # fmt: skip
INDEX_KEYS: dict[str, Any] = {
    "tieredStoreIndexFileMaxHashSlotNum": 97,
    "tieredStoreIndexFileMaxIndexNum": 2000,
    "tieredIndexCompactionIntervalMs": 0,
}


@dataclass
class SqlTier:
    """A tier to query: its configuration file, what fetch returns per (topic, queue, offset)."""

    cfg: TieredConfig
    conf: Path
    fetched: dict[tuple[str, int, int], dict[str, Any]]

    @property
    def options(self) -> dict[str, str]:
        return {"config": str(self.conf)}


TierCopy = Callable[[], SqlTier]
"""A fixture's ``copy()``: the tier copied for one test (to damage it)."""


def fetch_everything(cfg: TieredConfig) -> dict[tuple[str, int, int], dict[str, Any]]:
    """What ``rmq-tiered fetch --json`` returns for every message the tier holds (FORCE)."""
    out = {}
    forced = cfg.model_copy(update={"tiered_storage_level": StorageLevel.FORCE})
    with TieredMessageStore.open_read_only(forced) as store:
        for flat in store.flat_store.files():
            offset = flat.min_offset()
            while offset < flat.commit_offset:
                result = store.get_message(flat.topic, flat.queue_id, offset, 1000)
                assert result.tier == "tiered" and result.units, (flat.path, offset, result)
                for u in result.units:
                    out[(flat.topic, flat.queue_id, u.queue_offset)] = message_json(u.data, "t")
                offset = result.next_begin_offset
    return out


def build(work: Path, backend: str, **keys: Any) -> SqlTier:
    tier = build_sample_tier(work, SPEC, backend, **INDEX_KEYS, **keys)
    try:
        index = tier.sidecar.index
        assert index is not None
        index.seal()
        assert {r.action for r in index.compact_sealed()} == {"uploaded"}
    finally:
        tier.sidecar.close()
    shutil.rmtree(work / "store")  # the broker is gone: only the tier answers
    return SqlTier(tier.cfg, write_conf(tier.cfg, work / "tiered.conf"), fetch_everything(tier.cfg))


def as_fetch_json(row: dict[str, Any]) -> dict[str, Any]:
    """A table row in the shape of ``rmq-tiered fetch --json`` (the fields both have)."""
    return {
        "topic": row["topic"],
        "queueId": row["queueId"],
        "queueOffset": row["queueOffset"],
        "physicalOffset": row["commitLogOffset"],
        "storeTimestamp": int(row["storeTimestamp"].timestamp() * 1000 + 0.5),
        "bornTimestamp": int(row["bornTimestamp"].timestamp() * 1000 + 0.5),
        "bornHost": row["bornHost"],
        "storeHost": row["storeHost"],
        "sysFlag": row["sysFlag"],
        "flag": row["flag"],
        "totalSize": row["storeSize"],
        "reconsumeTimes": row["reconsumeTimes"],
        "bodyCRC": row["bodyCrc"],
        "keys": row["keys"],
        "tags": row["tags"],
        "uniqKey": row["uniqKey"],
        "properties": dict(row["properties"]),
        "msgId": row["msgId"],
        "bodyBase64": base64.b64encode(row["body"]).decode("ascii"),
    }


def fetch_json(data: bytes) -> dict[str, Any]:
    want = message_json(data, "tiered")
    return {k: want[k] for k in as_fetch_json_keys()}


def as_fetch_json_keys() -> list[str]:
    return [
        "topic", "queueId", "queueOffset", "physicalOffset", "storeTimestamp", "bornTimestamp",
        "bornHost", "storeHost", "sysFlag", "flag", "totalSize", "reconsumeTimes", "bodyCRC",
        "keys", "tags", "uniqKey", "properties", "msgId", "bodyBase64",
    ]  # fmt: skip


def damageable(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A row whose body can be damaged by :func:`flip_body_byte`: IPv4 hosts (the body starts at
    byte 88), uncompressed, a body of more than 8 bytes."""
    hosts = msgcodec.BORNHOST_V6_FLAG | msgcodec.STOREHOST_V6_FLAG | msgcodec.COMPRESSED_FLAG
    return next(r for r in rows if r["sysFlag"] & hosts == 0 and len(r["body"]) > 8)


def flip_body_byte(tier: SqlTier, row: dict[str, Any]) -> tuple[str, int]:
    """Flip the first body byte of ``row``'s message (see :func:`damageable`) in its posix
    segment file; return the object key and the message's flat offset."""
    root = Path(tier.cfg.tiered_store_file_path)
    doc = parse_metadata(next(root.rglob("tieredStoreMetadata.json")).read_text(), source="test")
    path = f"broker-a/{row['topic']}/{row['queueId']}"
    segs = sorted(doc.segment_table(FileSegmentType.COMMIT_LOG)[path])
    flat = row["commitLogOffset"]
    base = max(b for b in segs if b <= flat)
    key = segment_key(
        tier.cfg.broker_cluster_name, "broker-a", row["topic"], row["queueId"],
        FileType.COMMIT_LOG, base,
    )  # fmt: skip
    f = root / key
    data = bytearray(f.read_bytes())
    at = flat - base + 88  # IPv4 hosts: the body follows byte 88
    data[at] ^= 0xFF
    f.write_bytes(bytes(data))
    return key, flat
