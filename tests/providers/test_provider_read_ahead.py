"""Read-ahead windows of sequential readers (``providers.read_ahead``), alone and in the s3
provider over moto: one GET per window, cut at chunk objects, none for random reads."""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from tiered.providers import S3Provider
from tiered.providers.read_ahead import ReadAhead
from tiered.providers.testing.servers import S3Endpoint

DATA = random.Random(5).randbytes(10_000)
CHUNK_ENDS = (3_000, 6_500, 10_000)


class Backend:
    """``DATA`` as chunk objects ending at ``CHUNK_ENDS``; counts fetches."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fetches: list[tuple[int, int]] = []
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def bounds(self, key: str, start: int, size: int) -> tuple[int, bool]:
        if start >= len(DATA):
            return start, False
        end = min(start + size, next(e for e in CHUNK_ENDS if start < e))
        return end, end < len(DATA)

    def fetch(self, key: str, start: int, end: int) -> Iterator[bytes]:
        """The window in pieces of 100 bytes, as a GET's body arrives."""
        with self.lock:
            self.fetches.append((start, end - start))
        if start == self.fail_at:
            raise OSError("backend down")
        for at in range(start, end, 100):
            yield DATA[at : min(at + 100, end)]


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


def test_the_budget_drops_the_least_recently_read_key() -> None:
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 2048)  # one key's two windows fill it
    for key in ("a", "b"):
        assert ahead.read(key, 0, 10) is None
        assert ahead.read(key, 10, 10) == DATA[10:20]
    assert ahead.held_bytes <= 2048
    assert ahead.read("a", 20, 10) is None  # its windows were dropped for b's: read directly
    ahead.close()


def test_a_failed_fetch_leaves_the_read_to_the_caller() -> None:
    backend = Backend(fail_at=10)
    ahead = ReadAhead(backend.bounds, backend.fetch, 1024, 1 << 20)
    assert ahead.read("k", 0, 10) is None
    assert ahead.read("k", 10, 10) is None  # the window failed: the caller reads and reports
    assert ahead.held_bytes == 0
    ahead.close()


def test_a_reader_has_its_bytes_before_the_window_has_arrived() -> None:
    gate = threading.Event()

    def slow(key: str, start: int, end: int) -> Iterator[bytes]:
        yield DATA[start : start + 100]
        assert gate.wait(10)  # the rest of the GET's body is late
        yield DATA[start + 100 : end]

    ahead = ReadAhead(Backend().bounds, slow, 1024, 1 << 20)
    assert ahead.read("k", 0, 20) is None  # a small first read: the caller's
    assert ahead.read("k", 20, 80) == DATA[20:100]  # sequential: from the first piece, at once
    gate.set()
    assert ahead.read("k", 100, 500) == DATA[100:600]
    ahead.close()


def test_a_fetch_that_breaks_off_leaves_the_rest_to_the_caller() -> None:
    def broken(key: str, start: int, end: int) -> Iterator[bytes]:
        yield DATA[start : start + 100]
        raise OSError("connection reset")

    ahead = ReadAhead(Backend().bounds, broken, 1024, 1 << 20)
    assert ahead.read("k", 0, 20) is None
    assert ahead.read("k", 20, 500) is None  # past what arrived: the caller reads it itself
    assert ahead.held_bytes == 0
    ahead.close()


def test_past_the_end_is_the_callers_to_report() -> None:
    backend = Backend()
    ahead = ReadAhead(backend.bounds, backend.fetch, 4096, 1 << 20)
    assert ahead.read("k", 9_990, 10) is None
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
def test_s3_catch_up_costs_one_get_per_window_and_one_listing(
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
    assert lists <= 1 if sealed else lists == 1  # unsealed: listed once, not once a read
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
    assert ahead.held_bytes <= (1 + 1 + 2) * 1024  # what the last read spans and two ahead
    ahead.close()
