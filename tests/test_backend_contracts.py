"""Every storage backend passes the journal contract and the approval-store conformance suite.

The backends are the list in ``tests/backends.py``; each test here runs once per backend (its id
ends in ``[memory]``, ``[sqlite]``, ``[postgres]``...), so a backend added to that list is held to
both suites with no other change. PostgreSQL runs in this test's own schema; without a server it
is skipped (each test shows as skipped), and under CI it fails instead. What only one backend can
show stays beside its suite (``tests/journal/test_journal_backends.py``,
``test_journal_postgres.py``, ``tests/approvals/test_approval_stores.py``).

Also checked per backend: ``sagacity_agents.stores`` opens this very backend at its location, so
the location a test uses is the one ``Sagacity(...)``, ``--db`` and ``$SAGACITY_DB`` would use.
"""

from __future__ import annotations

import pytest

from sagacity_agents import stores
from tests.approvals.approval_contract import ApprovalStoreConformance
from tests.backends import BACKENDS, Backend
from tests.journal.fence_contract import FenceContract
from tests.journal.journal_contract import JournalContract


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request) -> Backend:
    """Each backend of ``tests/backends.py`` in turn."""
    return request.param


@pytest.fixture
def location(backend, request) -> str:
    """Where this test's data lives on ``backend``: fresh and empty."""
    return backend.location(request)


class TestJournalContract(JournalContract, FenceContract):
    @pytest.fixture
    async def journal(self, backend, location, clock):
        journal = backend.journal(location, clock=clock)
        yield journal
        await journal.close()

    @pytest.fixture
    def tamper(self, backend, location, journal):
        return backend.tamper(location, journal)


class TestApprovalStoreConformance(ApprovalStoreConformance):
    @pytest.fixture
    async def store(self, backend, location):
        store = backend.approvals(location)
        yield store
        await store.close()


async def test_stores_opens_this_backend_at_its_location(backend, location):
    """The backend list and ``stores`` agree: at this location, ``open_journal``,
    ``open_approval_store`` and ``approval_store_for`` give this backend's classes."""
    journal, store = backend.journal(location), backend.approvals(location)
    opened = stores.open_journal(location)
    opened_store = stores.open_approval_store(location)
    beside = stores.approval_store_for(opened)
    try:
        assert type(opened) is type(journal), (backend.name, type(opened), type(journal))
        assert type(opened_store) is type(store), (backend.name, type(opened_store), type(store))
        assert type(beside) is type(store), (backend.name, type(beside), type(store))
    finally:
        for each in (beside, opened_store, opened, store, journal):
            await each.close()
