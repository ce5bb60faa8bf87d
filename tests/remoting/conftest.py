"""Fixtures of the replay-endpoint tests: offloaded stores whose oldest history only the tier
holds, the endpoint in-process (over a :class:`SampleTier`) or as a real ``rmq-tiered run``, and
ali-ons -- a real third-party RocketMQ remoting client (``js/``, pinned in package-lock.json,
installed by ``make test``) -- driven through ``js/consume.js``.

The stores hold V1 messages with IPv4 hosts and uncompressed bodies: what ali-ons decodes (a
broker serves those clients the same bytes; the endpoint serves stored bytes unchanged).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tiered.access.security import Security
from tiered.broker import message as msgcodec
from tiered.broker.generator import GenSpec
from tiered.remoting.client import RemotingClient
from tiered.remoting.groups import ReplayOffsets
from tiered.remoting.handlers import Replay
from tiered.remoting.naming import Naming
from tiered.remoting.peers import Peers
from tiered.remoting.server import RemotingServer
from tiered.testing.sample_tier import SampleTier
from tiered.testing.sample_tier import build_sample_tier
from tiered.testing.sample_tier import rolling_spec
from tiered.testing.sidecar_process import Sidecar

JS = Path(__file__).parent / "js"
CONSUME_JS = JS / "consume.js"
TOPIC = "GenTopic0"


@pytest.fixture(scope="session")
def replay_spec() -> GenSpec:
    """4000 messages in 2 topics x 4 queues, 256 KiB commitlog files, 2 keys each, the broker's
    own index files written; V1, IPv4, uncompressed (what ali-ons decodes)."""
    return rolling_spec(
        seed=31, queues=4, messages=4000, v2_fraction=0.0, ipv6_fraction=0.0,
        compress_fraction=0.0, keys_per_message=2, with_index=True, index_slots=1000,
        index_max_items=20000,
    )  # fmt: skip


def build_history(work: Path, spec: GenSpec, deleted_files: int = 3, **keys: Any) -> SampleTier:
    """A posix tier of ``spec`` with the broker's oldest commitlog files deleted; expiry off; the
    broker's index geometry (``maxHashSlotNum``, ``maxIndexNum``) given as in its broker.conf."""
    keys.setdefault("tieredStoreFileReservedTime", 1_000_000)
    keys.setdefault("maxHashSlotNum", spec.index_slots)
    return build_sample_tier(work, spec, "posix", deleted_files=deleted_files, **keys)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, replay_spec: GenSpec) -> Iterator[SampleTier]:
    """One tier for a module's in-process tests (read-only ones share it)."""
    tier = build_history(tmp_path_factory.mktemp("history"), replay_spec)
    yield tier
    tier.sidecar.close()


@dataclass
class Endpoint:
    """An in-process endpoint over a tier, and a way to talk to it."""

    server: RemotingServer
    replay: Replay
    offsets: ReplayOffsets

    def client(self, **kw: Any) -> RemotingClient:
        return RemotingClient("127.0.0.1", self.server.port, **kw)


EndpointFactory = Callable[..., Endpoint]


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[EndpointFactory]:
    """``endpoint(tier, level=None, cfg_changes..., server=dict(...), security=None,
    peers=None)``:
    the replay endpoint over ``tier`` on a free port (stopped at the end of the test)."""
    started: list[RemotingServer] = []

    def make(
        tier: SampleTier,
        level: str | None = None,
        *,
        server: dict[str, Any] | None = None,
        security: Security | None = None,
        peers: Peers | None = None,
        **changes: Any,
    ) -> Endpoint:
        store = tier.store(level or tier.cfg.tiered_storage_level, **changes)
        offsets = ReplayOffsets(tmp_path / f"offsets-{len(started)}")
        offsets.load()
        holder: list[RemotingServer] = []
        replay = Replay(
            store.cfg,
            store,
            Naming(store.cfg, store, lambda: holder[0].address, peers),
            index=lambda: tier.sidecar.index,
            offsets=offsets,
            security=security,
        )
        srv = RemotingServer(
            replay, "127.0.0.1", 0, flush=offsets.flush, security=security, **(server or {})
        )
        holder.append(srv)
        srv.start()
        started.append(srv)
        return Endpoint(srv, replay, offsets)

    yield make
    for srv in started:
        srv.stop()


def store_snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file of a broker store: its sha256 and mtime (the endpoint must change neither)."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        out[str(path.relative_to(root))] = (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_mtime_ns,
        )
    return out


def expected_messages(tier: SampleTier, topic: str) -> dict[tuple[int, int], msgcodec.Message]:
    """``(queueId, queueOffset) -> message`` of every message of ``topic``."""
    return {(q, o): msgcodec.decode(d) for (t, q, o), d in tier.expected.items() if t == topic}


# --- a real `rmq-tiered run` ----------------------------------------------------------------


def sidecar_conf(tier: SampleTier, path: Path, **keys: Any) -> Path:
    """``tier``'s configuration as a properties file for ``run`` (``keys`` override)."""
    props = tier.cfg.as_properties()
    props.update({"tieredStoreDispatchIntervalMs": "200"}, **{k: str(v) for k, v in keys.items()})
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items() if v != ""), "utf-8")
    return path


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Callable[..., Sidecar]]:
    """``sidecar(tier, **keys)``: ``rmq-tiered run`` over ``tier``'s store and data dir (the tier's
    own sidecar is closed first: one process per data dir); started, stopped at the end."""
    made: list[Sidecar] = []

    def make(tier: SampleTier, **keys: Any) -> Sidecar:
        tier.sidecar.close()
        conf = sidecar_conf(tier, tmp_path / f"sidecar-{len(made)}.conf", **keys)
        car = Sidecar(conf, tmp_path / f"run-{len(made)}")
        made.append(car)
        car.start()
        return car

    yield make
    for car in made:
        car.stop()


@dataclass
class Consumed:
    """What one ali-ons run consumed."""

    messages: list[dict[str, Any]]
    done: dict[str, Any]

    @property
    def positions(self) -> list[tuple[int, int]]:
        return [(m["queueId"], m["queueOffset"]) for m in self.messages]


def ali_ons(name_server: str, group: str, topic: str = TOPIC, **opts: Any) -> Consumed:
    """Run ali-ons' push consumer (``js/consume.js``) until it has ``expect`` messages and
    nothing more for ``settleMs``; what it consumed."""
    node = shutil.which("node")
    assert node is not None, "node (Node.js 20) must be on the PATH for the ali-ons tests"
    assert (JS / "node_modules" / "ali-ons").is_dir(), "run `make test` (it installs ali-ons)"
    options = {"nameSrv": name_server, "group": group, "topic": topic, **opts}
    env = dict(os.environ, TZ="UTC")
    done = subprocess.run(
        [node, CONSUME_JS, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=opts.get("maxMs", 120_000) / 1000 + 60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines and lines[-1].get("done"), done.stdout[-2000:] + done.stderr
    return Consumed(lines[:-1], lines[-1])
