"""The index lifecycle under failures: a crash (or a failed request) at every step of upload and
expiry converges on the next run -- no lost index file, no duplicate segment -- keys of batches
uploaded but never indexed are caught up from the tier, and another topic's key with the very
same hash is filtered out by topic id."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from tiered.providers import FaultInjectingProvider
from tiered.providers import FaultPlan
from tiered.providers import MemoryProvider
from tiered.providers import Provider
from tiered.providers import WrappedProvider
from tiered.providers import build_provider

from tiered.broker.generator import generate_store
from tiered.broker.javautil import java_string_hash
from tiered.config import TieredConfig
from tiered.core.sidecar import Sidecar
from tiered.errors import ProviderError
from tiered.index.compaction import compact_file
from tiered.index.format import KeyQuery
from tiered.index.java_hash import index_hashes
from tiered.index.service import IndexService
from tiered.testing.index_keys import IndexCase
from tiered.testing.index_keys import KeyTable
from tiered.testing.index_keys import assert_all_found

T = TypeVar("T")
_M = 1 << 32


class Puts(WrappedProvider):
    """Counts puts per key."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.puts: Counter[str] = Counter()

    def _around(self, operation: str, key: str, call: Callable[[], T]) -> T:
        if operation == "put":
            self.puts[key] += 1
        return call()


def index_of(sidecar: Sidecar) -> IndexService:
    assert sidecar.index is not None
    return sidecar.index


@contextmanager
def started(cfg: TieredConfig, provider: Provider) -> Iterator[IndexService]:
    """The index service of a sidecar started on ``provider``."""
    with Sidecar(cfg, provider) as sidecar:
        yield index_of(sidecar)


@contextmanager
def offloaded(cfg: TieredConfig, provider: Provider) -> Iterator[IndexService]:
    """The index service of a sidecar that has offloaded (and indexed) the whole store."""
    with Sidecar(cfg, provider) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        yield index_of(sidecar)


def check_segments(index: IndexService) -> None:
    """One record per uploaded file, bases cumulative (from 0 unless expired), every object
    present, no other one."""
    records = index.uploaded.records()
    begins = [r.begin_timestamp for r in records]
    assert len(begins) == len(set(begins))
    first = records[0].base_offset if records else 0
    assert [r.base_offset for r in records] == [
        first + sum(r.size for r in records[:i]) for i in range(len(records))
    ]
    prefix = index.uploaded.key(0).rsplit("/", 1)[0] + "/"
    assert sorted(index.provider.list(prefix)) == sorted(
        index.uploaded.key(r.base_offset) for r in records
    )
    for r in records:
        assert index.provider.size(index.uploaded.key(r.base_offset)) == r.size


@pytest.fixture
def memory() -> FaultInjectingProvider:
    return FaultInjectingProvider(MemoryProvider())


@dataclasses.dataclass
class Case:
    """The generated store's sidecar configuration, the fault-injecting memory tier, the keys
    the store holds."""

    cfg: TieredConfig
    memory: FaultInjectingProvider
    expected: KeyTable


@pytest.fixture
def case(index_case: IndexCase, memory: FaultInjectingProvider) -> Case:
    return Case(index_case.config(), memory, index_case.keys())


def test_failed_put_is_retried_next_run(case: Case) -> None:
    with offloaded(case.cfg, case.memory) as index:
        sealed = len(index.local.sealed())
        # puts: file 1, the metadata mirror, the index progress copy, file 2 (fails)
        case.memory.set_plan(FaultPlan(nth=[4], operations={"put"}, error=ProviderError))
        first = index.compact_sealed()
        assert [r.action for r in first] == ["uploaded", "failed"]  # the run stops there
        assert len(index.local.sealed()) == sealed - 1
        assert len(index.uploaded.records()) == 1
        case.memory.set_plan(FaultPlan())
        second = index.compact_sealed()
        assert [r.action for r in second] == ["uploaded"] * (sealed - 1)
        assert len(index.uploaded.records()) == sealed
        check_segments(index)
        assert_all_found(index, case.expected, 3)


@pytest.mark.parametrize("provider_name", ["memory", "posix"])
def test_put_landed_but_unrecorded_is_recorded_without_a_second_put(
    index_case: IndexCase, provider_name: str
) -> None:
    """The put took effect but its answer was lost (a crash right after it): the next run finds
    the object at the same base, checks it against the SEALED file and records it."""
    cfg = index_case.config(provider=provider_name)
    puts = Puts(build_provider(cfg))
    faulty = FaultInjectingProvider(puts)
    expected = index_case.keys()
    with offloaded(cfg, faulty) as index:
        # puts: file 1, the metadata mirror, the index progress copy, file 2 (lands, then fails)
        faulty.set_plan(FaultPlan(nth=[4], operations={"put"}, error=ProviderError, when="after"))
        sealed = len(index.local.sealed())
        first = index.compact_sealed()
        assert [r.action for r in first] == ["uploaded", "failed"]
        faulty.set_plan(FaultPlan())
        assert [r.action for r in index.compact_sealed()] == ["uploaded"] * (sealed - 1)
        check_segments(index)
        index_puts = {k: n for k, n in puts.puts.items() if "/INDEX/" in k}
        assert set(index_puts.values()) == {1}  # the landed object was not put again
        assert_all_found(index, expected, 3)


def test_crash_after_record_deletes_local_copy_at_start(case: Case) -> None:
    with offloaded(case.cfg, case.memory) as index:
        f = index.local.sealed()[0]
        data = compact_file(f)
        index.uploaded.upload(f.header, data, len(data))  # then "crash": local copy not deleted
        path = f.path
    assert path.exists()
    with started(case.cfg, case.memory) as index:
        assert not path.exists()
        assert len(index.uploaded.records()) == 1
        assert f.begin_timestamp not in {x.begin_timestamp for x in index.local.files}
        index.compact_sealed()
        check_segments(index)
        assert_all_found(index, case.expected, 3)


def test_crash_after_put_with_local_copy_lost_is_adopted(case: Case) -> None:
    with offloaded(case.cfg, case.memory) as index:
        f = index.local.sealed()[0]
        data = compact_file(f)
        case.memory.put(index.uploaded.key(0), data)  # then "crash" before the record ...
        path, header = f.path, f.header
        garbage = index.uploaded.key(10**9)
        case.memory.put(garbage, b"not an index file")  # ... and an unrelated object far past it
    path.unlink()  # ... and the local disk lost that file
    with started(case.cfg, case.memory) as index:
        records = index.uploaded.records()
        assert [(r.base_offset, r.size, r.begin_timestamp, r.end_timestamp) for r in records] == [
            (0, len(data), header.begin_timestamp, header.end_timestamp)
        ]
        assert case.memory.exists(garbage)  # not adoptable, not below the recorded range: left
        case.memory.delete(garbage)
        index.compact_sealed()
        check_segments(index)
        assert_all_found(index, case.expected, 3)


def test_expiry_that_stopped_between_record_and_object_converges(case: Case) -> None:
    with offloaded(case.cfg, case.memory) as index:
        index.compact_sealed()
        records = index.uploaded.records()
        assert len(records) >= 3
        # the generated messages are from 2023: every uploaded file is past the reserve time;
        # here only the leading ones whose newest item is older than the second file's
        now = max(r.end_timestamp for r in records[:2]) + 72 * 3_600_000 + 1
        before = now - 72 * 3_600_000
        leading = next(i for i, r in enumerate(records) if r.end_timestamp >= before)
        assert 2 <= leading < len(records)
        case.memory.set_plan(FaultPlan(rate=1.0, operations={"delete"}, error=ProviderError))
        with pytest.raises(ProviderError):
            index.expire(now)
        case.memory.set_plan(FaultPlan())
        assert len(index.uploaded.records()) == len(records) - 1  # record gone, object left
        assert case.memory.exists(index.uploaded.key(records[0].base_offset))
    with started(case.cfg, case.memory) as index:
        assert not case.memory.exists(index.uploaded.key(records[0].base_offset))  # converged
        check_segments(index)
        assert index.expire(now) == leading - 1
        check_segments(index)
        assert [r.base_offset for r in index.uploaded.records()] == [
            r.base_offset for r in records[leading:]
        ]


def test_compacting_leftovers_are_deleted_at_start(case: Case) -> None:
    with Sidecar(case.cfg, case.memory) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        leftover = index_of(sidecar).local.compacting_dir / "1700000000000"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"half a compacted file")
    with Sidecar(case.cfg, case.memory):
        assert not leftover.parent.exists()


def test_uploaded_but_never_indexed_batches_are_caught_up(
    tmp_path: Path, index_case: IndexCase, memory: FaultInjectingProvider
) -> None:
    """Batches uploaded while the listener could not run (a crash between upload and put; here:
    a run without the index) are indexed from the tier at the next start."""
    cfg = index_case.config()
    with Sidecar(cfg, memory) as sidecar:
        sidecar.dispatcher.run_pass(flush=True)
        index_of(sidecar).compact_sealed()
    generate_store(
        index_case.store, dataclasses.replace(index_case.spec, append=True, messages=400)
    )
    off = index_case.config(messageIndexEnable="false")
    with Sidecar(off, memory) as sidecar:
        assert sidecar.dispatcher.run_pass(flush=True).messages == 400
    expected = index_case.keys()
    assert len(expected) == 1300 * 3
    with started(cfg, memory) as index:
        assert_all_found(index, expected)
        offsets = index.status()["indexedOffsets"]
        assert offsets == {
            f.path.split("/", 1)[1]: f.commit_offset for f in sidecar.flat_store.files()
        }


def test_lost_progress_reindexes_everything(case: Case) -> None:
    with offloaded(case.cfg, case.memory) as index:
        progress = index.progress.path
    progress.unlink()
    with started(case.cfg, case.memory) as index:
        assert_all_found(index, case.expected, 2)  # indexed twice, found once
        assert index.status()["indexedOffsets"]


def colliding_key(target: str, prefix: str) -> str:
    """A key ``k`` with ``String.hashCode(prefix + k) == String.hashCode(target)`` (5 CJK
    characters: ``31**5`` spans more than 2**32 with digits below 20992)."""
    weights = [31**i for i in range(4, -1, -1)]
    lo, span = 0x4E00, 20991
    rest = (java_string_hash(target) - java_string_hash(prefix) * 31**5 - lo * sum(weights)) % _M
    digits = []
    for w in weights:
        d = min(rest // w, span)
        digits.append(d)
        rest -= d * w
    assert rest == 0
    return "".join(chr(lo + d) for d in digits)


def test_another_topics_key_with_the_same_hash_is_filtered_out(case: Case) -> None:
    (topic, key), _ = sorted(case.expected.items())[5]
    other = "GenTopic2" if topic != "GenTopic2" else "GenTopic0"
    twin = colliding_key(f"{topic}#{key}", f"{other}#")
    assert index_hashes(other, [twin]).tolist() == index_hashes(topic, [key]).tolist()
    with offloaded(case.cfg, case.memory) as index:
        other_id = index.topic_id(other)
        files = index.local.files
        raw = [i for f in files for i in f.query(KeyQuery(other, twin, 0, 2**62, 10))]
        assert [i.topic_id for i in raw] == [index.topic_id(topic)]  # the collision is real
        assert [
            i for f in files for i in f.query(KeyQuery(other, twin, 0, 2**62, 10, other_id))
        ] == []
        assert index.query(other, twin) == []
        index.compact_sealed()
        uploaded = index.uploaded.files()
        raw = [i for f in uploaded for i in f.query(KeyQuery(other, twin, 0, 2**62, 10))]
        assert len(raw) == 1
        assert [
            i for f in uploaded for i in f.query(KeyQuery(other, twin, 0, 2**62, 10, other_id))
        ] == []
        assert index.query(other, twin) == []
        assert len(index.query(topic, key)) == 1


def test_recover_from_backend_records_the_uploaded_index_files(tmp_path: Path, case: Case) -> None:
    from tiered.core.metadata_rebuild import rebuild_from_backend
    from tiered.metadata import MetadataStore

    cfg, memory = case.cfg, case.memory
    with offloaded(cfg, memory) as index:
        index.compact_sealed()
        before = [
            (r.base_offset, r.size, r.begin_timestamp, r.end_timestamp)
            for r in index.uploaded.records()
        ]
    assert len(before) >= 3
    fresh = MetadataStore(tmp_path / "rebuilt")
    fresh.load()
    report = rebuild_from_backend(memory, fresh, cfg.broker_cluster_name, cfg.broker_name)
    assert report.segments > len(before)
    rebuilt = IndexService(cfg, memory, fresh).uploaded.records()
    assert [(r.base_offset, r.size, r.begin_timestamp, r.end_timestamp) for r in rebuilt] == before
