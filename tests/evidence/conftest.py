"""Shared fixtures of the evidence tests."""

from __future__ import annotations

import pytest

from ..sdk import wire_app


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    """The wire app's ledger (every executed transfer) in the test's own directory."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setattr(wire_app, "LEDGER", path)
    monkeypatch.setenv("WIRE_LEDGER", str(path))
    return path
