"""Fixtures shared by the SDK-adapter tests."""

from __future__ import annotations

import pytest

from tests.backends import BACKENDS


@pytest.fixture(params=BACKENDS, ids=str)
async def journal(request):
    """A fresh journal of each backend of ``tests/backends.py`` (PostgreSQL in a schema of its
    own); a module that defines its own ``journal`` fixture uses that one instead."""
    backend = request.param
    opened = backend.journal(backend.location(request))
    yield opened
    close = getattr(opened, "close", None)
    if close is not None:
        await close()
