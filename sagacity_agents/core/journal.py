"""The journal contract every backend meets (the append rule itself is ``core.append_rule``).

A journal is append-only and keeps one hash chain per saga. Appends to one saga are totally
ordered with no gaps, whatever the concurrency (tasks, threads, processes on one SQLite file),
under the rule of ``core.append_rule`` (write keys, the closed saga, conditional appends, claims,
fencing), applied atomically with each append.

The interface is async; backends that block (SQLite) run their I/O off the event loop.

**One append contract.** A backend's ``append`` takes one :class:`AppendRequest`, built once by
the writer's view (``core.fence.JournalView``; the saga's: ``FencedJournal``), which adds
the lease's fence and the writer's entry tagger: a backend holds no writer's state. The rule's
steps (write-key replay, the closed saga, ``expected_seq``, fencing, tagging) are
``core.append_rule.append_locked``'s, in that order; a backend supplies only its dialect pieces
(:class:`AppendDialect`: the stored entry of a write key, the tail, the lease, the insert) and
its lock. PostgreSQL runs the same steps in one SQL function (one round trip) and applies the
rule's errors with :func:`next_entry` and :func:`replay_of`. A backend also takes the loose form
``append(saga_id, phase, write_key=..., ...)`` (scripts, tests, the CLI), which builds the
request the same way (:func:`as_request`).

Optional capabilities are small protocols, read once per journal object by
:func:`capabilities_of` (:class:`Capabilities`):

* :class:`BatchAppend` ``append_many(requests)``: several appends to one saga in one round trip,
  in order, with :meth:`JournalBackend.append`'s errors; an append that raises leaves the earlier
  ones written and the later ones not. Reached through :func:`append_each`.
* :class:`EntriesMany` ``entries_many(saga_ids)``: the entries of several sagas in one read,
  ``{saga_id: entries}`` (a saga without entries left out). Reached through ``core.reads.read_sagas``.
* :class:`RowsRead` ``rows_many(saga_ids)``: the same read as stored rows (tuples of
  ``entries.CHAIN_COLUMNS``, no tags), no entry built (the SQL backends). Reached through
  ``core.reads.read_saga_rows``: ``verify`` checks a sound saga from its rows.
* :class:`SyncAppend` ``append_sync(request)``: :meth:`JournalBackend.append`, blocking, from a
  thread that is not the event loop's (SQLite, memory): a sync tool's worker thread writes its
  INTENT and outcome without a hop to the loop. Counted only where the class that defines ``append``
  defines it too (a wrapper that changes ``append`` keeps every write going through it).
* :class:`OutcomesBehind` ``writes_outcomes_behind``: a successful call's outcome entry may be
  written behind the call (``core.saga.outcomes``). The outcome still goes through ``append``:
  the contract leaves room for a backend that batches or defers it.
* :class:`CommitRule` ``durable_outcomes``: the commit rule a run journals in its RUN_STARTED.
* ``core.data_keys.DataKeyStore`` (``Capabilities.data_keys``): the sagas' wrapped data keys,
  stored beside the journal (every backend of the library).
* :class:`TailRead` ``tail(saga_id)``: the saga's newest entry alone, at a cost that does not
  grow with the saga (one index probe): what a lease keeper's beat reads (``core.lease``).
  Reached through :func:`read_tail`.

**Every journal has an id** (:class:`Identified`, ``await journal.journal_id()``): a random
128-bit id made with it (a SQLite file, a PostgreSQL schema, an in-memory journal at
construction) that sagas opened under derivation 2 bind their keys and tags to
(``core.identity``). Every backend of the library, its views and ``testing.FaultyJournal`` have
it; a journal class without it opens its sagas under derivation 1 (``identity.journal_id_of``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from weakref import WeakKeyDictionary

from .append_rule import (
    CLAIM_PHASES, CLAIMANT_KEY, FENCE_KEY, LATE_KEY, LATE_PHASES, AppendDialect, AppendRequest,
    Clock, EntryTagger, Tail, append_locked, as_request, as_requests, claimant_of, new_claimant,
    late_start, next_entry, reopens, replay_of, seal, stamp_from, utc_now, utc_stamp,
)
from .entries import OUTCOME_PHASES, JournalEntry, Phase

__all__ = [
    "CLAIMANT_KEY", "CLAIM_PHASES", "FENCE_KEY", "LATE_KEY", "LATE_PHASES", "LAZY_PHASES",
    "AppendDialect", "AppendRequest", "BatchAppend", "Capabilities", "Clock", "CommitRule",
    "EntriesMany", "EntryTagger", "Identified", "Journal", "JournalBackend", "JournalReads", "Located",
    "OnDatabase", "OutcomesBehind", "RowsRead", "SagaSummary", "SyncAppend", "Tail", "TailRead", "View",
    "append_each", "append_locked", "append_requests", "as_request", "as_requests",
    "capabilities_of", "claimant_of", "late_start", "lazy_phases", "new_claimant", "next_entry",
    "read_tail", "reopens", "replay_of", "seal", "stamp_from", "utc_now", "utc_stamp",
]


LAZY_PHASES = frozenset({Phase.SAGA_OPENED, Phase.RUN_STARTED})
"""Committed without waiting for the disk, always (docs/architecture.md, "One durable commit
per call"): nothing outside the journal follows from these entries alone, and the saga's next
durable commit (its first INTENT's, at the latest) makes them durable."""


def lazy_phases(*, durable_outcomes: bool) -> frozenset[Phase]:
    """The phases a backend commits without waiting for the disk (the commit rule of
    docs/architecture.md, "One durable commit per call"): :data:`LAZY_PHASES`, and a call's
    outcome (EXECUTED, REFUSED, FAILED) unless ``durable_outcomes``. A late outcome
    (``AppendRequest.late``) waits for the disk whatever its phase; every other entry (an INTENT,
    an approval pause, a compensation decision, an undo's outcome, RUN_ENDED, SAGA_CLOSED) waits.

    A power loss can then turn the last call's outcome into "in doubt" (never undone blindly)
    and lose nothing else: a call's INTENT is durable before its body runs, and the outcome is
    made durable by the next durable commit (the next INTENT, the end of the run) before anything
    depends on it. A process crash loses nothing (the commit is in the operating system's hands).
    """
    return LAZY_PHASES if durable_outcomes else LAZY_PHASES | OUTCOME_PHASES


@dataclass(frozen=True, slots=True)
class SagaSummary:
    """One saga as :meth:`Journal.saga_summaries` lists it: enough to show its status without
    reading its whole chain (a closed saga's last entry is its SAGA_CLOSED; an idle one's its
    RUN_ENDED). Unverified: verify the saga before acting on it."""

    saga_id: str
    """The saga's id."""
    entry_count: int
    """How many entries are stored for it."""
    first: JournalEntry
    """Its stored entry with the lowest ``seq`` (seq 1 unless entries were removed)."""
    last: JournalEntry
    """Its stored entry with the highest ``seq``."""


class JournalReads(Protocol):
    """What every journal reads (and how it is closed): backends and views alike."""

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """Return the saga's entries in ``seq`` order, as stored (an empty list if unknown).

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def saga_ids(self) -> list[str]:
        """Return every saga id in the journal, oldest saga first.

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """Return one page of :class:`SagaSummary`, in :meth:`saga_ids` order (oldest first).

        Cost: one pass over the journal's ``(saga_id, seq)`` index to count and order the sagas
        (no payload read), then the first and last entry of each saga of the page; never a
        whole chain.

        Args:
            offset: sagas to skip (>= 0).
            limit: most sagas to return (>= 0); ``None``: all of them.

        Raises:
            ValueError: a negative ``offset`` or ``limit``.
            JournalError: storage could not be read.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...


@runtime_checkable
class JournalBackend(JournalReads, Protocol):
    """An append-only, hash-chained store of journal entries (one chain per saga): what a
    backend implements. Writers reach it through a view (``core.fence``), which builds each
    request."""

    async def append(self, request: AppendRequest, /) -> JournalEntry:
        """Append one entry to ``request.saga_id``'s chain and return it once durably stored.

        ``request`` says (:class:`AppendRequest`): the saga, the phase, the write key (unique per
        logical write within the saga; a retry passes the same key), the tool and call id of a
        tool entry, the converted payload, ``expected_seq`` (append only while the saga's last
        entry has this ``seq``, 0: none yet), ``fence`` (the seq of the RUN_STARTED whose lease
        the writer holds: written only while it is the saga's newest, stored in the payload),
        ``late`` (an outcome whose writer lost that lease while the body ran: written without
        the check, marked late) and the writer's tagger. All checked atomically with the
        append. Every backend also takes the loose form, ``append(saga_id, phase, **fields)``
        (:func:`as_request`).

        Returns:
            The stored entry (the earlier one when this is a retry of the same write).

        Raises:
            JournalClosedError: the saga is closed (its last entry is SAGA_CLOSED) and the
                append is not a late outcome under its INTENT's fence (``reopens``).
            JournalConflictError: ``expected_seq`` is not the saga's last ``seq``.
            LeaseLostError: (a ``JournalConflictError``) ``fence`` is not the saga's newest
                RUN_STARTED; nothing written.
            ClaimTakenError: (a ``JournalConflictError``) a claim whose write key another writer
                (another claimant nonce) already claimed.
            JournalWriteError: storage failed, or the write key names a different entry.
        """
        ...


@runtime_checkable
class Journal(JournalReads, Protocol):
    """A journal as the library writes and reads it: a writer's view (``core.fence``), or a
    backend (its ``append`` takes this keyword form too)."""

    async def append(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """Append the entry ``AppendRequest.build(saga_id, phase, **fields)`` describes (the
        keywords: ``write_key``, ``tool``, ``call_id``, ``payload``, ``expected_seq``,
        ``fence``, ``late``); see :meth:`JournalBackend.append`.

        Raises:
            EncodingError: the payload has no canonical encoding (nothing is written).
            The errors of :meth:`JournalBackend.append`.
        """
        ...


@runtime_checkable
class Identified(Protocol):
    """A journal with an id (every backend of the library; see the module notes)."""

    async def journal_id(self) -> str:
        """The journal's id: 32 lowercase hex digits (128 random bits), made with the journal
        and kept with its tables; changed only by ``sagacity journal new-id``.

        Raises:
            JournalError: the id could not be read.
        """
        ...


@runtime_checkable
class SyncAppend(Protocol):
    """:meth:`JournalBackend.append`, blocking, callable from a thread that is not the event loop's."""

    def append_sync(self, request: AppendRequest, /) -> JournalEntry:
        """Same ordering, rules and errors as :meth:`JournalBackend.append`."""
        ...


@runtime_checkable
class BatchAppend(Protocol):
    """Several appends to one saga in one round trip (see the module notes)."""

    async def append_many(self, requests: Sequence[AppendRequest], /) -> list[JournalEntry]:
        """The stored entries, in order; the errors of the first append that fails."""
        ...


@runtime_checkable
class EntriesMany(Protocol):
    """The entries of several sagas in one read."""

    async def entries_many(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        """``{saga_id: entries}``, sagas without entries left out."""
        ...


@runtime_checkable
class RowsRead(Protocol):
    """The stored rows of several sagas in one read, no entry built."""

    async def rows_many(self, saga_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        """``{saga_id: rows}``, each a tuple of ``entries.CHAIN_COLUMNS``."""
        ...


@runtime_checkable
class TailRead(Protocol):
    """The saga's newest entry alone (see the module notes)."""

    async def tail(self, saga_id: str) -> JournalEntry | None:
        """The stored entry with the saga's highest ``seq`` (``None``: no entry).

        Raises:
            JournalError: storage could not be read.
        """
        ...


@runtime_checkable
class OutcomesBehind(Protocol):
    """A journal whose successful calls' outcomes may be written behind the calls."""

    writes_outcomes_behind: bool


@runtime_checkable
class CommitRule(Protocol):
    """A journal that says whether every call's outcome waits for the disk."""

    durable_outcomes: bool


@runtime_checkable
class Located(Protocol):
    """A journal stored at a location another store can share (SQLite: its file)."""

    path: str


@runtime_checkable
class OnDatabase(Protocol):
    """A journal in a database another store can share (PostgreSQL: its pools)."""

    database: Any


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a journal object can do beyond :class:`JournalBackend`, read once
    (:func:`capabilities_of`)."""

    sync_append: bool = False
    """:class:`SyncAppend`, defined by the class that defines ``append``."""
    batch_append: bool = False
    """:class:`BatchAppend`."""
    rows_read: bool = False
    """:class:`RowsRead`."""
    entries_many: bool = False
    """:class:`EntriesMany`."""
    outcomes_behind: bool = False
    """:class:`OutcomesBehind`, and it says true."""
    durable_outcomes: bool | None = None
    """:class:`CommitRule`'s answer (``None``: the journal does not say)."""
    tail_read: bool = False
    """:class:`TailRead`."""
    identified: bool = False
    """:class:`Identified`: ``await journal.journal_id()``."""
    data_keys: bool = False
    """``core.data_keys.DataKeyStore``: the journal keeps its sagas' wrapped data keys
    (``data_keys``, ``add_data_key``, ``erase_data_keys``, ``rewrap_data_keys``; on a view,
    call them on its ``backend``)."""


@runtime_checkable
class View(Protocol):
    """A writer's view of a backend (``core.fence.JournalView``): it builds the requests, the
    backend underneath stores them."""

    backend: Any
    """The journal underneath."""
    capabilities: Capabilities
    """The backend's capabilities."""

    async def append_many(
        self, saga_id: str, appends: Sequence[Mapping[str, Any]]
    ) -> list[JournalEntry]:
        """Keyword appends to one saga, in order."""
        ...


_capabilities: WeakKeyDictionary[Any, Capabilities] = WeakKeyDictionary()


def capabilities_of(journal: Any) -> Capabilities:
    """What ``journal`` can do (a view: its backend's), read from the object once and kept for
    its lifetime: the one place a journal's optional members are looked for.

    Args:
        journal: a backend, a wrapper of one, or a :class:`View`.
    """
    try:
        return _capabilities[journal]
    except (KeyError, TypeError):
        pass
    found = journal.capabilities if isinstance(journal, View) else _probe(journal)
    with contextlib.suppress(TypeError):  # an object that takes no weak reference: not kept
        _capabilities[journal] = found
    return found


def _probe(journal: Any) -> Capabilities:
    """What ``journal`` (not a view) declares, read from the object."""

    def owner(name: str) -> type | None:
        return next((c for c in type(journal).__mro__ if name in c.__dict__), None)

    sync = owner("append_sync")
    return Capabilities(
        sync_append=sync is not None and sync is owner("append"),
        batch_append=isinstance(journal, BatchAppend),
        rows_read=isinstance(journal, RowsRead),
        entries_many=isinstance(journal, EntriesMany),
        outcomes_behind=isinstance(journal, OutcomesBehind) and bool(journal.writes_outcomes_behind),
        durable_outcomes=bool(journal.durable_outcomes) if isinstance(journal, CommitRule) else None,
        tail_read=isinstance(journal, TailRead),
        identified=owner("journal_id") is not None,
        data_keys=all(owner(name) is not None for name in _DATA_KEY_METHODS),
    )


_DATA_KEY_METHODS = ("data_keys", "add_data_key", "erase_data_keys", "may_erase_data_keys",
                     "rewrap_data_keys")
"""The members of ``core.data_keys.DataKeyStore``, looked for by name (a wrapper that forwards
other members by ``__getattr__`` does not count: its ``append`` may not be the backend's)."""


async def read_tail(journal: Any, saga_id: str) -> JournalEntry | None:
    """The saga's newest entry (``None``: none): one index probe where the backend has
    :class:`TailRead` (a view: its backend's), else the last of :meth:`JournalReads.entries`.

    Args:
        journal: a backend, a wrapper of one, or a :class:`View`.
        saga_id: the saga.

    Raises:
        JournalError: storage could not be read.
    """
    if capabilities_of(journal).tail_read:
        backend = journal.backend if isinstance(journal, View) else journal
        return await backend.tail(saga_id)  # type: ignore[no-any-return]
    entries = await journal.entries(saga_id)
    return entries[-1] if entries else None


def check_page(offset: int, limit: int | None) -> None:
    """Refuse a page that :meth:`Journal.saga_summaries` cannot serve (every backend calls it).

    Raises:
        ValueError: a negative ``offset`` or ``limit``, or one that is not an int.
    """
    for name, value in (("offset", offset), ("limit", limit)):
        if value is None and name == "limit":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, not {value!r}")


async def append_requests(
    journal: JournalBackend, requests: Sequence[AppendRequest], capabilities: Capabilities | None = None,
) -> list[JournalEntry]:
    """Append ``requests`` (to one saga) in order: in one round trip where the backend has
    ``append_many`` (:class:`BatchAppend`), else one :meth:`JournalBackend.append` after the other.

    Raises:
        The errors of :meth:`Journal.append`, for the first append that fails: the appends before
        it are written, the ones after it are not.
    """
    if not requests:
        return []
    if (capabilities or capabilities_of(journal)).batch_append:
        return list(await journal.append_many(requests))  # type: ignore[attr-defined]
    return [await journal.append(request) for request in requests]


async def append_each(
    journal: Journal, saga_id: str, appends: Sequence[Mapping[str, Any]]
) -> list[JournalEntry]:
    """Append ``appends`` to ``saga_id`` in order, each the keyword arguments of a keyword
    append (``phase``, ``write_key``, ...): through the view's :meth:`JournalView.append_many`
    (``core.fence``: fenced and tagged as the view's appends are), or, on a backend, as plain requests
    (:func:`append_requests`).

    Returns:
        The stored entries, in order.

    Raises:
        The errors of :meth:`Journal.append`, for the first append that fails: the appends before
        it are written, the ones after it are not.
    """
    if isinstance(journal, View):
        return await journal.append_many(saga_id, appends)
    requests = [AppendRequest.build(saga_id, **spec) for spec in appends]
    return await append_requests(journal, requests)  # type: ignore[arg-type]
