"""Opening the journal and the approval store a location names: the one place that maps a
``--db`` / ``SAGACITY_DB`` / ``Sagacity(journal=...)`` value (and a ``--checkpoints`` /
``SAGACITY_CHECKPOINTS`` value) to a backend.

* ``postgresql://...`` or ``postgres://...``: PostgreSQL (the ``postgres`` extra); the journal and
  the approval store share one :class:`~sagacity_agents.backends.postgres.setup.PostgresDatabase`.
* ``":memory:"``: in-memory journal and store (this process only).
* anything else: a SQLite file (created with its tables if missing); the store uses the same file.
"""

from __future__ import annotations

from pathlib import Path

from .core.approval import ApprovalStore
from .core.checkpoints import CheckpointStore
from .core.fence import backend_of
from .core.journal import Journal, Located, OnDatabase
from .backends.directory.checkpoints import DirectoryCheckpointStore
from .backends.memory.approvals import InMemoryApprovalStore
from .backends.memory.journal import InMemoryJournal
from .backends.postgres.driver import is_postgres_uri, redacted_uri
from .backends.postgres.setup import PostgresDatabase
from .backends.sqlite.approvals import SqliteApprovalStore
from .backends.sqlite.journal import SqliteJournal

__all__ = [
    "approval_store_for", "is_postgres_uri", "open_approval_store", "open_checkpoint_store",
    "open_journal", "redacted_uri",
]


def open_journal(location: str | Path) -> Journal:
    """Open the journal at ``location`` (see the module notes for the forms).

    Raises:
        ConfigurationError: a PostgreSQL URI without the ``postgres`` extra installed.
        JournalError: a SQLite file cannot be opened. (PostgreSQL connects on first use, and
            reports an unreachable server or an old schema then.)
    """
    if is_postgres_uri(location):
        from .backends.postgres.journal import PostgresJournal

        return PostgresJournal(str(location))
    if str(location) == ":memory:":
        return InMemoryJournal()
    return SqliteJournal(location)


def approval_store_for(journal: Journal) -> ApprovalStore:
    """The approval store that lives with ``journal`` (a view: its backend): the same PostgreSQL
    database (same pools), the same SQLite file, or a new in-memory store for any other journal."""
    backend = backend_of(journal)
    if isinstance(backend, OnDatabase) and isinstance(backend.database, PostgresDatabase):
        from .backends.postgres.approvals import PostgresApprovalStore

        return PostgresApprovalStore(backend.database)
    if isinstance(backend, Located) and backend.path and backend.path != ":memory:":
        return SqliteApprovalStore(backend.path)
    return InMemoryApprovalStore()


def open_approval_store(location: str | Path) -> ApprovalStore:
    """Open the approval store at ``location`` without a journal (CLI ``approvals`` commands).

    Raises:
        as :func:`open_journal`.
    """
    if is_postgres_uri(location):
        from .backends.postgres.approvals import PostgresApprovalStore

        return PostgresApprovalStore(str(location))
    if str(location) == ":memory:":
        return InMemoryApprovalStore()
    return SqliteApprovalStore(location)


def open_checkpoint_store(location: str | Path) -> CheckpointStore:
    """The checkpoint store ``location`` names: a ``postgresql://`` / ``postgres://`` URI is a
    :class:`~sagacity_agents.backends.postgres.checkpoints.PostgresCheckpointStore` (its
    ``sagacity_schema`` query parameter names the schema, default ``sagacity_checkpoints``),
    anything else a
    :class:`~sagacity_agents.backends.directory.checkpoints.DirectoryCheckpointStore`.

    Raises:
        ConfigurationError: a URI without the ``postgres`` extra, or a bad schema name.
        OSError: the directory cannot be created.
    """
    if is_postgres_uri(location):
        from .backends.postgres.checkpoints import PostgresCheckpointStore

        return PostgresCheckpointStore(str(location))
    return DirectoryCheckpointStore(location)
