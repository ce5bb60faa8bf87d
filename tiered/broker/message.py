"""Codec of one commitlog message unit (spec §2): decode, encode, CRC, properties, compression.

Layout (big-endian), ``B``/``S`` = 8 for an IPv4 host, 20 for IPv6::

    0 TOTALSIZE i32 | 4 MAGIC i32 | 8 BODYCRC i32 | 12 QUEUEID i32 | 16 FLAG i32
    20 QUEUEOFFSET i64 | 28 PHYSICALOFFSET i64 | 36 SYSFLAG i32 | 40 BORNTIMESTAMP i64
    48 BORNHOST B | STORETIMESTAMP i64 | STOREHOST S | RECONSUMETIMES i32
    PREPAREDTXOFFSET i64 | BODYLEN i32 + body
    TOPICLEN (v1 i8, v2 i16) + topic | PROPLEN i16 + properties
"""

from __future__ import annotations

import base64
import mmap
import struct
import zlib
from typing import Final
from typing import NamedTuple

from tiered.broker.javautil import java_split_space
from tiered.errors import CorruptStoreFileError
from tiered.errors import UnsupportedStoreFeatureError

MAGIC_V1: Final = -626843481  # 0xDAA320A7
MAGIC_V2: Final = -626843477  # 0xDAA320AB
BLANK_MAGIC: Final = -875286124  # 0xCBD43194, end of a commitlog file
BLANK_HEADER_SIZE: Final = 8

# sysflag bits (spec §2.2)
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED: Final = 0x4
TRANSACTION_COMMIT: Final = 0x8
TRANSACTION_ROLLBACK: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOST_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80
COMPRESSION_TYPE_MASK: Final = 0x700

COMPRESSION_NAMES: Final = {1: "LZ4", 2: "ZSTD", 3: "ZLIB"}

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"

QUEUE_OFFSET_POSITION: Final = 20
PHYSICAL_OFFSET_POSITION: Final = 28
SYSFLAG_POSITION: Final = 36
BORN_HOST_POSITION: Final = 48
# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP
_HEAD: Final = struct.Struct(">iiiiiqqiq")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iq")  # reconsumeTimes, preparedTransactionOffset

MIN_UNIT_SIZE: Final = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2


def body_crc(body: bytes | memoryview) -> int:
    """The broker's body CRC: CRC-32/IEEE of the stored body with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def host_size(sys_flag: int, flag_bit: int) -> int:
    """Bytes of a host field (address + i32 port): 8 for IPv4, 20 for IPv6."""
    return 20 if sys_flag & flag_bit else 8


def unit_size(
    body_len: int,
    topic_len: int,
    props_len: int,
    *,
    v2: bool = False,
    born_v6: bool = False,
    store_v6: bool = False,
) -> int:
    """TOTALSIZE of a unit with these field lengths (spec §2.1 total-length rule)."""
    return (
        90
        + body_len
        + (2 if v2 else 1)
        + topic_len
        + props_len
        + (12 if born_v6 else 0)
        + (12 if store_v6 else 0)
    )


def encode_host(host: str) -> bytes:
    """``"1.2.3.4:10911"`` or ``"[fe80::1]:10911"`` → address bytes + i32 port."""
    import socket  # here: every command that decodes messages would pay for its import

    addr, _, port = host.rpartition(":")
    addr = addr.strip("[]")
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    try:
        return socket.inet_pton(family, addr) + _I32.pack(int(port))
    except (OSError, ValueError) as e:
        raise ValueError(f"host {host!r} is not 'ipv4:port' or '[ipv6]:port'") from e


def decode_host(raw: bytes | memoryview) -> str:
    """Address bytes + i32 port → ``"1.2.3.4:10911"`` / ``"[fe80::1]:10911"``."""
    import ipaddress  # here, as socket in encode_host

    raw = bytes(raw)
    port = _I32.unpack_from(raw, len(raw) - 4)[0]
    if len(raw) == 8:
        return f"{ipaddress.IPv4Address(raw[:4])}:{port}"
    return f"[{ipaddress.IPv6Address(raw[:16])}]:{port}"


def encode_properties(properties: dict[str, str]) -> bytes:
    """``name\\x01value\\x02`` for each entry with a value, in dict order (spec §2.6)."""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
    ).encode("utf-8")


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Java ``string2messageProperties``: short segments and empty names/values are dropped."""
    text = bytes(raw).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if len(item) < 3:
            continue
        sep = item.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(item) - 1:
            out[item[:sep]] = item[sep + 1 :]
    return out


def compression_type(sys_flag: int) -> str | None:
    """The compression a sysflag names (``None`` when the body is not compressed)."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    code = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    if code == 0:
        return "ZLIB"  # legacy: COMPRESSED without a type meant zlib
    return COMPRESSION_NAMES.get(code, f"UNKNOWN({code})")


def compression_bits(name: str) -> int:
    """The sysflag bits for a compressed body of ``name`` (``LZ4``, ``ZSTD`` or ``ZLIB``)."""
    codes = {v: k for k, v in COMPRESSION_NAMES.items()}
    return COMPRESSED_FLAG | (codes[name] << 8)


def compress_body(body: bytes, name: str) -> bytes:
    """Compress ``body`` with ``name`` (ZLIB at zlib's default level 6; the Java client's
    ``compressLevel`` is 5, which :mod:`.gen_java` uses for byte-equal bodies)."""
    if name == "ZLIB":
        return zlib.compress(body)
    if name == "LZ4":
        import lz4.frame  # the codecs are imported when a body needs one (start-up cost)

        return bytes(lz4.frame.compress(body))
    if name == "ZSTD":
        import zstandard

        return zstandard.ZstdCompressor().compress(body)
    raise UnsupportedStoreFeatureError(f"compression {name!r} is not one of LZ4, ZSTD, ZLIB")


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The producer's body: ``body`` decompressed as the sysflag says (as is if uncompressed)."""
    name = compression_type(sys_flag)
    if name is None:
        return body
    try:
        if name == "ZLIB":
            return zlib.decompress(body)
        if name == "LZ4":
            import lz4.frame

            return bytes(lz4.frame.decompress(body))
        if name == "ZSTD":
            import zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    except Exception as e:  # every codec raises its own type; all mean "not that format"
        raise CorruptStoreFileError(f"body is not valid {name} data: {e}") from e
    raise UnsupportedStoreFeatureError(
        f"sysflag {sys_flag:#x} names compression {name}, which RocketMQ does not define"
    )


class Message(NamedTuple):
    """One decoded commitlog unit. ``body`` is the stored (possibly compressed) body."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]
    store_host_raw: bytes = b""

    @property
    def version(self) -> str:
        """``"v1"`` or ``"v2"`` by the magic code."""
        return "v2" if self.magic == MAGIC_V2 else "v1"

    @property
    def crc_ok(self) -> bool:
        """Whether the stored body matches BODYCRC."""
        return body_crc(self.body) == self.body_crc

    @property
    def keys(self) -> list[str]:
        """Non-empty tokens of ``KEYS`` split on single spaces (Java ``split(" ")``)."""
        return [k for k in java_split_space(self.properties.get(PROPERTY_KEYS, "")) if k]

    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property, if any."""
        return self.properties.get(PROPERTY_TAGS)

    @property
    def compression(self) -> str | None:
        """The body's compression type, or ``None``."""
        return compression_type(self.sys_flag)

    def decompressed_body(self) -> bytes:
        """The body as the producer sent it."""
        return decompress_body(self.body, self.sys_flag)

    @property
    def offset_msg_id(self) -> str:
        """``MessageDecoder.createMessageId``: store host bytes + physical offset, uppercase hex."""
        return (self.store_host_raw + _I64.pack(self.physical_offset)).hex().upper()


def decode(
    buf: bytes | bytearray | memoryview | mmap.mmap, pos: int = 0, *, where: str = ""
) -> Message:
    """Decode the unit at ``buf[pos:]``.

    Raises:
        CorruptStoreFileError: the unit is truncated, has a bad magic, or its fields disagree with
            TOTALSIZE. ``where`` (a file name, an offset) is put into the message.
    """
    view = memoryview(buf)
    end_of_buf = len(view)
    prefix = f"{where}: " if where else ""

    def bad(msg: str) -> CorruptStoreFileError:
        return CorruptStoreFileError(f"{prefix}{msg}", offset=pos)

    if end_of_buf - pos < MIN_UNIT_SIZE:
        raise bad(
            f"truncated unit: {end_of_buf - pos} bytes left, a message needs >= {MIN_UNIT_SIZE}"
        )
    (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _HEAD.unpack_from(
        view, pos
    )
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise bad(f"bad magic code {magic & 0xFFFFFFFF:#010x} (expected 0xdaa320a7 or 0xdaa320ab)")
    if total < MIN_UNIT_SIZE or pos + total > end_of_buf:
        raise bad(f"TOTALSIZE {total} does not fit the {end_of_buf - pos} bytes that are left")
    end = pos + total
    p = pos + BORN_HOST_POSITION
    born_len = host_size(sys_flag, BORNHOST_V6_FLAG)
    store_len = host_size(sys_flag, STOREHOST_V6_FLAG)
    try:
        born_host = decode_host(view[p : p + born_len])
        p += born_len
        store_ts = _I64.unpack_from(view, p)[0]
        p += 8
        store_raw = bytes(view[p : p + store_len])
        store_host = decode_host(store_raw)
        p += store_len
        reconsume, prepared = _TAIL.unpack_from(view, p)
        p += 12
        body_len = _I32.unpack_from(view, p)[0]
        p += 4
        if body_len < 0 or p + body_len > end:
            raise bad(f"body length {body_len} overruns TOTALSIZE {total}")
        body = bytes(view[p : p + body_len])
        p += body_len
        if magic == MAGIC_V2:
            topic_len = _I16.unpack_from(view, p)[0]
            p += 2
        else:
            topic_len = _I8.unpack_from(view, p)[0] & 0xFF  # Java reads it signed
            p += 1
        topic = bytes(view[p : p + topic_len]).decode("utf-8", "replace")
        p += topic_len
        props_len = _I16.unpack_from(view, p)[0]
        p += 2
    except struct.error as e:
        raise bad(f"fields overrun TOTALSIZE {total}") from e
    if props_len < 0 or p + props_len != end:
        raise bad(
            f"field lengths (body {body_len}, topic {topic_len}, properties {props_len}) "
            f"disagree with TOTALSIZE {total}"
        )
    properties = decode_properties(view[p : p + props_len]) if props_len > 0 else {}
    return Message(
        total_size=total,
        magic=magic,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties=properties,
        store_host_raw=store_raw,
    )


def encode(
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    body: bytes,
    properties: dict[str, str] | bytes,
    born_timestamp: int,
    store_timestamp: int,
    born_host: str | bytes = "127.0.0.1:0",
    store_host: str | bytes = "127.0.0.1:10911",
    sys_flag: int = 0,
    flag: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    v2: bool | None = None,
) -> bytes:
    """Build the bytes of one unit exactly as ``CommitLog.DefaultAppendMessageCallback`` writes it.

    ``body`` is stored as given (compress it first and set the sysflag bits for a compressed
    message). Hosts are ``"ip:port"`` strings or :func:`encode_host` bytes; IPv6 hosts set the
    matching sysflag bits. ``v2=None`` picks v2 when the topic has
    more than 127 characters, as the broker does.
    """
    topic_raw = topic.encode("utf-8")
    props_raw = properties if isinstance(properties, bytes) else encode_properties(properties)
    born_raw = born_host if isinstance(born_host, bytes) else encode_host(born_host)
    store_raw = store_host if isinstance(store_host, bytes) else encode_host(store_host)
    if len(born_raw) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store_raw) == 20:
        sys_flag |= STOREHOST_V6_FLAG
    if v2 is None:
        v2 = len(topic) > 127
    if len(props_raw) > 32767:
        raise ValueError(f"properties are {len(props_raw)} bytes; the broker limit is 32767")
    total = (
        _HEAD.size
        + len(born_raw)
        + 8
        + len(store_raw)
        + 12
        + 4
        + len(body)
        + (2 if v2 else 1)
        + len(topic_raw)
        + 2
        + len(props_raw)
    )
    topic_len = struct.pack(">h", len(topic_raw)) if v2 else bytes([len(topic_raw) & 0xFF])
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_V2 if v2 else MAGIC_V1,
                body_crc(body),
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_timestamp,
            ),
            born_raw,
            _I64.pack(store_timestamp),
            store_raw,
            _TAIL.pack(reconsume_times, prepared_transaction_offset),
            _I32.pack(len(body)),
            body,
            topic_len,
            topic_raw,
            _I16.pack(len(props_raw)),
            props_raw,
        )
    )


def blank_unit(remaining: int) -> bytes:
    """The 8-byte BLANK header a broker writes when the next unit does not fit (spec §2.10)."""
    return _I32.pack(remaining) + _I32.pack(BLANK_MAGIC)


def store_timestamp_of(buf: bytes | memoryview, pos: int = 0) -> int:
    """The store timestamp of the unit at ``pos``, honouring an IPv6 born host."""
    sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    return int(
        _I64.unpack_from(buf, pos + BORN_HOST_POSITION + host_size(sys_flag, BORNHOST_V6_FLAG))[0]
    )


def to_json(m: Message) -> dict[str, object]:
    """The JSON form of a message shared by ``inspect --json``, ``fetch`` and the HTTP API."""
    body = m.decompressed_body()
    return {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "physicalOffset": m.physical_offset,
        "storeTimestamp": m.store_timestamp,
        "bornTimestamp": m.born_timestamp,
        "bornHost": m.born_host,
        "storeHost": m.store_host,
        "sysFlag": m.sys_flag,
        "flag": m.flag,
        "totalSize": m.total_size,
        "reconsumeTimes": m.reconsume_times,
        "bodyCRC": m.body_crc,
        "crcOk": m.crc_ok,
        "magic": m.version,
        "compression": m.compression,
        "keys": m.keys,
        "tags": m.tags,
        "uniqKey": m.properties.get(PROPERTY_UNIQ_KEY),
        "properties": dict(m.properties),
        "offsetMsgId": m.offset_msg_id,
        "bodyBase64": base64.b64encode(body).decode("ascii"),
    }
