"""The erasure tests' journal on each backend (``tests.backends.BACKENDS``)."""

from __future__ import annotations

import asyncio

import pytest

from tests.backends import BACKENDS


@pytest.fixture(params=BACKENDS, ids=str)
def place(request):
    """``(backend, location, journal)``: a fresh journal of each backend, closed after the test."""
    backend = request.param
    location = backend.location(request)
    opened = backend.journal(location)
    yield backend, location, opened
    asyncio.run(opened.close())


@pytest.fixture
def journal(place):
    """The journal of :func:`place`."""
    return place[2]
