"""A real RocketMQ Proxy (5.3.3, cluster mode) and the Java gRPC driver for the real-broker
tests: the proxy's name server is a sidecar's replay port or the replay name server of the
many-brokers setup; ``GrpcDriver`` (``rocketmq-client-java``) consumes through it."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered.testing.realbroker import CLIENT_FLAGS
from tiered.testing.realbroker import REPO
from tiered.testing.realbroker import SERVER_FLAGS
from tiered.testing.realbroker import JavaServer
from tiered.testing.realbroker import Runtime
from tiered.testing.realbroker import free_port

GRPC_DRIVER = REPO / "tests" / "realbroker" / "java" / "GrpcDriver.java"
PROXY_FLAGS = ("-Dtls.server.mode=disabled",)
"""The proxy's remoting port without TLS: its TLS engine would want netty's OpenSSL classes,
left off the broker's classpath (see pom.xml); the gRPC port keeps its own."""
GRPC_LIB = REPO / ".rmq" / "grpc-client" / "lib"
"""rocketmq-client-java and what the driver needs, apart from the broker's jars (``make rmq``)."""


@dataclass
class Proxy(JavaServer):
    """A RocketMQ Proxy in cluster mode whose name server is ``namesrv``."""

    namesrv: str = ""
    cluster: str = ""
    sync_topic: str = ""
    """Its ``heartbeatSyncerTopicName`` (empty: the proxy's default)."""
    grpc_port: int = 0
    remoting_port: int = 0

    def __post_init__(self) -> None:
        self.grpc_port = self.grpc_port or free_port()
        self.remoting_port = self.remoting_port or free_port()

    def command(self) -> list[str]:
        conf = self.workdir / "rmq-proxy.json"
        settings = {
            "rocketMQClusterName": self.cluster,
            "namesrvAddr": self.namesrv,
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port,
            "minInvisibleTimeMillsForRecv": 1000,
        }
        if self.sync_topic:
            settings["heartbeatSyncerTopicName"] = self.sync_topic
        conf.write_text(json.dumps(settings))
        return self.runtime.java(
            "org.apache.rocketmq.proxy.ProxyStartup", "-pc", str(conf), "-pm", "cluster",
            role="proxy", flags=(*SERVER_FLAGS, "-Xms128m", "-Xmx512m", *PROXY_FLAGS),
        )  # fmt: skip

    def ready_line(self) -> bytes:
        return b"rocketmq-proxy startup successfully"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def compile_grpc_driver(out: Path) -> Path:
    """``GrpcDriver`` compiled into ``out``."""
    return compiling_grpc_driver(out)()


def compiling_grpc_driver(out: Path) -> Callable[[], Path]:
    """Start compiling ``GrpcDriver`` into ``out``; the returned call waits for it (and fails
    with javac's output if it failed) and gives ``out``."""
    javac = shutil.which("javac")
    assert javac is not None, "javac (JDK 17) must be on the PATH"
    assert (GRPC_LIB / "rocketmq-client-java-5.0.7.jar").is_file(), "run `make rmq`"
    proc = subprocess.Popen(
        [javac, "-nowarn", "-encoding", "UTF-8", "-d", out, "-cp", f"{GRPC_LIB}/*", GRPC_DRIVER],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip

    # read (and close) javac's output at once, on a thread: a caller that fails before it
    # waits leaves no open pipe behind
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(proc.communicate()[0]), daemon=True)
    reader.start()

    def done() -> Path:
        reader.join()
        assert proc.returncode == 0, f"javac GrpcDriver.java failed:\n{b''.join(output).decode()}"
        return out

    return done


def run_grpc_driver(
    rocketmq: Runtime, classes: Path, proxy: Proxy, command: str, timeout: float = 180,
    **args: Any,
) -> list[dict[str, Any]]:  # fmt: skip
    """Run ``GrpcDriver <command>`` against ``proxy``; its JSON lines (the last ``done``)."""
    cmd = rocketmq.java(
        "GrpcDriver", command, json.dumps({"endpoint": proxy.endpoint, **args}),
        role="client", flags=CLIENT_FLAGS,
    )  # fmt: skip
    cmd[cmd.index("-cp") + 1] = f"{classes}:{GRPC_LIB}/*"
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=rocketmq.env(), check=False
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines and lines[-1].get("done"), (
        f"GrpcDriver {command} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-6000:]}\n--- proxy ---\n{proxy.tail()}"
    )
    return lines
