"""``rmq-tiered serve``: a read replica of one broker's tier, with no broker store.

A writing sidecar offloads a generated store to a posix tier; a real ``serve`` subprocess over
the same tier (its own data dir, a store path that does not exist) must answer HTTP reads with
the bytes the writer's own reads return, answer a replay pull over its remoting port, serve what
the writer offloads later within a refresh interval, and send the backend no write request.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tiered.cli import main
from tiered.config import TieredConfig
from tiered.core.replica import Replica
from tiered.core.sidecar import Sidecar
from tiered.errors import ConfigError
from tiered.http.app import raw_units
from tiered.read.message_store import TieredMessageStore
from tiered.remoting.client import RemotingClient
from tiered.remoting.client import split_messages
from tiered.remoting.codes import RequestCode as Req
from tiered.remoting.codes import ResponseCode as Res
from tiered.testing.http import get
from tiered.testing.sample_tier import SidecarCase
from tiered.testing.sidecar_process import Sidecar as Process

REQUESTS = "rocketmq_tiered_store_provider_requests_total"
READS = {"posix": ("READ", "STAT"), "s3": ("GET", "LIST")}
"""What each backend counts for a ranged read and for a size (S3 lists a key for its size): a
replica sends only these, LIST and HEAD."""


def writer_reads(cfg: TieredConfig) -> dict[tuple[str, int], list[bytes]]:
    """Every message of the tier, read by the writer's own read path (every read from the tier,
    the writer's data dir, a stopped writer)."""
    level = cfg.model_copy(update={"tiered_storage_level": cfg.tiered_storage_level.FORCE})
    out: dict[tuple[str, int], list[bytes]] = {}
    with TieredMessageStore.open_read_only(level) as store:
        for flat in store.flat_store.files():
            got: list[bytes] = []
            while True:
                r = store.get_message(flat.topic, flat.queue_id, len(got), 1024)
                if not r.units:
                    break
                got += [bytes(u.data) for u in r.units]
            out[(flat.topic, flat.queue_id)] = got
    return out


def replica_reads(http: str, queues: list[tuple[str, int]]) -> dict[tuple[str, int], list[bytes]]:
    """Every message of ``queues`` through the replica's HTTP API (format=raw)."""
    out: dict[tuple[str, int], list[bytes]] = {}
    for topic, qid in queues:
        got: list[bytes] = []
        while True:
            path = f"/v1/topics/{topic}/queues/{qid}/messages"
            reply = get(http, path, offset=len(got), maxCount=1024, format="raw")
            assert reply.status == 200, reply.body[:300]
            units = raw_units(reply.body)
            if not units:
                break
            got += units
        out[(topic, qid)] = got
    return out


def requests_by_operation(http: str) -> dict[str, float]:
    """The replica's backend requests by operation (``provider_requests_total``), non-zero."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(get(http, "/metrics").body.decode()):
        for s in family.samples:
            if s.name == REQUESTS and s.value:
                out[s.labels["operation"]] = out.get(s.labels["operation"], 0.0) + s.value
    return out


def offload(cfg: TieredConfig, messages: int) -> None:
    """One writer pass over the store; closing it puts the metadata mirror."""
    with Sidecar(cfg) as writer:
        assert writer.dispatcher.run_pass(flush=True).messages == messages


@pytest.mark.parametrize("backend", ["posix", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_replica_serves_the_tier_without_a_store_and_follows_the_writer(
    offload_case: SidecarCase, backend: str, request: pytest.FixtureRequest
) -> None:
    keys: dict[str, str] = request.getfixturevalue("s3_keys") if backend == "s3" else {}
    store = offload_case.store()
    writer = offload_case.config(store, backend, **keys)
    offload(writer, 3000)
    work = offload_case.work
    conf = offload_case.conf_file(
        offload_case.config(
            work / "no-such-store",  # a replica has no broker store
            backend,
            **keys,
            tieredDataDir=str(work / "replica"),
            tieredReplicaRefreshMs=200,
        )
    )
    replica = Process(conf, work / "serve", command="serve")
    replica.start()
    try:
        want = writer_reads(writer)
        assert sum(map(len, want.values())) == 3000
        assert replica_reads(replica.http, sorted(want)) == want  # byte-identical
        path = "/v1/topics/GenTopic0/queues/0/messages"
        assert {m["tier"] for m in get(replica.http, path, offset=0).json()["messages"]} == {
            "tiered"
        }
        with RemotingClient("127.0.0.1", replica.port) as c:
            r = c.call(Req.PULL_MESSAGE, consumerGroup="analysts", topic="GenTopic0", queueId=0,
                       queueOffset=0, maxMsgNums=32, sysFlag=0, commitOffset=0,
                       suspendTimeoutMillis=0)  # fmt: skip
            assert r.code == Res.SUCCESS, r.remark
            assert split_messages(r.body) == want[("GenTopic0", 0)][:32]

        offload_case.append(store, seed=5, messages=1000)  # the writer offloads more
        offload(writer, 1000)
        started, want = time.monotonic(), writer_reads(writer)
        while replica_reads(replica.http, sorted(want)) != want:
            assert time.monotonic() - started < 10, "the replica did not follow the writer"
            time.sleep(0.1)
        followed = time.monotonic() - started
        assert sum(map(len, want.values())) == 4000

        counts = requests_by_operation(replica.http)
        read, size = READS[backend]
        assert set(counts) <= {read, size, "LIST", "HEAD"}, counts  # no write of any kind
        assert counts[read] > 0 and counts[size] > 0, counts
        print(f"followed the writer in {followed:.2f} s; replica's requests {counts}")
        status = get(replica.http, "/v1/status").json()
        assert (status["role"], status["totals"]["queues"]) == ("replica", 6)
        assert "tieredStorageLevel=FORCE" in status["topicsSource"]
        assert [(q["localMin"], q["tieredMin"]) for q in status["queues"]] == [(-1, 0)] * 6
        text = CliRunner().invoke(main, ["status", "--config", str(conf)])
        assert text.exit_code == 0 and "this is a read replica" in text.output, text.output
    finally:
        replica.stop()
    log = (work / "serve.1.log").read_text()
    assert "read replica of DefaultCluster/broker-a" in log
    assert "tieredStorageLevel=FORCE" in log
    assert not (work / "no-such-store").exists()
    assert json.loads((work / "replica" / "config" / "tieredStoreMetadata.json").read_text())
    assert not any((work / "replica" / "no-broker-store").rglob("*.*"))


def test_a_replica_refuses_a_writers_data_dir(offload_case: SidecarCase) -> None:
    store = offload_case.store()
    writer = offload_case.config(store, "posix")
    offload(writer, 3000)
    with pytest.raises(ConfigError, match="holds a writing sidecar's metadata"):
        Replica(writer).open()
    assert not (Path(writer.tiered_data_dir) / "rmq-tiered-replica").exists()


def test_one_replica_serves_every_broker_of_the_cluster(offload_case: SidecarCase) -> None:
    work = offload_case.work
    writers = {}
    for broker, seed in (("broker-a", 11), ("broker-b", 12)):
        store = offload_case.store(name=f"store-{broker}", seed=seed)
        writers[broker] = offload_case.config(
            store, "posix", brokerName=broker, tieredDataDir=str(work / f"data-{broker}")
        )
        offload(writers[broker], 3000)
    conf = offload_case.conf_file(
        offload_case.config(work / "no-such-store", "posix", tieredDataDir=str(work / "replica"))
    )
    replica = Process(conf, work / "serve", command="serve", args=("--all-brokers",))
    replica.start()
    try:
        log = work / "serve.1.log"
        deadline = time.monotonic() + 30
        while "read replica of cluster DefaultCluster" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        http = {
            get(url, "/v1/status", limit=1).json()["broker"]: url
            for url in re.findall(r"HTTP API listening on (http://\S+)", text)
        }
        assert sorted(http) == ["broker-a", "broker-b"]
        ports = re.findall(r"replay endpoint \(RocketMQ remoting\) listening on \S+:(\d+)", text)
        for port in ports:  # any port answers the whole cluster
            with RemotingClient("127.0.0.1", int(port)) as c:
                route = json.loads(c.call(Req.GET_ROUTEINFO_BY_TOPIC, topic="GenTopic0").body)
                addresses = {b["brokerName"]: b["brokerAddrs"]["0"] for b in route["brokerDatas"]}
                assert sorted(addresses) == ["broker-a", "broker-b"], route
                assert sorted(q["brokerName"] for q in route["queueDatas"]) == sorted(addresses)
        for broker, cfg in writers.items():
            want = writer_reads(cfg)
            assert replica_reads(http[broker], sorted(want)) == want  # byte-identical
            port = int(addresses[broker].rsplit(":", 1)[1])
            with RemotingClient("127.0.0.1", port) as c:
                r = c.call(Req.PULL_MESSAGE, consumerGroup="analysts", topic="GenTopic0",
                           queueId=1, queueOffset=0, maxMsgNums=32, sysFlag=0, commitOffset=0,
                           suspendTimeoutMillis=0)  # fmt: skip
                assert r.code == Res.SUCCESS, r.remark
                assert split_messages(r.body) == want[("GenTopic0", 1)][:32]
            assert not set(requests_by_operation(http[broker])) - {"READ", "STAT", "LIST"}
    finally:
        replica.stop()
    assert sorted(p.name for p in (work / "replica").iterdir()) == ["broker-a", "broker-b"]


def test_all_brokers_of_a_cluster_the_tier_does_not_hold_is_refused(
    offload_case: SidecarCase,
) -> None:
    work = offload_case.work
    cfg = offload_case.config(work / "no-such-store", "posix", tieredDataDir=str(work / "replica"))
    (work / "tier").mkdir()
    result = CliRunner().invoke(main, ["serve", "--config", str(offload_case.conf_file(cfg)),
                                       "--all-brokers"])  # fmt: skip
    assert result.exit_code == 2, (result.output, result.exception)
    assert "no metadata mirror of brokerClusterName='DefaultCluster'" in result.output


def test_a_replica_follows_a_journaled_writer_chunk_by_chunk(offload_case: SidecarCase) -> None:
    """A writer whose metadata is journaled mirrors chunks between snapshots; the replica reads
    only the new chunks, and the snapshot again once the writer wrote a new one (at its stop)."""
    store = offload_case.store()
    writer_cfg = offload_case.config(store, "posix", tieredMetadataJournalMinBytes="0")
    work = offload_case.work
    replica_cfg = offload_case.config(
        work / "no-such-store",
        "posix",
        tieredDataDir=str(work / "replica"),
        tieredMetadataJournalMinBytes="0",  # its own copy would journal too, if it wrote one
    )
    with Sidecar(writer_cfg) as writer:
        assert writer.dispatcher.run_pass(flush=True).messages == 3000
        with writer.metadata.mirror_spaced(0.0):
            pass  # what the pass mirrored and the rest, put now rather than when 5 s are up
        with Replica(replica_cfg) as replica:
            assert replica.metadata.document() == writer.metadata.document()
            snapshot = replica._snapshot
            assert snapshot and replica._frames > 0

            offload_case.append(store, seed=5, messages=1000)
            assert writer.dispatcher.run_pass(flush=True).messages == 1000
            assert writer.metadata.journal.frames > replica._frames
            with writer.metadata.mirror_spaced(0.0):
                pass
            assert replica.refresh()
            assert replica._snapshot == snapshot  # followed by the chunks alone
            assert replica.metadata.document() == writer.metadata.document()
            assert not replica.refresh()  # nothing new: one LIST
        writer_doc = writer.metadata.document()
    assert writer.metadata.journal.read().frames == []  # the stop compacted the journal
    with Replica(replica_cfg) as again:
        assert again._snapshot != snapshot
        assert again.metadata.document() == writer_doc
    config = work / "replica" / "config"
    assert sorted(p.name for p in config.iterdir()) == [
        "tieredStoreMetadata.json",
        "tieredStoreMetadata.json.bak",
    ]  # the replica never writes its own journal
