"""Fixtures of the sensitive-data acceptance tests: each backend in turn, with and without a
master key, and the SDK trace / OpenTelemetry collectors of tests/observability."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.backends import BACKENDS, Backend
from tests.observability.conftest import otel, sdk_spans  # noqa: F401 - fixtures used here too

from .helpers import DATA_KEY_ENVVAR, MASTER_TEXT


@dataclasses.dataclass(frozen=True)
class Place:
    """One backend and this test's fresh location on it."""

    backend: Backend
    location: str

    @property
    def name(self) -> str:
        return self.backend.name

    def journal(self, **options: Any) -> Any:
        return self.backend.journal(self.location, **options)

    def sagacity_location(self) -> Any:
        """What ``Sagacity(...)`` takes for this place: the location (a memory journal is made
        here, as ``":memory:"`` would, so the test can read its objects afterwards)."""
        return self.journal() if self.name == "memory" else self.location


@pytest.fixture(params=BACKENDS, ids=str)
def place(request) -> Place:
    """Each backend of ``tests/backends.py`` in turn (PostgreSQL: this test's emptied schema)."""
    return Place(request.param, request.param.location(request))


@pytest.fixture(params=[False, True], ids=["no-master-key", "master-key"])
def master(request, monkeypatch) -> bool:
    """Without a master key (values committed and masked, never stored), then with one
    (``SAGACITY_DATA_KEY`` set: values sealed)."""
    if request.param:
        monkeypatch.setenv(DATA_KEY_ENVVAR, MASTER_TEXT)
    else:
        monkeypatch.delenv(DATA_KEY_ENVVAR, raising=False)
    monkeypatch.delenv("SAGACITY_DATA_KEY_PREVIOUS", raising=False)
    return request.param


@pytest.fixture
def with_master(monkeypatch) -> str:
    """``SAGACITY_DATA_KEY`` set for this test; returns the key's text."""
    monkeypatch.setenv(DATA_KEY_ENVVAR, MASTER_TEXT)
    return MASTER_TEXT


@pytest.fixture
def without_master(monkeypatch) -> None:
    """No master key in the environment."""
    monkeypatch.delenv(DATA_KEY_ENVVAR, raising=False)
