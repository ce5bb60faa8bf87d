"""The key index end to end: a generated broker store offloaded by the real dispatcher to the
memory, posix and S3 (moto) providers, its keys put into small index files that seal, compacted,
uploaded and queried -- every generated key is found, with its message, and nothing else."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import TypeVar

import pytest
from tiered.providers import Provider
from tiered.providers import WrappedProvider
from tiered.providers import build_provider
from tiered.providers.layout import INDEX_TOPIC

from tiered.broker import message as msgcodec
from tiered.core.sidecar import Sidecar
from tiered.core.sidecar import index_reader
from tiered.index.format import KeyQuery
from tiered.index.search import KeyHit
from tiered.testing.index_keys import IndexCase

T = TypeVar("T")


class Recording(WrappedProvider):
    """Records ``(operation, key)`` of every call (a real wrapper around a real provider)."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, str]] = []

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        self.calls.append((operation, key))
        return call()

    def index_reads(self) -> Counter[str]:
        """Reads per INDEX segment key."""
        return Counter(k for op, k in self.calls if op == "read" and "/INDEX/" in k)


def check_hit(hits: list[KeyHit], topic: str, key: str, where: tuple[int, int, int]) -> None:
    assert len(hits) == 1, (topic, key, hits)
    m = msgcodec.decode(hits[0].data)
    assert (m.topic, m.queue_id, m.queue_offset) == (topic, where[0], where[1])
    assert key in [*m.keys, m.properties[msgcodec.PROPERTY_UNIQ_KEY]]


@pytest.fixture(params=["memory", "posix", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The provider name and its extra keys (a fresh moto bucket for s3)."""
    if request.param == "s3":
        yield {"provider": "s3", **request.getfixturevalue("s3_keys")}
    else:
        yield {"provider": request.param}


def test_every_key_found_after_offload_seal_compaction_and_upload(
    index_case: IndexCase, backend: dict[str, Any]
) -> None:
    cfg = index_case.config(**backend)
    provider = Recording(build_provider(cfg))
    expected = index_case.keys()
    assert len(expected) == 900 * 3
    with Sidecar(cfg, provider) as sidecar:
        index = sidecar.index
        assert index is not None
        report = sidecar.dispatcher.run_pass(flush=True)
        assert report.messages == 900 and not report.errors
        status = index.status()
        assert len(status["local"]) >= 5 and status["unsealed"] == 1
        # before compaction: found in the local UNSEALED/SEALED files
        sample = sorted(expected)[::97]
        for topic, key in sample:
            check_hit(index.query(topic, key), topic, key, expected[(topic, key)])
        results = index.compact_sealed()
        assert results and {r.action for r in results} == {"uploaded"}
        assert all(r.engine == "numpy" for r in results)
        status = index.status()
        assert len(status["local"]) == 1 and len(status["uploaded"]) == len(results)
        bases = [u["baseOffset"] for u in status["uploaded"]]
        sizes = [u["size"] for u in status["uploaded"]]
        assert bases == [sum(sizes[:i]) for i in range(len(sizes))]  # cumulative
        assert not list(index.local.compacting_dir.glob("*"))
        # after upload: every key (S3: a sample), at most 2 reads per uploaded file and query
        keys = sorted(expected) if backend["provider"] != "s3" else sample
        for topic, key in keys:
            provider.calls.clear()
            check_hit(index.query(topic, key), topic, key, expected[(topic, key)])
            reads = provider.index_reads()
            assert max(reads.values(), default=0) <= 2, reads
            assert set(reads) <= {index.uploaded.key(b) for b in bases}
    # INDEX objects are exactly the recorded segments
    listed = [k for k in build_provider(cfg).list("") if f"/{INDEX_TOPIC}/0/INDEX/" in k]
    if backend["provider"] != "memory":
        assert sorted(listed) == sorted(index.uploaded.key(b) for b in bases)


def test_time_range_and_max_count(index_case: IndexCase) -> None:
    cfg = index_case.config()
    expected = index_case.keys()
    topic, key = sorted(expected)[10]
    _, _, stored = expected[(topic, key)]
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        index = sidecar.index
        assert index is not None
        index.compact_sealed()
        assert index.query(topic, key, stored - 1000, stored + 1000)
        assert index.query(topic, key, stored + 1000) == []
        assert index.query(topic, key, 0, stored - 1000) == []
        assert index.query(topic, "no-such-key") == []
        assert index.query("NoSuchTopic", key) == []
        # a key of another topic is not found under this one
        other = next(t for t, _ in expected if t != topic)
        assert index.query(other, key) == []


def test_catch_up_duplicates_collapse(index_case: IndexCase) -> None:
    """Messages indexed twice (a catch-up behind a checkpoint that lagged) come back once."""
    cfg = index_case.config(tieredStoreIndexFileMaxIndexNum="100000")
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        index = sidecar.index
        assert index is not None
        topic = "GenTopic1"
        for qid in (0, 1):
            index.progress.forget(topic, qid)
            index.progress.set_default(topic, qid, 0)
        flats = [f for f in sidecar.flat_store.files() if f.topic == topic]
        assert index.catch_up() == sum(f.commit_offset for f in flats)
        f = index.local.current()
        assert f.item_count == 900 * 3 + sum(f.commit_offset for f in flats) * 3
        for (t, key), where in sorted(expected.items())[::7]:
            items = f.query(KeyQuery(t, key, 0, 2**62, 10))
            assert len(items) == (2 if t == topic else 1)
            check_hit(index.query(t, key), t, key, where)


def test_restart_reopens_the_unsealed_file(index_case: IndexCase) -> None:
    cfg = index_case.config(tieredStoreIndexFileMaxIndexNum="100000")
    provider = build_provider(cfg)
    with Sidecar(cfg, provider) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        assert sidecar.index is not None
        before = sidecar.index.status()["local"]
    assert len(before) == 1 and before[0]["status"] == "UNSEALED"
    assert before[0]["items"] == 900 * 3
    with Sidecar(cfg, provider) as sidecar:
        index = sidecar.index
        assert index is not None
        after = index.status()["local"]
        assert after == before  # same file, same begin, same items, still UNSEALED
        f = index.local.current()
        assert f.begin_timestamp == before[0]["beginTimestamp"]
        expected = index_case.keys()
        for topic, key in sorted(expected)[::53]:
            check_hit(index.query(topic, key), topic, key, expected[(topic, key)])


def test_standby_and_disabled_index(index_case: IndexCase) -> None:
    cfg = index_case.config(messageIndexEnable="false")
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        assert sidecar.index is None
        sidecar.dispatcher.run_pass(flush=True)
    assert not (Path(cfg.tiered_data_dir) / "tiered_index_file").exists()
    slave = index_case.config(brokerRole="SLAVE", brokerId="1")
    with Sidecar(slave, build_provider(slave)) as sidecar:
        assert sidecar.index is None


def test_reader_beside_a_running_sidecar(index_case: IndexCase) -> None:
    """A read-only service sees the writer's local files (mapped read-only) and uploads, and
    changes nothing."""
    cfg = index_case.config(provider="posix")
    expected = index_case.keys()
    with Sidecar(cfg, build_provider(cfg)) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        assert sidecar.index is not None
        sidecar.index.compact_sealed()
        sidecar.index.checkpoint()
        files = sorted(p.name for p in (Path(cfg.tiered_data_dir) / "tiered_index_file").iterdir())
        with index_reader(cfg) as reader:
            for topic, key in sorted(expected)[::31]:
                check_hit(reader.query(topic, key), topic, key, expected[(topic, key)])
            assert reader.compact_sealed() == []
        assert files == sorted(
            p.name for p in (Path(cfg.tiered_data_dir) / "tiered_index_file").iterdir()
        )
