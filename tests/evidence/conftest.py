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


@pytest.fixture(params=["sqlite", "postgres"])
def journal_db(request, tmp_path):
    """Where a test's journal lives: a SQLite file, or this test's PostgreSQL schema (a
    ``postgresql://`` URI). Either is a ``db`` for :class:`Sagacity`, ``--db`` and ``tamper``."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_uri")
    return str(tmp_path / "j.db")
