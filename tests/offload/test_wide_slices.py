"""How a wide round cuts its queues into waves
(:func:`~tiered.offload.commit_notifier.wide_slices`): every queue once, in order, full waves
first, then waves shrinking towards a small last one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tiered.offload.commit_notifier import wide_slices


@given(n=st.integers(0, 50_000), step=st.integers(1, 5_000), tail=st.integers(1, 2_000))
def test_the_waves_cover_every_queue_once_and_shrink_to_the_tail(
    n: int, step: int, tail: int
) -> None:
    got = wide_slices(n, step, tail)
    assert [i for i, _ in got[1:]] == [j for _, j in got[:-1]]  # side by side, in order
    assert (got[0][0], got[-1][1]) == (0, n) if n else got == []
    sizes = [j - i for i, j in got]
    assert all(0 < s <= step for s in sizes)
    assert sizes == sorted(sizes, reverse=True)  # never a bigger wave after a smaller one
    if n > tail and sizes[-1] < step:  # a tail was cut: its last wave is at most the tail
        assert sizes[-1] <= tail
    assert len(got) <= -(-n // step) + max(n, 2).bit_length() + 1  # a few more than full waves


def test_a_round_of_ten_thousand_queues() -> None:
    assert [j - i for i, j in wide_slices(10_176, 2_048, 256)] == [
        2_048, 2_048, 2_048, 2_048, 992, 496, 248, 248,
    ]  # fmt: skip
