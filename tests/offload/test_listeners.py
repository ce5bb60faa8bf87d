"""A listener's preparation of many queues' batches at once (:func:`steps_of`): its form for
many where it has one, one by one where it has none or that form raised, and a batch whose
own preparation raised logged and left out, never failing the others."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tiered.offload.listeners import steps_of


def _items(n: int) -> Any:
    return [(SimpleNamespace(path=f"T/{i}"), f"batch{i}", np.arange(i)) for i in range(n)]


def _one(flat: Any, batch: Any, offsets: Any) -> Callable[[], None] | None:
    if batch == "batch1":
        raise ValueError("a bug in one batch")
    return lambda: None


def test_the_form_for_many_answers_for_every_batch() -> None:
    items = _items(3)
    steps: list[Callable[[], None] | None] = [None, print, None]
    assert steps_of(items, _one, lambda got: steps) == steps


def test_without_it_or_when_it_raises_each_batch_is_prepared_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(got: Any) -> list[Callable[[], None] | None]:
        raise RuntimeError("many")

    for many in (None, broken):
        got = steps_of(_items(3), _one, many)
        assert [s is not None for s in got] == [True, False, True]
    assert "T/1: commit listener" in caplog.text
    assert "failed on 3 batches" in caplog.text
