"""The frame codec (hypothesis over the decoder and both header formats) and malformed input over
the wire: every bad frame is answered with one error or closes its connection, is counted, and
the endpoint keeps serving other connections."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered import metrics
from tiered.errors import ProtocolError
from tiered.remoting.client import RemotingClient
from tiered.remoting.codes import RESPONSE_FLAG
from tiered.remoting.codes import RequestCode
from tiered.remoting.codes import ResponseCode
from tiered.remoting.frame import JSON
from tiered.remoting.frame import ROCKETMQ
from tiered.remoting.frame import Command
from tiered.remoting.frame import FrameReader
from tiered.remoting.frame import decode
from tiered.remoting.frame import encode
from tiered.testing.sample_tier import SampleTier

from .conftest import TOPIC
from .conftest import EndpointFactory

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
commands = st.builds(
    Command,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | texts.filter(bool),
    ext_fields=st.dictionaries(texts.filter(bool), texts, max_size=6),
    body=st.binary(max_size=200),
    version=st.integers(0, 2**15 - 1),
)


@given(commands, st.sampled_from([JSON, ROCKETMQ]))
def test_a_command_survives_encoding_in_either_header_format(cmd: Command, kind: int) -> None:
    frame = encode(cmd, kind)
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    (got,) = FrameReader(1 << 20).feed(frame)
    back = decode(got)
    assert (back.code, back.opaque, back.flag, back.body) == (
        cmd.code,
        cmd.opaque,
        cmd.flag,
        cmd.body,
    )
    assert back.ext_fields == cmd.ext_fields and back.remark == cmd.remark
    assert back.serialize_type == kind


@given(st.binary(max_size=300), st.integers(1, 64))
@settings(max_examples=300)
def test_the_decoder_never_fails_but_with_a_protocol_error(data: bytes, cut: int) -> None:
    reader = FrameReader(256)
    reason = "none"
    try:
        for i in range(0, len(data), cut):  # arbitrary chunking of the stream
            for frame in reader.feed(data[i : i + cut]):
                decode(frame)
    except ProtocolError as e:
        reason = e.reason
    assert reason in {"none", "too_large", "bad_length", "bad_header", "serialize_type", "not_json"}


@given(st.lists(commands, min_size=1, max_size=5), st.integers(1, 50))
def test_frames_cut_anywhere_are_reassembled(cmds: list[Command], cut: int) -> None:
    stream = b"".join(encode(c) for c in cmds)
    reader = FrameReader(1 << 20)
    frames = []
    for i in range(0, len(stream), cut):
        frames += reader.feed(stream[i : i + cut])
    assert [decode(f).opaque for f in frames] == [c.opaque for c in cmds]
    assert reader.pending == 0


def test_json_values_are_read_as_java_would_send_them() -> None:
    header = json.dumps(
        {"code": 30, "opaque": "7", "flag": 0,
         "extFields": {"queueId": 3, "ok": True, "big": 1.0, "none": None}}
    ).encode()  # fmt: skip
    cmd = decode(struct.pack(">i", len(header)) + header)
    assert cmd.opaque == 7
    assert cmd.ext_fields == {"queueId": "3", "ok": "true", "big": "1"}


# --- over the wire --------------------------------------------------------------------------


def rejected(reason: str) -> float:
    value: float = metrics.REMOTING_REJECTED.labels(reason)._value.get()
    return value


def exchange(port: int, data: bytes, wait_s: float = 5.0) -> bytes:
    """Send ``data``, read until the server closes the connection; what it sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def works(port: int) -> bool:
    frame = encode(
        Command(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=1, ext_fields={"topic": TOPIC})
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(frame)
        (length,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        return decode(s.recv(length, socket.MSG_WAITALL)).code == ResponseCode.SUCCESS


def header_frame(word: int, header: bytes, length: int | None = None) -> bytes:
    size = 4 + len(header) if length is None else length
    return struct.pack(">ii", size, word) + header


GOOD = json.dumps({"code": 105, "opaque": 1, "extFields": {"topic": TOPIC}}).encode()
BAD_FRAMES = {
    "too_large": struct.pack(">i", 1 << 30) + b"x" * 100,
    "bad_length": header_frame(1000, b"{}"),  # header length beyond the frame
    "not_json": header_frame(9, b"not json!"),
    "serialize_type": header_frame((7 << 24) | len(GOOD), GOOD),
    "bad_header": header_frame((ROCKETMQ << 24) | 3, b"\x00\x01\x02"),
}


@pytest.mark.parametrize("reason", sorted(BAD_FRAMES))
def test_a_malformed_frame_is_answered_once_closed_and_counted(
    history: SampleTier, endpoint: EndpointFactory, reason: str
) -> None:
    ep = endpoint(history, server={"max_frame_bytes": 1 << 20})
    before = rejected(reason)
    answer = exchange(ep.server.port, BAD_FRAMES[reason])
    (length,) = struct.unpack_from(">i", answer)
    error = decode(answer[4 : 4 + length])
    assert error.code == ResponseCode.SYSTEM_ERROR and error.flag & RESPONSE_FLAG
    assert error.remark
    assert rejected(reason) == before + 1
    assert works(ep.server.port), "other connections go on"


def test_stalled_idle_and_surplus_connections_are_closed(
    history: SampleTier, endpoint: EndpointFactory
) -> None:
    ep = endpoint(
        history,
        server={"max_connections": 2, "frame_stall_s": 0.5, "idle_timeout_s": 1.0},
    )
    port = ep.server.port
    idle = rejected("idle")
    started = time.monotonic()
    assert exchange(port, b"\x00\x00\x01\x00half a frame") == b""  # stalled inside a frame
    assert 0.4 < time.monotonic() - started < 5
    started = time.monotonic()
    assert exchange(port, b"") == b""  # silent
    assert 0.9 < time.monotonic() - started < 5
    assert rejected("idle") == idle + 2
    surplus = rejected("too_many_connections")
    with (
        socket.create_connection(("127.0.0.1", port)),
        socket.create_connection(("127.0.0.1", port)),
    ):
        time.sleep(0.2)
        assert exchange(port, b"") == b""
        assert rejected("too_many_connections") == surplus + 1
    time.sleep(0.2)
    assert works(port)


def test_a_client_whose_server_never_answers_times_out() -> None:
    """The client's plain socket is timed out by the kernel (no poll before each call): a
    server that accepts and never answers is a TimeoutError after ``timeout_s``, not a hang."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with RemotingClient("127.0.0.1", port, timeout_s=0.3) as client:
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=r"no progress on the connection for 0\.3 s"):
                client.call(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId=0)
            assert 0.25 < time.monotonic() - started < 5


def test_the_client_receives_frames_of_any_size_into_one_kept_buffer() -> None:
    """Responses large and small, one after the other on one connection, come back whole and
    each its own (the receive buffer is reused: a body is never a view of it); a length word
    that cannot be a frame (too short, or over MAX_FRAME_BYTES: no buffer is made for it) is a
    ProtocolError, and a server that hangs up mid-frame a ConnectionError."""
    bodies = [bytes([i]) * n for i, n in enumerate([5 << 20, 7, 3 << 20, 0, 1 << 20])]
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                for opaque, body in enumerate(bodies, start=1):
                    conn.recv(65536)  # the request
                    conn.sendall(encode(Command(code=0, opaque=opaque, flag=1, body=body)))
                conn.recv(65536)
                conn.sendall(struct.pack(">i", 3))  # shorter than a header-length word
            conn1, _ = server.accept()
            with conn1:
                conn1.recv(65536)
                conn1.sendall(struct.pack(">i", 2**31 - 1))  # a corrupt stream: no 2 GiB buffer
            conn2, _ = server.accept()
            with conn2:
                conn2.recv(65536)
                conn2.sendall(struct.pack(">i", 100) + b"\0\0\0\x10")  # then hangs up

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        with RemotingClient("127.0.0.1", port, timeout_s=10) as client:
            got = [client.call(RequestCode.GET_MAX_OFFSET, topic=TOPIC).body for _ in bodies]
            assert got == bodies
            assert all(type(b) is bytes for b in got)
            with pytest.raises(ProtocolError, match="a frame length of 3 bytes"):
                client.call(RequestCode.GET_MAX_OFFSET, topic=TOPIC)
        with (
            RemotingClient("127.0.0.1", port, timeout_s=10) as client,
            pytest.raises(ProtocolError, match="2147483647 bytes from the server is over"),
        ):
            client.call(RequestCode.GET_MAX_OFFSET, topic=TOPIC)
        with (
            RemotingClient("127.0.0.1", port, timeout_s=10) as client,
            pytest.raises(ConnectionError, match="closed the connection"),
        ):
            client.call(RequestCode.GET_MAX_OFFSET, topic=TOPIC)
        thread.join(10)
