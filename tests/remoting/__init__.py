"""Tests of the replay endpoint (a package so its modules share the conftest helpers)."""
