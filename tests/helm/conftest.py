"""The chart under test, loaded once by the real Helm v4 engine (helm-python-sdk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import helm_python as helm
import pytest

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "rocketmq-tiered"


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    """``helm/rocketmq-tiered`` as Helm loads it (``.helmignore`` applied)."""
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded
