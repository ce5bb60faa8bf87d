"""Frames: ``i32 length | i32 (serializeType << 24 | headerLength) | header | body``.

``length`` counts everything after itself. The header is JSON (serialize type 0) or upstream's
binary ``ROCKETMQ`` layout (type 1: ``code i16, language u8, version i16, opaque i32, flag i32,
remark (i32 length + UTF-8), extFields (i32 length + entries of i16 key length, key, i32 value
length, value)``). Requests are accepted in either; the endpoint answers with JSON headers whose
``extFields`` values are all strings (a C++ client re-pulls offset 0 forever on a number), and
reads numbers and booleans in requests as the strings Java would have sent.

:class:`FrameReader` cuts frames out of a byte stream and refuses, before buffering it, a frame
longer than its limit; :func:`decode` turns one frame into a :class:`Command` and :func:`encode`
back. Every malformed input is a :class:`~tiered.errors.ProtocolError` naming what is wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol
from typing import runtime_checkable

import orjson

from tiered.errors import ProtocolError

from .codes import ONEWAY_FLAG
from .codes import RESPONSE_FLAG

if TYPE_CHECKING:
    from .prepared import PreparedPulls

__all__ = ["JSON", "ROCKETMQ", "Channel", "Command", "FrameReader", "decode", "encode"]

JSON, ROCKETMQ = 0, 1
LANGUAGES = dict(enumerate(("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
                            "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS")))  # fmt: skip
_LANGUAGE_CODES = {name: code for code, name in LANGUAGES.items()}
_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
MIN_FRAME = 4  # the header-length word
# orjson: a pull's header in and out costs a fraction of the json module's time, and the header
# is a large share of what the endpoint's own Python spends on a pull
_JSON_OUT = orjson.dumps
_JSON_IN = orjson.loads


@runtime_checkable
class Channel(Protocol):
    """A client connection as the handlers see it: the key of the clients that sent their
    heartbeats on it, and a way to tell the client something."""

    closed: bool

    def __hash__(self) -> int: ...

    def push(self, command: Command) -> None:
        """Send ``command``, a one-way request of the endpoint's own, to the client soon (never
        waits for the client; a connection that closed meanwhile drops it)."""


@dataclass(slots=True)
class Command:
    """One request or response."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    body_parts: tuple[bytes | bytearray | memoryview, ...] = ()
    """a response body given as buffers written after ``body`` (a pull's runs of units, views
    of what was read): sent with one vectored write, never joined"""
    language: str = "JAVA"
    version: int = 0
    serialize_type: int = JSON
    peer: str = ""  # the sender's ip:port (set by the server; never encoded)
    prepared: PreparedPulls | None = field(default=None, compare=False, repr=False)
    """the connection's prepared pulls (set by the server; never encoded)"""
    channel: Channel | None = field(default=None, compare=False, repr=False)
    """the connection the request came on (set by the server; never encoded)"""

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        body_parts: Sequence[bytes | bytearray | memoryview] = (),
    ) -> Command:
        """The response to this request: ``opaque`` echoed, the response flag set."""
        return Command(
            code,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=ext_fields or {},
            body=body,
            body_parts=tuple(body_parts),
            version=self.version,
        )


def _as_text(value: object) -> str:
    """A JSON value as the string a Java client would have sent."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return str(value)


def _int_field(header: dict[str, Any], name: str, default: int | None = None) -> int:
    value = header.get(name, default)
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ProtocolError(f"header field {name!r}={value!r} is not a number", "bad_header")
    try:
        return int(value)
    except ValueError as e:
        raise ProtocolError(f"header field {name!r}={value!r} is not a number", "bad_header") from e


def _decode_json(raw: bytes) -> Command:
    try:
        header = _JSON_IN(raw)  # RocketMQ writes the JSON header in UTF-8
    except ValueError as e:  # orjson.JSONDecodeError, also for bytes that are not UTF-8
        raise ProtocolError(f"the JSON header does not parse ({e})", "not_json") from e
    if not isinstance(header, dict):
        raise ProtocolError("the JSON header is not an object", "not_json")
    ext = header.get("extFields") or {}
    if not isinstance(ext, dict):
        raise ProtocolError("extFields is not an object", "bad_header")
    remark = header.get("remark")
    language = header.get("language", "JAVA")
    return Command(
        code=_int_field(header, "code"),
        opaque=_int_field(header, "opaque", 0),
        flag=_int_field(header, "flag", 0),
        remark=None if remark is None else _as_text(remark),
        ext_fields={
            str(k): v if type(v) is str else _as_text(v) for k, v in ext.items() if v is not None
        },
        language=language if isinstance(language, str) else _as_text(language),
        version=_int_field(header, "version", 0),
        serialize_type=JSON,
    )


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(
                f"the ROCKETMQ header ends inside {what} ({n} bytes at {self.pos} of "
                f"{len(self.data)})",
                "bad_header",
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def text(self, length_struct: struct.Struct, what: str) -> str | None:
        (n,) = length_struct.unpack(self.take(length_struct.size, what))
        if n == 0:
            return None
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{what} is not UTF-8", "bad_header") from e


def _decode_rocketmq(raw: bytes) -> Command:
    cur = _Cursor(raw)
    code, language, version, opaque, flag = _FIXED.unpack(cur.take(_FIXED.size, "the fixed part"))
    remark = cur.text(_I32, "remark")
    (ext_len,) = _I32.unpack(cur.take(4, "the extFields length"))
    ext: dict[str, str] = {}
    if ext_len > 0:
        fields = _Cursor(cur.take(ext_len, "extFields"))
        while fields.pos < len(fields.data):
            key = fields.text(_I16, "an extFields key")
            value = fields.text(_I32, "an extFields value")
            if key is not None:
                ext[key] = value or ""
    return Command(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        language=LANGUAGES.get(language, "OTHER"),
        version=version,
        serialize_type=ROCKETMQ,
    )


def decode(frame: bytes | memoryview) -> Command:
    """A frame without its length field (header-length word, header, body) as a command.

    Raises:
        ProtocolError: the header length does not fit, the serialize type is unknown, or the
            header does not decode.
    """
    frame = memoryview(frame)  # the body is copied out once; the header is small
    if len(frame) < MIN_FRAME:
        raise ProtocolError(f"a frame of {len(frame)} bytes has no header length", "bad_length")
    (word,) = _I32.unpack_from(frame)
    kind, header_len = (word >> 24) & 0xFF, word & 0xFFFFFF
    if header_len > len(frame) - MIN_FRAME:
        raise ProtocolError(
            f"header length {header_len} does not fit the frame's {len(frame) - MIN_FRAME} bytes",
            "bad_length",
        )
    raw = bytes(frame[MIN_FRAME : MIN_FRAME + header_len])
    if kind == JSON:
        command = _decode_json(raw)
    elif kind == ROCKETMQ:
        command = _decode_rocketmq(raw)
    else:
        raise ProtocolError(
            f"serialize type {kind} is neither JSON (0) nor ROCKETMQ (1)", "serialize_type"
        )
    command.body = bytes(frame[MIN_FRAME + header_len :])
    return command


def _json_header(command: Command) -> bytes:
    ext = command.ext_fields
    header: dict[str, Any] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "extFields": (
            ext
            if all(type(v) is str for v in ext.values())
            else {k: v if type(v) is str else _as_text(v) for k, v in ext.items()}
        ),
        "serializeTypeCurrentRPC": "JSON",
    }
    if command.remark is not None:
        header["remark"] = command.remark
    return _JSON_OUT(header)


def _rocketmq_header(command: Command) -> bytes:
    def text(value: str | None, length: struct.Struct) -> bytes:
        data = (value or "").encode("utf-8")
        return length.pack(len(data)) + data

    ext = b"".join(text(k, _I16) + text(_as_text(v), _I32) for k, v in command.ext_fields.items())
    fixed = _FIXED.pack(
        command.code,
        _LANGUAGE_CODES.get(command.language, 7),
        command.version,
        command.opaque,
        command.flag,
    )
    return fixed + text(command.remark, _I32) + _I32.pack(len(ext)) + ext


def encode(command: Command, serialize_type: int = JSON) -> bytes:
    """The whole frame (length field included) with a JSON or ROCKETMQ header."""
    return b"".join(encode_parts(command, serialize_type))


def encode_parts(
    command: Command, serialize_type: int = JSON
) -> list[bytes | bytearray | memoryview]:
    """The frame as buffers: its head (length fields and header), then its body and body parts,
    uncopied: written with one vectored send, a pull's units go to the socket without being
    joined to each other or to the head."""
    header = _json_header(command) if serialize_type == JSON else _rocketmq_header(command)
    parts: list[bytes | bytearray | memoryview] = [command.body] if command.body else []
    parts += [p for p in command.body_parts if len(p)]
    size = sum(len(p) for p in parts)
    prefix = struct.pack(
        ">ii", MIN_FRAME + len(header) + size, (serialize_type << 24) | len(header)
    )
    return [prefix + header, *parts]


class FrameReader:
    """Cuts whole frames out of a byte stream; refuses a frame over ``max_frame_bytes``."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Append ``data``; the frames now complete (each without its length field).

        Raises:
            ProtocolError: a frame announces a length below 4 or above the limit.
        """
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        while len(buf) - pos >= 4:
            (length,) = _I32.unpack_from(buf, pos)
            if length < MIN_FRAME:
                raise ProtocolError(f"frame length {length} is below {MIN_FRAME}", "bad_length")
            if length > self.max_frame_bytes:
                raise ProtocolError(
                    f"frame length {length} is over tieredRemotingMaxFrameBytes="
                    f"{self.max_frame_bytes}",
                    "too_large",
                )
            if len(buf) - pos - 4 < length:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return frames
