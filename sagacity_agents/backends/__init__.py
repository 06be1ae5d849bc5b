"""Journals and stores: the second door for storage, and the backends' folders behind it.

::

    from sagacity_agents.backends import SqliteApprovalStore, SqliteJournal
    sagacity = Sagacity(SqliteJournal("journal.db"), approvals=SqliteApprovalStore("journal.db"))

What this module exports is public: the in-memory, SQLite and PostgreSQL journals and approval
stores, the checkpoint stores, the protocols they implement (:class:`Journal`,
:class:`ApprovalStore`, :class:`CheckpointStore`, for another backend) and the entry they store
(:class:`JournalEntry`, :class:`Phase`). The PostgreSQL classes are imported on first use; they
need the ``postgres`` extra (psycopg 3, psycopg_pool); without it, using one raises
:class:`~sagacity_agents.errors.ConfigurationError` naming ``pip install
'sagacity-agents[postgres]'``.

The folders (``memory``, ``sqlite``, ``postgres``, ``directory``) are internal: each implements the
core's protocols for one kind of storage, with the same module names in each (``journal``,
``approvals``, ``setup``, ``checkpoints``). A backend imports the core; the core imports no
backend. ``sagacity_agents.stores`` (internal) is the one place that maps a location (a path,
``:memory:``, a ``postgresql://`` URI) to a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import on_first_use
from ..core.approval import ApprovalStore
from ..core.checkpoints import CheckpointStore
from ..core.entries import JournalEntry, Phase
from ..core.journal import Journal
from .directory.checkpoints import DirectoryCheckpointStore
from .memory.approvals import InMemoryApprovalStore
from .memory.journal import InMemoryJournal
from .sqlite.approvals import SqliteApprovalStore
from .sqlite.journal import SqliteJournal

if TYPE_CHECKING:  # imported on first use: the ``postgres`` extra
    from .postgres.approvals import PostgresApprovalStore
    from .postgres.checkpoints import PostgresCheckpointStore
    from .postgres.journal import PostgresJournal
    from .postgres.setup import PostgresDatabase

__getattr__ = on_first_use(globals())

__all__ = [
    "ApprovalStore",
    "CheckpointStore",
    "DirectoryCheckpointStore",
    "InMemoryApprovalStore",
    "InMemoryJournal",
    "Journal",
    "JournalEntry",
    "Phase",
    "PostgresApprovalStore",
    "PostgresCheckpointStore",
    "PostgresDatabase",
    "PostgresJournal",
    "SqliteApprovalStore",
    "SqliteJournal",
]
