"""Shared fixtures: tracing off (no network), journals of every backend."""

from __future__ import annotations

import os

import pytest
from agents import set_tracing_disabled

# The suites every backend runs live outside test modules: their asserts explain themselves too.
pytest.register_assert_rewrite(
    "tests.backends", "tests.journal.journal_contract", "tests.journal.fence_contract",
    "tests.approvals.approval_contract"
)

from tests.backends import EMBEDDED  # noqa: E402 - after the assert rewriting is registered

set_tracing_disabled(True)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers inherit COLUMNS=80 / LINES=24 from execnet; a serial run has none, and
    # the CLI then prints at its pipe width (render.PIPE_WIDTH). The tests read that output.
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


@pytest.fixture(autouse=True)
def _each_test_is_its_own_application():
    """Each test stands for an application in its own process: the objects the first
    declaration under a derived id captured (``core.declarations._FIRST_OBJECTS``) are those of
    this test's tools, not of a test that ran before in this worker. A test that builds one
    tool twice around other objects still meets the refusal (give such tools a scope)."""
    from sagacity_agents.core import declarations

    before = dict(declarations._FIRST_OBJECTS)  # noqa: SLF001
    yield
    declarations._FIRST_OBJECTS.clear()  # noqa: SLF001
    declarations._FIRST_OBJECTS.update(before)  # noqa: SLF001


@pytest.fixture(params=EMBEDDED, ids=str)
def any_journal(request):
    """A journal of each embedded backend (``tests/backends.py``) in turn."""
    journal = request.param.journal(request.param.location(request))
    yield journal
    import asyncio

    asyncio.run(journal.close())


@pytest.fixture(scope="session")
def pg_session_uri():
    """URI of this session's migrated PostgreSQL schema (skipped without a server; failed
    under CI)."""
    from tests.pg import migrated_schema

    yield from migrated_schema()


@pytest.fixture
def pg_uri(pg_session_uri):
    """The session's PostgreSQL schema, emptied for this test."""
    from tests.pg import truncate

    truncate(pg_session_uri)
    return pg_session_uri


@pytest.fixture(scope="session")
def pg_checkpoints_session_uri():
    """URI of this session's migrated PostgreSQL checkpoint schema (skipped without a server;
    failed under CI)."""
    from tests.pg import migrated_checkpoint_schema

    yield from migrated_checkpoint_schema()


@pytest.fixture
def pg_checkpoints_uri(pg_checkpoints_session_uri):
    """The session's PostgreSQL checkpoint schema, emptied for this test."""
    from tests.pg import truncate_checkpoints

    truncate_checkpoints(pg_checkpoints_session_uri)
    return pg_checkpoints_session_uri


@pytest.fixture(params=["directory", "postgres"])
def checkpoints_at(request, tmp_path):
    """Where a test's signed checkpoints go, in turn: a directory, and the session's PostgreSQL
    checkpoint schema (emptied for the test). Tests that take it are the checkpoint store's
    conformance suite: every store must pass them."""
    if request.param == "directory":
        return str(tmp_path / "checkpoints")
    return request.getfixturevalue("pg_checkpoints_uri")


# The slowest tests, started first so that the run does not end on one of them while the other
# workers are idle. Figures: wall seconds of the whole file or test under `-n 2` on
# the 2-core CI machine, 2026-12-02. Only the order changes: a test missing here still runs.
SLOW_FIRST = (
    "tests/crash/test_sigkill_recovery.py",  # ~45 s then, ~20 s of it sleeping for leases (now none)
    "tests/test_typing.py",  # mypy on a clean checkout, ~30 s CPU
    "tests/tau_airline/test_harness.py",  # ~25 s, its module fixture
    "tests/mcp/test_mcp_recovery.py",
    "tests/test_multi_worker_example.py",
    "tests/test_wire_transfer_example.py",
    "tests/test_hooks_approval_example.py",
    "tests/journal/test_canonical_fast_path.py",
    "tests/web/test_serve.py",
    "tests/test_script_declarations.py",
    "tests/sdk/test_lease.py",
    "tests/sdk/test_fencing_processes.py",
    "tests/sdk/test_claims.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the run: :data:`SLOW_FIRST` first (in its order), then the rest as collected."""
    def rank(item: pytest.Item) -> int:
        for n, prefix in enumerate(SLOW_FIRST):
            if item.nodeid.startswith(prefix):
                return n
        return len(SLOW_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order
