"""Listening sockets of the sidecar's servers (the HTTP API, the replay endpoint), and the
timeouts of connected ones.

Bound up front, in the caller's thread, so that a host or port that cannot be used stops
start-up with one line naming the configuration key and the fix -- not a log line in a server's
thread. Port 0 picks any free port (the socket tells which).
"""

from __future__ import annotations

import socket
import struct

from tiered.errors import ConfigError


def bind(
    host: str, port: int, *, keys: tuple[str, str], backlog: int | None = None
) -> socket.socket:
    """A TCP socket bound to ``host:port`` (listening when ``backlog`` is given); ``keys`` are
    the host and port keys named in errors.

    Raises:
        ConfigError: the host does not resolve, or the port cannot be bound.
    """
    host_key, port_key = keys
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise ConfigError(
            f"{host_key}={host!r} cannot be resolved ({e}): give an address of this host, e.g. "
            "127.0.0.1 or 0.0.0.0"
        ) from e
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        if backlog is not None:
            sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise ConfigError(
            f"{port_key}={port} on {host_key}={host!r} cannot be bound ({e.strerror or e}): "
            "choose a free port, or 0 for any"
        ) from e
    return sock


def kernel_timeouts(sock: socket.socket, seconds: float) -> None:
    """Time out a blocking ``sock``'s receives and sends after ``seconds`` in the kernel
    (``SO_RCVTIMEO``/``SO_SNDTIMEO``; a receive that runs out raises ``BlockingIOError``) rather
    than with Python's socket timeout, which polls before every ``recv`` and ``sendmsg``: two
    system calls more per pull."""
    sock.settimeout(None)
    seconds = max(seconds, 1e-6)  # a zero timeval means never
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
