"""Session-wide fixtures: where the shared real broker files are."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REAL_DATA = SHARED / "testdata" / "real"


@pytest.fixture(scope="session")
def real_data() -> Path:
    """``../shared/testdata/real`` beside the repo; its absence is a failure, never a skip."""
    if not REAL_DATA.is_dir():
        pytest.fail(f"real broker files missing: {REAL_DATA} (clone the repo next to ../shared)")
    return REAL_DATA
