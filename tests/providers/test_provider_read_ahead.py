"""Read-ahead windows of sequential readers (``providers.read_ahead``), alone and in the s3
provider over moto: one GET per window, cut at chunk objects, none for random reads."""

from __future__ import annotations

import ctypes
import itertools
import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiered.providers import S3Provider
from tiered.providers.read_ahead import DEPTH
from tiered.providers.read_ahead import FREE_BUFFERS
from tiered.providers.read_ahead import SLIVER_FRACTION
from tiered.providers.read_ahead import Extent
from tiered.providers.read_ahead import ReadAhead
from tiered.providers.testing import seg
from tiered.providers.testing.servers import S3Endpoint

DATA = random.Random(5).randbytes(10_000)
CHUNK_ENDS = (3_000, 6_500, 10_000)


class Backend:
    """``DATA`` as chunk objects ending at ``CHUNK_ENDS``; counts fetches."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fetches: list[tuple[int, int]] = []
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def bounds(self, key: str, start: int, size: int) -> Extent:
        if start >= len(DATA):
            return Extent(start, False)
        end = min(start + size, next(e for e in CHUNK_ENDS if start < e))
        return Extent(end, end < len(DATA))

    def fetch(self, key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        """The window in pieces of 100 bytes, as a GET's body arrives."""
        with self.lock:
            self.fetches.append((start, end - start))
        if start == self.fail_at:
            raise OSError("backend down")
        yield from receive(into, start, end)


def receive(
    into: memoryview, start: int, end: int, *, piece: int = 100, fail_after: int | None = None
) -> Iterator[int]:
    """``DATA[start:end]`` written into ``into`` in pieces, yielding the count after each."""
    for at in range(start, end, piece):
        if fail_after is not None and at - start >= fail_after:
            raise OSError("connection reset")
        stop = min(at + piece, end)
        into[at - start : stop - start] = DATA[at:stop]
        yield stop - start


def read_all(ahead: ReadAhead, sizes: list[int]) -> list[bool]:
    """Read DATA front to back in reads of ``sizes``; which were served from windows."""
    served, position = [], 0
    for size in sizes:
        if position >= len(DATA):
            break
        got = ahead.read("k", position, size)
        served.append(got is not None)
        if got is None:
            got = DATA[position : position + size]  # the caller's own read
        assert got == DATA[position : position + size]
        position += len(got)
    assert position >= len(DATA)
    return served


def test_a_sequential_reader_gets_one_fetch_per_window_cut_at_chunk_ends() -> None:
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 1 << 20)
    sizes = [8] + [random.Random(i).randint(1, 700) for i in range(200)]  # a small first read
    served = read_all(ahead, sizes)
    assert served[0] is False and all(served[1:])  # the first read shows the reader's way
    starts = sorted(s for s, _ in backend.fetches)
    assert starts[0] == sizes[0]  # windows begin where the sequential reading did
    assert {3_000, 6_500} <= set(starts)  # a window never spans two chunk objects
    assert len(starts) == len(set(starts))  # nothing fetched twice
    # every window after the first of a chunk object follows the previous one, a window apart
    for a, b in itertools.pairwise(starts):
        assert b - a == 1024 or b in (3_000, 6_500), (a, b)
    ahead.close()
    assert ahead.held_bytes == 0


def test_random_reads_go_to_the_backend_and_fetch_no_window() -> None:
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 1 << 20)
    for position in random.Random(2).sample(range(0, 9_000, 7), 50):
        if ahead.read("k", position, 20) is not None:
            pytest.fail(f"a random read at {position} was served from a window")
    assert backend.fetches == []


def test_memory_goes_to_a_new_reader_from_an_idle_one_only() -> None:
    backend = Backend()
    now = [0.0]
    budget = 2 * (1024 + 1024 // SLIVER_FRACTION) + 300  # two full windows and a bit
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, budget, clock=lambda: now[0])
    assert ahead.read("a", 0, 10) is None
    assert ahead.read("a", 10, 10) == DATA[10:20]  # a's window and the one after fill it
    assert ahead.held_bytes <= budget
    assert ahead.read("b", 0, 10) is None
    assert ahead.read("b", 10, 10) == DATA[10:20]  # a is reading: b gets a smaller window
    assert ahead.held_bytes <= budget
    assert max(n for _, n in backend.fetches[-1:]) <= 300
    assert ahead.read("a", 20, 10) == DATA[20:30]  # a kept its windows
    now[0] += 10  # a and b idle
    assert ahead.read("c", 0, 10) is None
    assert ahead.read("c", 10, 2000) == DATA[10:2010]  # full windows: the idle ones gave way
    assert (10, 1024) in backend.fetches
    assert ahead.held_bytes <= budget
    ahead.close()
    assert ahead.held_bytes == 0


def test_a_catch_up_of_queue_after_queue_reads_each_small_object_in_one_window() -> None:
    """Objects smaller than a window (a queue's 32 MiB segment, 64 MiB windows) read whole one
    after the other, quicker than ``IDLE_S``: a key read to its end gives its window up to the
    next key. (Their windows were not full-size, so they were kept as "not done" until idle,
    and from the 8th queue of a 16-queue catch-up on the windows shrank: 145 GETs per GiB.)"""
    size, window = 400, 1024
    fetches: list[tuple[str, int, int]] = []

    def bounds(key: str, start: int, n: int) -> Extent:
        end = min(start + n, size)
        return Extent(end, end < size) if start < size else Extent(start, False)

    def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        fetches.append((key, start, end))
        yield from receive(into, start, end)

    budget = 3 * (window + window // SLIVER_FRACTION)
    ahead = ReadAhead(bounds, fetch, window, budget, clock=lambda: 0.0)
    keys = [f"q{i}" for i in range(20)]
    for key in keys:
        for at in range(0, size, 100):
            assert ahead.read(key, at, 100) == DATA[at : at + 100], (key, at)
        assert ahead.held_bytes <= budget
    assert fetches == [(key, 0, size) for key in keys]
    ahead.close()


def test_a_failed_fetch_leaves_the_read_to_the_caller() -> None:
    backend = Backend(fail_at=10)
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 1 << 20)
    assert ahead.read("k", 0, 10) is None
    assert ahead.read("k", 10, 10) is None  # the window failed: the caller reads and reports
    assert ahead.held_bytes <= FREE_BUFFERS * ahead.capacity  # buffers kept for the next one
    ahead.close()
    assert ahead.held_bytes == 0


def test_a_reader_has_its_bytes_before_the_window_has_arrived() -> None:
    gate = threading.Event()

    def slow(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        into[:100] = DATA[start : start + 100]
        yield 100
        assert gate.wait(10)  # the rest of the GET's body is late
        into[100 : end - start] = DATA[start + 100 : end]
        yield end - start

    ahead = ReadAhead(Backend().bounds, slow, 1024, 1 << 20)
    assert ahead.read("k", 0, 20) is None  # a small first read: the caller's
    assert ahead.read("k", 20, 80) == DATA[20:100]  # sequential: from the first piece, at once
    gate.set()
    assert ahead.read("k", 100, 500) == DATA[100:600]
    ahead.close()


def test_close_lets_go_of_every_buffer_even_one_being_received_into() -> None:
    gate = threading.Event()

    def slow(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        into[:100] = DATA[start : start + 100]
        yield 100
        assert gate.wait(10)
        yield from receive(into, start, end)

    ahead = ReadAhead(Backend().bounds, slow, 1024, 1 << 20)
    assert ahead.read("k", 0, 50) == DATA[:50]  # a large read: a window, still arriving
    threading.Timer(0.2, gate.set).start()
    ahead.close()  # waits for the fetch, which stops at its next piece
    assert ahead.held_bytes == 0


def test_a_fetch_that_breaks_off_leaves_the_rest_to_the_caller() -> None:
    def broken(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        yield from receive(into, start, end, fail_after=100)

    ahead = ReadAhead(Backend().bounds, broken, 1024, 1 << 20)
    assert ahead.read("k", 0, 20) is None
    assert ahead.read("k", 20, 500) is None  # past what arrived: the caller reads it itself
    assert ahead.held_bytes <= FREE_BUFFERS * ahead.capacity
    ahead.close()


def test_past_the_end_is_the_callers_to_report() -> None:
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 4096, 1 << 20)
    assert ahead.read("k", 9_000, 10) is None  # small, and not to the end: the caller's
    assert ahead.read("k", 9_990, 10) == DATA[9_990:]  # to the end: its window is these bytes
    assert backend.fetches == [(9_990, 10)]
    assert ahead.read("k", 9_995, 5) == DATA[9_995:]  # read again: from memory
    assert ahead.read("k", 10_000, 10) is None
    ahead.close()


# --- in the s3 provider, over moto ---------------------------------------------------------------


def _provider(endpoint: S3Endpoint, bucket: str, window: int) -> tuple[S3Provider, Counter[str]]:
    provider = S3Provider(
        bucket,
        endpoint=endpoint.url,
        region=endpoint.region,
        access_key=endpoint.access_key,
        secret_key=endpoint.secret_key,
        path_style=True,
        read_ahead_bytes=window,
        read_ahead_max_bytes=8 * window,
    )
    requests: Counter[str] = Counter()
    provider.add_request_listener(lambda op: requests.update([op]))
    return provider, requests


@pytest.mark.s3
@pytest.mark.parametrize("sealed", [True, False])
def test_s3_catch_up_costs_one_get_per_window_and_at_most_one_listing(
    moto_s3: S3Endpoint, sealed: bool
) -> None:
    bucket = moto_s3.new_bucket()
    writer, _ = _provider(moto_s3, bucket, 0)
    key = "c/b/T/0/COMMIT_LOG/cfcd208400000000000000000000"
    data = random.Random(9).randbytes(3 << 20)
    position = 0
    for size in (1 << 20, 1 << 20, 1 << 20):  # three chunk objects
        position = writer.append(key, data[position : position + size], position)
    if sealed:
        writer.seal(key)
    reader, requests = _provider(moto_s3, bucket, 512 << 10)  # another process: knows nothing
    at = 0
    while at < len(data):
        got = reader.read(key, at, 50_000)
        assert got == data[at : at + 50_000]
        at += len(got)
    gets, lists = requests["GET"], requests["LIST"]
    assert gets <= 1 + 6 + 2  # the first read, 3 MiB in 512 KiB windows, chunk cuts
    # sealed: its GET tells the size, no listing; unsealed: listed once, not once a read
    assert lists == (0 if sealed else 1)
    assert set(requests) <= {"GET", "LIST"}
    reader.close()
    writer.close()


def test_a_large_first_read_starts_a_window_at_once() -> None:
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 1 << 20)  # 32 bytes is a large read
    assert ahead.read("k", 100, 40) == DATA[100:140]
    assert backend.fetches[0] == (100, 1024)
    assert ahead.read("k", 500, 8) == DATA[500:508]  # inside the window
    assert ahead.read("k", 5_000, 8) is None  # small, outside, not where the last read ended
    ahead.close()


def test_a_reader_that_reads_some_bytes_again_is_served_from_the_windows() -> None:
    """A consumer that asks for more than it keeps (each read starts inside the previous one,
    and a read can pass a window boundary) never sends the same bytes twice."""
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 1 << 20)  # 32 bytes is a large read
    position = 0
    while position < len(DATA) - 600:
        length = min(600, len(DATA) - position)
        assert ahead.read("k", position, length) == DATA[position : position + length]
        position += 100  # keeps a sixth of what it read
    starts = [s for s, _ in backend.fetches]
    assert len(starts) == len(set(starts))  # nothing fetched twice
    assert sum(n for _, n in backend.fetches) <= len(DATA)
    # what the last read spans, the window ahead, and the buffers kept for the next ones
    assert ahead.held_bytes <= (2 + DEPTH + FREE_BUFFERS) * ahead.capacity
    ahead.close()


def test_a_read_of_all_the_rest_is_read_again_from_windows() -> None:
    """A reader that asks for everything to the object's end (a consumequeue smaller than a
    large read, asked for whole) reads it again piece by piece: windows from the first read, one
    per chunk object, and nothing fetched twice."""
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 1 << 20, 8 << 20)  # 32 KiB is large
    assert ahead.read("k", 0, len(DATA)) == DATA  # not large, but to the end (3 chunks)
    for position in range(0, len(DATA), 700):
        assert ahead.read("k", position, 700) == DATA[position : position + 700]
    assert sorted(backend.fetches) == [(0, 3_000), (3_000, 3_500), (6_500, 3_500)]
    assert ahead.read("k", 0, 9_000) is None  # not to the end, small, not where it stopped
    ahead.close()


def test_a_catch_up_writes_into_the_same_buffers_again() -> None:
    """Full windows are received into kept buffers: no fresh memory per window."""
    buffers: set[int] = set()
    backend = Backend()

    def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        buffers.add(id(into.obj))
        yield from backend.fetch(key, start, end, into)

    ahead = ReadAhead(
        lambda k, s, n: Extent(min(s + n, 10_000), s + n < 10_000), fetch, 512, 1 << 20
    )
    assert read_all(ahead, [600] * 20)[0]
    assert len(backend.fetches) >= 15
    assert len(buffers) <= 1 + DEPTH + FREE_BUFFERS
    ahead.close()


def _mapping_flags(address: int) -> str:
    """The permission flags (``rw-p``: private, ``rw-s``: shared) of this process's mapping
    that holds ``address``."""
    with open("/proc/self/maps", encoding="ascii") as maps:
        for line in maps:
            span, flags = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return flags
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
def test_a_large_window_is_received_into_private_memory() -> None:
    """A window of a megabyte or more is an anonymous mapping, and a private one: a shared
    anonymous mapping is shmem, whose pages fault through the shmem page cache (0.98 against
    0.09 CPU-s per GiB received, measured here with huge pages)."""
    size = 4 << 20
    data = random.Random(9).randbytes(size)
    flags: list[str] = []

    def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        address = ctypes.addressof(ctypes.c_char.from_buffer(into))
        flags.append(_mapping_flags(address))
        into[: end - start] = data[start:end]
        yield end - start

    ahead = ReadAhead(
        lambda k, s, n: Extent(min(s + n, size), s + n < size), fetch, 2 << 20, 8 << 20
    )
    got = [ahead.read("k", 0, 1 << 20)]
    got += [ahead.read("k", at, 1 << 20) for at in range(1 << 20, size, 1 << 20)]
    assert b"".join(g or b"" for g in got) == data
    assert flags and all(f.endswith("p") for f in flags), flags
    ahead.close()


def test_windows_cut_at_chunk_ends_are_received_into_kept_buffers_too() -> None:
    """A catch-up over chunk objects shorter than a window (every window cut at a chunk's end)
    writes into the same few buffers again, not into fresh memory the kernel must zero for each
    window: a window takes a kept buffer of its size class (the next power of two)."""
    mib = 1 << 20
    chunk, chunks = 3 * mib + 12_345, 12
    total = chunk * chunks
    payload = random.Random(3).randbytes(total)
    seen: list[object] = []  # every buffer received into, kept alive: no id is reused

    def bounds(key: str, start: int, size: int) -> Extent:
        end = min(start + size, (start // chunk + 1) * chunk)
        return Extent(end, end < total)

    def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        seen.append(into.obj)
        into[: end - start] = payload[start:end]
        yield end - start

    ahead = ReadAhead(bounds, fetch, 8 * mib, 64 * mib)
    position, out = 0, []
    while position < total:
        got = ahead.read("k", position, min(mib, total - position))
        assert got is not None
        out.append(got)
        position += len(got)
    assert b"".join(out) == payload
    assert len(seen) == chunks  # one fetch per chunk: each window cut at its chunk's end
    assert len({id(b) for b in seen}) <= 1 + DEPTH + FREE_BUFFERS, "a fresh buffer per window"
    assert {len(b) for b in seen} == {4 * mib}  # type: ignore[arg-type]
    ahead.close()
    assert ahead.held_bytes == 0


def test_a_window_of_an_unknown_object_is_settled_by_its_fetch() -> None:
    """``bounds`` does not know the object: the first window is a guess of the full size, its
    fetch learns the size, and only then are the windows after it requested."""
    known: list[int] = []
    fetches: list[tuple[int, int]] = []

    def bounds(key: str, start: int, size: int) -> Extent:
        if not known:
            return Extent(start + size, True, exact=False)
        end = min(start + size, known[0])
        return Extent(end, end < known[0])

    def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        fetches.append((start, end))
        known[:] = [len(DATA)]  # a sealed object's GET tells its size
        yield from receive(into, start, min(end, len(DATA)), piece=300)

    ahead = ReadAhead(bounds, fetch, 4096, 1 << 20)  # 128 bytes is a large read
    assert ahead.read("k", 9_000, 200) == DATA[9_000:9_200]  # a guess: [9000, 13096)
    assert ahead.read("k", 9_200, 2_000) == DATA[9_200:]  # short: where the object ends
    assert fetches == [(9_000, 13_096)]  # nothing requested past the end
    assert ahead.read("k", 10_000, 10) is None  # past the end: the caller's to report
    known.clear()
    ahead.forget("k")
    assert ahead.read("k", 0, 200) == DATA[:200]
    assert ahead.read("k", 200, 5_000) == DATA[200:5_200]
    assert fetches[1:] == [(0, 4_096), (4_096, 8_192)]  # settled, then the window after it
    ahead.close()


def test_a_read_to_the_expected_size_is_read_chunk_by_chunk_into_windows() -> None:
    """``bounds`` knows only the size the object should have (a segment its records call
    unsealed, whose chunks it has yet to see): a read of all the rest up to that size is
    sequential, its windows are settled chunk by chunk as their fetches learn where each chunk
    ends, and the reads of its pieces that follow are answered from them. A read that stops
    short of that size is not taken for one."""
    learned: list[int] = []  # chunk ends the fetches have seen
    fetches: list[tuple[int, int]] = []

    def bounds(key: str, start: int, size: int) -> Extent:
        known = learned[-1] if learned else 0
        if start >= known:  # past what is known: a guess, cut at the expected size
            return Extent(min(start + size, len(DATA)), True, exact=False, size=len(DATA))
        end = min(start + size, next(e for e in learned if start < e))
        return Extent(end, end < len(DATA))

    def fetch(key: str, start: int, end: int, into: memoryview) -> Iterator[int]:
        fetches.append((start, end))
        chunk_end = next(e for e in CHUNK_ENDS if start < e)  # a chunk's GET tells its size
        if chunk_end not in learned:
            learned.append(chunk_end)
        yield from receive(into, start, min(end, chunk_end), piece=300)

    ahead = ReadAhead(bounds, fetch, 1 << 20, 8 << 20)  # 32 KiB is a large read
    assert ahead.read("k", 0, 9_000) is None  # short of the expected size, small: not sequential
    assert fetches == []
    ahead.forget("k")
    assert ahead.read("k", 0, len(DATA)) == DATA
    assert fetches == [(0, len(DATA)), (3_000, len(DATA)), (6_500, len(DATA))]
    for position in range(0, len(DATA), 700):
        assert ahead.read("k", position, 700) == DATA[position : position + 700]
    assert len(fetches) == 3  # the pieces: from the windows
    ahead.close()


def test_the_next_segment_is_read_from_windows_from_its_first_byte() -> None:
    """A reader that read a segment to its end and goes on at 0 of the next one is sequential
    there too: no direct read for the first bytes of each segment."""
    backend = Backend()
    ahead = ReadAhead(
        backend.bounds, backend.fetch, 1024, 1 << 20, successor=lambda k, n: f"{k}+{n}"
    )
    assert ahead.read("k", 0, 2_000) == DATA[:2_000]
    position = 2_000
    while position < len(DATA):
        got = ahead.read("k", position, 1_000)
        assert got is not None
        position += len(got)
    assert ahead.read("k+10000", 0, 10) == DATA[:10]  # a small read, yet from a window
    assert ahead.read("other", 0, 10) is None  # a small first read of any other key: direct
    ahead.close()


@pytest.mark.s3
def test_s3_segments_of_a_file_read_one_after_the_other_cost_one_get_per_window(
    moto_s3: S3Endpoint,
) -> None:
    """Sealed segments read by a process that knows nothing of them: no listing, and no
    direct GET for the first bytes of the next segment (a read across the boundary goes on at 0
    of the next one); a window that would leave a sliver of its object takes it too."""
    bucket = moto_s3.new_bucket()
    writer, _ = _provider(moto_s3, bucket, 0)
    window = 512 << 10
    sizes = (2 * window + window // 16, window // 2, window)  # a sliver after two windows
    data = random.Random(3).randbytes(sum(sizes))
    keys, base = [], 0
    for size in sizes:
        key = seg(0, base)
        writer.append(key, data[base : base + size], 0)
        writer.seal(key)
        keys.append(key)
        base += size
    reader, requests = _provider(moto_s3, bucket, window)
    position, index, base = 0, 0, 0
    while position < len(data):
        want = min(40_000, len(data) - position)
        got = reader.read(keys[index], position - base, want)  # the first segment's part
        if len(got) < want and index + 1 < len(keys):  # the rest from the next segment
            base += sizes[index]
            index += 1
            got += reader.read(keys[index], 0, want - len(got))
        assert got == data[position : position + want]
        position += len(got)
    # 2 windows (the second with the sliver), 1, 1 (40 kB is a large read: windows at once)
    assert requests == Counter({"GET": 2 + 1 + 1}), requests
    reader.close()
    writer.close()


@pytest.mark.s3
def test_s3_windows_reuse_their_connections(moto_s3: S3Endpoint) -> None:
    """A window's body is received by ``readinto``, outside urllib3: its connection still goes
    back to the pool, so a catch-up does not open a connection per window."""
    bucket = moto_s3.new_bucket()
    writer, _ = _provider(moto_s3, bucket, 0)
    key = seg(1)
    data = random.Random(4).randbytes(4 << 20)
    writer.append(key, data, 0)
    writer.seal(key)
    reader, requests = _provider(moto_s3, bucket, 256 << 10)
    for at in range(0, len(data), 64 << 10):
        assert reader.read(key, at, 64 << 10) == data[at : at + (64 << 10)]
    assert requests["GET"] >= 16
    pools = reader.client._endpoint.http_session._manager.pools  # type: ignore[attr-defined]
    opened = sum(pools[k].num_connections for k in pools.keys())  # noqa: SIM118
    assert opened <= 2  # the reader's own first read and the read-ahead thread's
    reader.close()
    writer.close()
