"""A real RocketMQ beside the sidecar: name server, broker, the Java client and ``mqadmin``,
run from the Maven Central jars that ``make rmq`` copies into ``.rmq/<version>/lib``
(``tests/realbroker/pom.xml``).

:class:`Runtime` is the classpath and the Java driver (``tests/realbroker/java/Driver.java``,
compiled once per source digest); :class:`NameServer` and :class:`Broker` are JVMs on loopback,
started with a readiness line and a deadline, stopped with SIGTERM (SIGKILL after a grace), their
logs kept for a failing test; :meth:`Runtime.driver` runs one driver command and returns its JSON
lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RMQ_VERSION = os.environ.get("RMQ_VERSION", "5.3.3")
"""The RocketMQ release the tests run (``make test RMQ_VERSION=...`` tries another)."""
DRIVER_SOURCE = REPO / "tests" / "realbroker" / "java" / "Driver.java"

SERVER_FLAGS = (
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "-XX:+UseG1GC",
    "-XX:-OmitStackTraceInFastThrow",
)
"""JDK 17 flags of upstream's scripts that still apply (the broker casts to
``sun.nio.ch.DirectBuffer`` on some paths)."""
CLIENT_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""Short-lived client and admin JVMs: a small heap and the quick JIT tier."""


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_ports() -> range:
    """The ports the kernel hands out to outgoing connections and to binds of port 0."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(low, high + 1)


def free_port() -> int:
    """A free port below the ephemeral range (10000 up), so that no connection another test
    opens meanwhile takes it (or its neighbours) before the server binds it; the kernel's own
    choice where that range leaves no room."""
    low = _ephemeral_ports().start
    if low > 12_000:
        for _ in range(200):
            port = random.randrange(10_000, low)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_port() -> int:
    """A listen port P with P-2 (the broker's fast server) and P+1 (its HA port) free too."""
    for _ in range(200):
        p = free_port()
        if p > 1024 and all(_bindable(x) for x in (p - 2, p + 1)):
            return p
    raise RuntimeError("no free port P with P-2 and P+1 free on 127.0.0.1")


@dataclass(frozen=True)
class Runtime:
    """The RocketMQ jars of one version and the compiled Java driver."""

    lib: Path
    classes: Path
    home: Path
    """``user.home`` and ``ROCKETMQ_HOME`` of every JVM started here (logs land below it)."""
    version: str = RMQ_VERSION

    @classmethod
    def prepare(cls, home: Path, version: str = RMQ_VERSION) -> Runtime:
        """The runtime of ``version``: its jars must have been copied by ``make rmq``; the driver
        is compiled into ``.rmq/<version>/driver-<digest>`` unless already there."""
        base = REPO / ".rmq" / version
        lib = base / "lib"
        if not (lib / f"rocketmq-broker-{version}.jar").is_file():
            raise RuntimeError(
                f"RocketMQ {version} jars missing in {lib}: run `make rmq RMQ_VERSION={version}` "
                "(`make test` does it; it needs Maven and Maven Central)"
            )
        digest = hashlib.sha256(DRIVER_SOURCE.read_bytes()).hexdigest()[:12]
        classes = base / f"driver-{digest}"
        if not (classes / "Driver.class").is_file():
            tmp = base / f"driver-{digest}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            javac = shutil.which("javac")
            assert javac is not None, "javac (JDK 17) must be on the PATH"
            subprocess.run(
                [javac, "-nowarn", "-encoding", "UTF-8", "-d", tmp, "-cp", f"{lib}/*",
                 DRIVER_SOURCE],
                check=True, capture_output=True,
            )  # fmt: skip
            with contextlib.suppress(OSError):
                tmp.rename(classes)
            shutil.rmtree(tmp, ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        return cls(lib, classes, home, version)

    def java(self, main: str, *args: str, role: str, flags: tuple[str, ...] = ()) -> list[str]:
        """A ``java`` command line for ``main`` with the logback config of ``role``."""
        java = shutil.which("java")
        assert java is not None, "java (JDK 17) must be on the PATH"
        return [
            java,
            *flags,
            f"-Duser.home={self.home}",
            f"-Drocketmq.home.dir={self.home}",
            f"-Drmq.logback.configurationFile=rmq.{role}.logback.xml",
            "-cp",
            f"{self.classes}{os.pathsep}{self.lib}/*",
            main,
            *args,
        ]

    def env(self) -> dict[str, str]:
        return dict(os.environ, ROCKETMQ_HOME=str(self.home), TZ="UTC")

    def driver(
        self, command: str, java_flags: tuple[str, ...] = (), **args: Any
    ) -> list[dict[str, Any]]:
        """Run ``Driver <command> <args as JSON>``; its JSON lines (the last is ``{"done": true}``).
        A non-zero exit or a missing last line fails with the driver's stderr. The driver dumps
        its threads and exits 240 s after its ``maxMs`` + ``retryMs``; this waits 60 s more."""
        timeout = 300 + (int(args.get("maxMs", 0)) + int(args.get("retryMs", 0))) / 1000
        cmd = self.java(
            "Driver", command, json.dumps(args), role="client", flags=CLIENT_FLAGS + java_flags
        )
        try:
            done = subprocess.run(
                cmd, capture_output=True, timeout=timeout, env=self.env(), check=False
            )
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"")[-3000:].decode("utf-8", "replace")
            err = (e.stderr or b"")[-20000:].decode("utf-8", "replace")
            raise AssertionError(f"Driver {command} ran over {timeout} s:\n{out}\n{err}") from e
        out = done.stdout.decode("utf-8", "replace")
        err = done.stderr.decode("utf-8", "replace")
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert done.returncode == 0 and lines and lines[-1].get("done"), (
            f"Driver {command} exited {done.returncode}:\n{out[-3000:]}\n{err[-6000:]}"
        )
        return lines[:-1]

    def spawn(self, command: str, **args: Any) -> DriverRun:
        """Start ``Driver <command>`` in the background (:meth:`DriverRun.wait` collects it)."""
        cmd = self.java("Driver", command, json.dumps(args), role="client", flags=CLIENT_FLAGS)
        out = self.home / f"driver-{time.monotonic_ns()}.out"
        with out.open("wb") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=self.env())
        return DriverRun(command, proc, out)

    def mqadmin(self, namesrv: str, *commands: list[str]) -> list[str]:
        """What each ``mqadmin`` sub-command printed (run in one JVM, as the mqadmin script runs
        ``MQAdminStartup``); ``-n namesrv`` is added to each."""
        lines = self.driver("admin", commands=[[*c, "-n", namesrv] for c in commands])
        return [str(line["admin"]["output"]) for line in lines if "admin" in line]


@dataclass
class DriverRun:
    """A driver command running in the background."""

    command: str
    proc: subprocess.Popen[bytes]
    out: Path

    def lines(self) -> list[dict[str, Any]]:
        text = self.out.read_text("utf-8", "replace")
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def wait(self, timeout: float = 300.0) -> list[dict[str, Any]]:
        """Its JSON lines once it exited 0 (else fail with its output)."""
        code = self.proc.wait(timeout=timeout)
        lines = self.lines()
        output = self.out.read_text("utf-8", "replace")[-6000:]
        assert code == 0 and lines and lines[-1].get("done"), (
            f"Driver {self.command} exited {code}:\n{output}"
        )
        return lines[:-1]


@dataclass
class JavaServer:
    """A JVM server started with a readiness line in its stdout."""

    runtime: Runtime
    name: str
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.{self.starts}.out"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_line(self) -> bytes:
        raise NotImplementedError

    def start(self, timeout: float = 90.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the JVM without waiting for it (then :meth:`wait_ready`)."""
        assert self.proc is None, f"{self.name} is already running"
        self.starts += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.runtime.env(),
                cwd=self.workdir, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until the server printed its readiness line (fail if it exits first)."""
        assert self.proc is not None, f"{self.name} was not launched"
        deadline = time.monotonic() + timeout
        while self.ready_line() not in self.log.read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready in {timeout} s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, size: int = 4000) -> str:
        text = self.log.read_text("utf-8", "replace") if self.log.exists() else ""
        return text[-size:]

    def stop(self, grace: float = 60.0) -> int:
        """SIGTERM (the shutdown hooks flush), SIGKILL after ``grace`` seconds; the exit code."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs (the broker recovers abnormally at its next start)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None


@dataclass
class NameServer(JavaServer):
    port: int = 0

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    def command(self) -> list[str]:
        conf = self.workdir / "namesrv.conf"
        conf.write_text(
            f"listenPort={self.port}\nbindAddress=127.0.0.1\n"
            f"kvConfigPath={self.workdir / 'kvConfig.json'}\n"
        )
        return self.runtime.java(
            "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf), role="namesrv",
            flags=(*SERVER_FLAGS, "-Xms128m", "-Xmx256m"),
        )  # fmt: skip

    def ready_line(self) -> bytes:
        return b"The Name Server boot success"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


BROKER_DEFAULTS: dict[str, object] = {
    "brokerClusterName": "RealCluster",
    "brokerName": "broker-a",
    "brokerId": 0,
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "brokerIP1": "127.0.0.1",
    "brokerIP2": "127.0.0.1",
    "bindAddress": "127.0.0.1",
    "mappedFileSizeCommitLog": 4 << 20,  # files roll after a few MiB
    "maxMessageSize": 2 << 20,  # a body of 1 MiB plus its header and properties
    "mappedFileSizeConsumeQueue": 6000,  # 300 units a file
    "maxHashSlotNum": 5000,
    "maxIndexNum": 20000,
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "defaultTopicQueueNums": 4,
    "timerWheelEnable": "false",
    "deleteWhen": "04",
    "fileReservedTime": 72,
    "cleanResourceInterval": 1000,
    "destroyMapedFileIntervalForcibly": 1000,
    "redeleteHangedFileInterval": 1000,
    "deleteCommitLogFilesInterval": 0,
    "deleteConsumeQueueFilesInterval": 0,
}
"""A small broker.conf: small commitlog, consumequeue and index files so that they roll."""


@dataclass
class Broker(JavaServer):
    namesrv: str = ""
    conf_keys: dict[str, object] = field(default_factory=dict)
    port: int = 0
    started_at: float = 0.0
    """time.time() of the last start (the broker's file-cleaning task first runs 60 s later)."""

    def __post_init__(self) -> None:
        self.port = self.port or broker_port()

    @property
    def store(self) -> Path:
        return self.workdir / "store"

    @property
    def conf(self) -> Path:
        """The broker.conf it runs with (``updateBrokerConfig`` rewrites it)."""
        return self.workdir / "broker.conf"

    def settings(self) -> dict[str, object]:
        keys = dict(BROKER_DEFAULTS)
        keys.update(
            namesrvAddr=self.namesrv,
            listenPort=self.port,
            haListenPort=self.port + 1,
            storePathRootDir=self.store,
        )
        keys.update(self.conf_keys)
        return keys

    def command(self) -> list[str]:
        if not self.conf.exists():
            self.conf.write_text("".join(f"{k}={v}\n" for k, v in self.settings().items()))
        return self.runtime.java(
            "org.apache.rocketmq.broker.BrokerStartup", "-c", str(self.conf), role="broker",
            flags=(*SERVER_FLAGS, "-Xms512m", "-Xmx1g", "-XX:MaxDirectMemorySize=512m"),
        )  # fmt: skip

    def ready_line(self) -> bytes:
        return b"boot success"

    def start(self, timeout: float = 90.0) -> None:
        super().start(timeout)
        self.started_at = time.time()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def broker_name(self) -> str:
        return str(self.settings()["brokerName"])

    @property
    def cluster(self) -> str:
        return str(self.settings()["brokerClusterName"])

    def disk_used_percent(self) -> float:
        """The store's disk usage as the broker computes it (``UtilAll``: used / (used +
        usable)): above 85 % its cleaning task deletes every commitlog file but the last, expired
        or not -- a history written while the disk is that full is gone before it is read."""
        st = os.statvfs(self.store if self.store.exists() else self.workdir)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        return 100.0 * used / max(1, used + st.f_bavail * st.f_frsize)

    def wait_registered(self, timeout: float = 60.0) -> None:
        """Until ``mqadmin clusterList`` shows this broker at its address."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.runtime.mqadmin(self.namesrv, ["clusterList"])[0]
            if self.address in out:
                return
            assert time.monotonic() < deadline, f"{self.address} not in clusterList:\n{out}"
            time.sleep(1)


@contextlib.contextmanager
def running(*servers: JavaServer) -> Iterator[None]:
    """Start ``servers`` in order, stop them in reverse order at the end."""
    started: list[JavaServer] = []
    try:
        for s in servers:
            s.start()
            started.append(s)
        yield
    finally:
        for s in reversed(started):
            s.stop()
