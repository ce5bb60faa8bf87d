"""Helm values sets for the chart tests: deep-merged the way ``helm -f a.yaml -f b.yaml`` does."""

from __future__ import annotations

import copy
from typing import Any


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    """Values sets deep-merged left to right (a later scalar or list replaces, maps merge)."""
    out: dict[str, Any] = {}
    for part in parts:
        _merge_into(out, copy.deepcopy(part))
    return out


def _merge_into(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge_into(base[key], value)
        else:
            base[key] = value
