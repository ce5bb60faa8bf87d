"""The sidecar's small JSON state files (orphan log, dispatcher status, index progress, replay
offsets) share one primitive: whatever bytes a file holds, its owner starts -- from ``.bak`` when
that parses, else empty with the damaged files moved aside (never deleted) and one warning -- and
a real ``rmq-tiered run`` with all four damaged at once becomes ready."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tiered.broker.generator import GenSpec
from tiered.broker.generator import generate_store
from tiered.index.progress import IndexProgress
from tiered.metadata.orphans import OrphanLog
from tiered.offload.dispatch_state import QueueState
from tiered.offload.dispatch_state import StateFile
from tiered.offload.dispatch_state import StateSnapshot
from tiered.remoting.groups import ReplayOffsets
from tiered.testing.sample_tier import sample_config

RMQ_TIERED = Path(sys.executable).parent / "rmq-tiered"


def _orphans(d: Path) -> tuple[Path, Callable[[], object], Callable[[], None]]:
    log = OrphanLog(d)
    added = [0]

    def save() -> None:
        added[0] += 1
        log.add([f"a/{added[0]}"])

    return log.path, log.keys, save


def _dispatcher(d: Path) -> tuple[Path, Callable[[], object], Callable[[], None]]:
    f = StateFile(d)
    snap = StateSnapshot(rounds=3, queues={("T", 0): QueueState("T", 0, last_upload_ms=5)})
    return f.path, lambda: f.load().queues, lambda: f.save(snap, sync=True)


def _progress(d: Path) -> tuple[Path, Callable[[], object], Callable[[], None]]:
    p = IndexProgress(d)

    def save() -> None:
        p.advance("T", 0, 0, 10)
        p.save()

    return p.path, lambda: (p.load(), p.items()), save


def _offsets(d: Path) -> tuple[Path, Callable[[], object], Callable[[], None]]:
    o = ReplayOffsets(d)
    saved = [6]

    def save() -> None:
        saved[0] += 1
        o.commit("g", "T", 0, saved[0])
        o.flush()

    def load() -> object:
        o.load()
        return o.get("g", "T", 0)

    return o.path, load, save


OWNERS = {
    "orphans": _orphans,
    "dispatcher": _dispatcher,
    "progress": _progress,
    "offsets": _offsets,
}
EMPTY: dict[str, object] = {
    "orphans": [],
    "dispatcher": {},
    "progress": (False, {}),
    "offsets": None,
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
damaged = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.just(b"[]"),
    st.dictionaries(
        st.sampled_from(["version", "keys", "queues", "offsetTable", "role"]),
        json_values,
        max_size=4,
    ).map(lambda d: json.dumps(d).encode()),
    st.builds(
        lambda v, body: json.dumps({"version": v, **body}).encode(),
        st.integers(-2, 3),
        st.dictionaries(
            st.sampled_from(["keys", "queues", "offsetTable"]),
            st.lists(json_values, max_size=3),
            max_size=2,
        ),
    ),
)


@pytest.mark.parametrize("owner", sorted(OWNERS))
@given(data=damaged, truncate=st.integers(0, 200))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_bytes_load_as_state_or_empty_and_the_owner_goes_on(
    tmp_path_factory: pytest.TempPathFactory, owner: str, data: bytes, truncate: int
) -> None:
    d = tmp_path_factory.mktemp(owner)
    path, _, save = OWNERS[owner](d)
    save()  # a good file, then damage it (sometimes by truncating the good one)
    good = path.read_bytes()
    path.write_bytes(good[:truncate] if truncate < len(good) and truncate % 3 == 0 else data)
    _, load2, save2 = OWNERS[owner](d)  # a fresh owner, as after a restart
    load2()
    save2()  # and it can write again
    _, load3, _ = OWNERS[owner](d)
    assert load3() != EMPTY[owner]


@pytest.mark.parametrize("owner", sorted(OWNERS))
def test_a_damaged_file_falls_back_to_bak_else_is_moved_aside(tmp_path: Path, owner: str) -> None:
    path, _, save = OWNERS[owner](tmp_path)
    save()
    save()  # the first version is now .bak
    path.write_bytes(b'{"version": 1, "keys": 5, "queues": [[1, 2]], "offsetTable": []}')
    assert OWNERS[owner](tmp_path)[1]() != EMPTY[owner], "read from .bak"
    path.write_bytes(b"\x00\xff")
    Path(f"{path}.bak").write_bytes(b"[]")
    assert OWNERS[owner](tmp_path)[1]() == EMPTY[owner]
    aside = sorted(p.name for p in path.parent.glob("*.corrupt-*"))
    assert len(aside) == 2 and not path.exists()


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except (urllib.error.URLError, OSError):
        return 0


def test_run_starts_with_every_state_file_damaged(tmp_path: Path) -> None:
    spec = GenSpec(
        seed=3, topics=1, queues=2, messages=300, commitlog_file_size=256 << 10, cq_file_entries=400
    )
    generate_store(tmp_path / "store", spec)
    cfg = sample_config(
        tmp_path / "store", tmp_path, spec, "posix", tieredStoreFileReservedTime=100000
    )
    data = cfg.tiered_data_dir
    bad: dict[Path, bytes] = {
        data / "config" / "tieredOrphanObjects.json": b"[]",
        data / "status" / "dispatcher.json": b'{"version":1,"queues":[{"topic":"T"}]}',
        data / "tiered_index_file" / "progress.json": b'{"version":1,"queues":[["T",0]]}',
        data / "config" / "replayConsumerOffset.json": b"\x89PNG\r\n",
    }
    for path, content in bad.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    conf = tmp_path / "s.conf"
    props: dict[str, Any] = cfg.as_properties()
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items() if v != ""))
    log = tmp_path / "run.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([RMQ_TIERED, "run", "--config", conf], stderr=err)
    try:
        deadline = time.monotonic() + 90
        while (
            not (m := re.search(r"HTTP API listening on (\S+)", log.read_text()))
            or _get(f"{m.group(1)}/readyz") != 200
        ):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Traceback" not in text
    for path in bad:
        assert f"{path} is damaged" in text, path
        assert list(path.parent.glob(f"{path.name}.corrupt-*")), path


def test_the_dispatcher_state_re_encodes_only_the_queues_named_changed(tmp_path: Path) -> None:
    """A save told which queues changed writes the others' rows as the last save encoded them;
    queues added or gone are written or dropped whatever it is told; the file then reads back
    as a full save of the same snapshot would."""
    f = StateFile(tmp_path)
    states = {("T", q): QueueState("T", q, local_max=q) for q in range(4)}
    f.save(StateSnapshot(queues=states))
    states[("T", 1)].error = "broken"
    states[("T", 2)].error = "not told"  # changed, but not named: its row stays as saved
    states[("U", 0)] = QueueState("U", 0, last_upload_ms=9)
    del states[("T", 3)]
    f.save(StateSnapshot(queues=states), changed=[("T", 1), ("T", 3)])
    got = f.load().queues
    assert sorted(got) == [("T", 0), ("T", 1), ("T", 2), ("U", 0)]
    assert [got[k].error for k in sorted(got)] == ["", "broken", "", ""]
    assert got[("U", 0)].last_upload_ms == 9
    f.save(StateSnapshot(queues=states))  # none named: every row encoded again
    assert f.load().queues == states


def test_a_dispatcher_pass_writes_every_queue_it_changed(tmp_path: Path) -> None:
    """The dispatcher names the queues whose state it asked for since the last save: after
    passes that move some queues, the state file equals a full encoding of its state."""
    from tiered.core.sidecar import Sidecar

    spec = GenSpec(topics=2, queues=3, messages=60, seed=3)
    generate_store(tmp_path / "store", spec)
    cfg = sample_config(tmp_path / "store", tmp_path, spec, "posix")
    with Sidecar(cfg) as sidecar:
        d = sidecar.dispatcher
        assert d.run_pass(flush=True).messages == 60
        before = {k: s.local_max for k, s in d.states.items()}
        generate_store(tmp_path / "store", replace(spec, seed=4, messages=7, append=True))
        assert d.run_pass(flush=True).messages == 7
        d._save_state(sync=True, force=True)
        assert d.state_file is not None
        saved = d.state_file.load().queues
        assert saved == d.states
        assert {k: s.local_max for k, s in saved.items()} != before
