"""Reads from S3 by a sidecar restarted after a clean stop: it restores its queues from the
metadata without asking the backend, so its provider knows nothing of the segments' chunk
objects. The flat files tell it which segments their records call unsealed
(``Provider.expect_unsealed``), and the S3 provider reads those by their chunks' names: no GET of
a sealed object that is not there first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from tiered.providers import Provider
from tiered.providers import RequestCounts
from tiered.providers import WrappedProvider
from tiered.providers import build_provider

from tiered.core.sidecar import Sidecar
from tiered.read.message_store import TieredMessageStore
from tiered.source.local_source import LocalSource
from tiered.testing.sample_tier import SampleTier

TierFactory = Callable[..., SampleTier]
pytestmark = pytest.mark.s3


class _NoHints(WrappedProvider):
    """A provider that ignores the hint (as a third-party one may)."""

    def expect_unsealed(self, key: str, size: int) -> None:
        pass


def _catch_up(
    tier: SampleTier, provider: Provider
) -> tuple[Counter[str], dict[tuple[str, int, int], bytes]]:
    """Every queue read from offset 0 by a sidecar started afresh after a clean stop: the
    requests it made and each message's bytes."""
    counts = RequestCounts()
    provider.add_request_listener(counts)
    got: dict[tuple[str, int, int], bytes] = {}
    with Sidecar(tier.cfg, provider, lock=False) as sidecar:
        assert sidecar.clean_start  # (no reconciliation: nothing known of the backend)
        unsealed = [
            s for f in sidecar.flat_store.files() for s in f.commitlog.segments if not s.sealed
        ]
        assert unsealed, "the case needs unsealed segments"
        counts.counts.clear()
        store = TieredMessageStore(tier.cfg, sidecar.flat_store, LocalSource(tier.cfg))
        for topic, qid in tier.queues:
            offset, end = 0, store.get_max_offset(topic, qid)
            while offset < end:
                r = store.get_message(topic, qid, offset, 256)
                assert r.units and r.tier == "tiered", (topic, qid, offset, r.status)
                for unit in r.units:
                    got[(topic, qid, unit.queue_offset)] = bytes(unit.data)
                offset = r.next_begin_offset
    return Counter(counts.counts), got


def _but_physical_offsets(
    messages: dict[tuple[str, int, int], bytes],
) -> dict[tuple[str, int, int], bytes]:
    """The messages without their PHYSICALOFFSET field (the tier's copy says where it lies in
    the flat commitlog, the broker's where it lay in the broker's)."""
    return {k: v[:28] + v[36:] for k, v in messages.items()}


def test_a_restarted_sidecar_reads_unsealed_segments_by_their_chunks(
    make_tier: TierFactory, s3_keys: dict[str, str]
) -> None:
    tier = make_tier("s3", deleted_files=0, tieredStorageLevel="FORCE", **s3_keys)
    tier.sidecar.close()  # a clean stop: the next start restores every queue as recorded
    want = _but_physical_offsets(tier.expected)
    guessing, got = _catch_up(tier, _NoHints(build_provider(tier.cfg)))
    assert _but_physical_offsets(got) == want
    told, got = _catch_up(tier, build_provider(tier.cfg))
    assert _but_physical_offsets(got) == want
    # without the hint each unsealed segment's first read tries its sealed object: a GET more
    assert told["GET"] < guessing["GET"] and told["LIST"] <= guessing["LIST"], (told, guessing)


def test_a_catch_up_from_a_queues_first_offset_gets_each_commitlog_object_once(
    make_tier: TierFactory, s3_keys: dict[str, str]
) -> None:
    """A restarted sidecar knows no queue's first queue offset (it lies in the commitlog's first
    message): for a consumer that starts at a queue's first offset it is taken from the
    read-ahead window the first read brought in, not by a GET of the commitlog's head."""
    tier = make_tier("s3", deleted_files=0, tieredStorageLevel="FORCE", **s3_keys)
    tier.sidecar.close()
    provider = build_provider(tier.cfg)
    s3 = provider
    while isinstance(s3, WrappedProvider):
        s3 = s3.inner
    gets: list[tuple[str, str]] = []
    s3.client.meta.events.register(  # type: ignore[attr-defined]
        "before-call.s3.GetObject",
        lambda params, **_: gets.append((params["url_path"], params["headers"].get("Range", ""))),
    )
    with Sidecar(tier.cfg, provider, lock=False) as sidecar:
        store = TieredMessageStore(tier.cfg, sidecar.flat_store, LocalSource(tier.cfg))
        gets.clear()
        for topic, qid in tier.queues:
            flat = sidecar.flat_store.get(topic, qid)
            assert flat is not None and flat.commitlog.known_first_queue_offset == -1
            offset, end = 0, flat.commit_offset  # (as a consumer that knows where it ends)
            while offset < end:  # as the HTTP raw catch-up asks: all it may, 16 MiB at most
                r = store.get_message(topic, qid, offset, 65536, max_bytes=16 << 20)
                assert r.units and r.tier == "tiered", (topic, qid, offset, r.status)
                assert r.min_offset == 0
                offset = r.next_begin_offset
            assert flat.commitlog.known_first_queue_offset == 0
    commitlogs = Counter(path for path, _ in gets if "/COMMIT_LOG/" in path)
    assert len(commitlogs) > len(tier.queues)
    assert max(commitlogs.values()) == 1, [(p, r) for p, r in gets if commitlogs[p] > 1]
