"""The in-memory journal: for tests and short-lived processes; same bytes and hashes as SQLite."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...core.data_keys import StoredDataKey
from ...core.entries import JournalEntry, Phase
from ...core.identity import new_journal_id
from ...core.journal import (
    AppendRequest, Clock, SagaSummary, Tail, append_locked, as_request, check_page, utc_now,
    utc_stamp,
)
from ..data_key_rows import check_erasure, check_new_key, tombstone

__all__ = ["InMemoryJournal"]


def _newest_run(chain: list[JournalEntry]) -> int | None:
    """The seq of the chain's newest RUN_STARTED (the saga's lease), or ``None``."""
    for entry in reversed(chain):
        if entry.phase is Phase.RUN_STARTED:
            return entry.seq
    return None


class InMemoryJournal:
    """A :class:`~sagacity_agents.core.journal.Journal` held in this process's memory.

    Appends are ordered by one ``threading.Lock`` held only while the tail is read and the new
    entry stored (no ``await`` inside it), so tasks and worker threads alike get a gap-free,
    totally ordered chain. The same write-key uniqueness rule as the SQL backends is enforced.

    Args:
        clock: source of ``recorded_at``; defaults to the system UTC time.
        journal_id: its journal id (``core.identity``); default: a new random one.
    """

    def __init__(self, *, clock: Clock = utc_now, journal_id: str | None = None) -> None:
        self._clock = clock
        self._journal_id = journal_id or new_journal_id()
        self._lock = threading.Lock()
        self._chains: dict[str, list[JournalEntry]] = {}
        self._keys: dict[tuple[str, str], JournalEntry] = {}
        self._leases: dict[str, tuple[JournalEntry, int | None]] = {}
        """Per saga: (its tail entry, the seq of its newest RUN_STARTED) as of the last append,
        so a fenced append does not scan the run's entries (valid while that entry is still
        the tail; the tamper helpers drop it)."""
        self._data_keys: dict[str, dict[int, StoredDataKey]] = {}
        """Per saga, its data keys by generation (``core.data_keys.DataKeyStore``)."""

    async def journal_id(self) -> str:
        """This journal's id, made at construction (``core.journal.Identified``)."""
        return self._journal_id

    async def assign_journal_id(self, journal_id: str | None = None) -> str:
        """Give the journal a new id (``sagacity journal new-id``): its sagas of derivation 2
        fail verification from then on (they name the id they were opened under).

        Returns:
            The new id.
        """
        self._journal_id = journal_id or new_journal_id()
        return self._journal_id

    async def append(self, saga_id: AppendRequest | str, phase: Phase | None = None,
                     **fields: Any) -> JournalEntry:
        """See :meth:`Journal.append` (done by :meth:`append_sync`: nothing here waits)."""
        return self.append_sync(as_request(saga_id, phase, fields))

    def append_sync(self, saga_id: AppendRequest | str, phase: Phase | None = None,
                    **fields: Any) -> JournalEntry:
        """:meth:`Journal.append`, blocking, from any thread: how a sync tool's worker thread
        writes its INTENT and outcome without a hop to the event loop (``core.saga.calls``).

        Raises:
            The errors of :meth:`Journal.append`.
        """
        request = as_request(saga_id, phase, fields)
        with self._lock:
            return append_locked(self, None, request)[0]

    # The append rule's dialect pieces (core.journal.append_locked), under self._lock.

    def _stored_entry(self, at: None, request: AppendRequest) -> JournalEntry | None:
        return self._keys.get((request.saga_id, request.write_key))

    def _tail_of(self, at: None, request: AppendRequest) -> Tail | None:
        chain = self._chains.get(request.saga_id)
        return (chain[-1].seq, chain[-1].hash, Phase(chain[-1].phase).value) if chain else None

    def _lease_of(self, at: None, request: AppendRequest, tail: Tail | None) -> int | None:
        """The seq of the chain's newest RUN_STARTED: remembered while the tail is the entry it
        was remembered with, else scanned."""
        chain = self._chains.get(request.saga_id, [])
        known = self._leases.get(request.saga_id)
        if known is not None and chain and chain[-1] is known[0]:
            return known[1]
        return _newest_run(chain)

    def _entry_at(self, at: None, request: AppendRequest, seq: int) -> JournalEntry | None:
        chain = self._chains.get(request.saga_id, [])
        return next((e for e in chain if e.seq == seq), None)

    def _insert_entry(self, at: None, request: AppendRequest, entry: JournalEntry, tail: Tail | None,
                lease: int | None) -> None:
        saga_id = request.saga_id
        if entry.phase is Phase.RUN_STARTED:
            self._leases[saga_id] = (entry, entry.seq)
        elif request.checks_fence:
            self._leases[saga_id] = (entry, lease)
        self._chains.setdefault(saga_id, []).append(entry)
        self._keys[(saga_id, request.write_key)] = entry

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """See :meth:`Journal.entries`."""
        with self._lock:
            return list(self._chains.get(saga_id, ()))

    async def tail(self, saga_id: str) -> JournalEntry | None:
        """The saga's newest entry (``core.journal.TailRead``; ``None``: no entry)."""
        with self._lock:
            chain = self._chains.get(saga_id)
            return chain[-1] if chain else None

    async def entries_many(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        """The entries of each of ``saga_ids`` (``core.journal.read_sagas``), sagas without
        entries left out."""
        with self._lock:
            return {sid: list(self._chains[sid]) for sid in saga_ids if self._chains.get(sid)}

    async def saga_ids(self) -> list[str]:
        """See :meth:`Journal.saga_ids`. Like SQLite, a saga is listed while any of its entries
        is stored (a chain emptied by tampering is not), in order of its first entry."""
        with self._lock:
            return [sid for sid, chain in self._chains.items() if chain]

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """See :meth:`Journal.saga_summaries` (in memory: one pass over the saga list)."""
        check_page(offset, limit)
        with self._lock:
            chains = [(sid, list(chain)) for sid, chain in self._chains.items() if chain]
        page = chains[offset:] if limit is None else chains[offset:offset + limit]
        return [SagaSummary(sid, len(chain), min(chain, key=lambda e: e.seq),
                            max(chain, key=lambda e: e.seq)) for sid, chain in page]

    async def data_keys(self, saga_id: str) -> list[StoredDataKey]:
        """The saga's data keys, every generation (tombstones included), ascending
        (``core.data_keys.DataKeyStore``)."""
        with self._lock:
            return [k for _, k in sorted(self._data_keys.get(saga_id, {}).items())]

    async def add_data_key(self, saga_id: str, generation: int, master_key_id: str,
                           wrapped: bytes) -> StoredDataKey:
        """Store a generation of the saga's wrapped data key unless one is stored; return the
        stored row (``core.data_keys.DataKeyStore``: a racer's, or a tombstone, when first).

        Raises:
            TypeError, ValueError: see ``backends.data_key_rows.check_new_key``.
        """
        check_new_key(saga_id, generation, master_key_id, wrapped)
        with self._lock:
            keys = self._data_keys.setdefault(saga_id, {})
            return keys.setdefault(generation, StoredDataKey(
                saga_id, generation, master_key_id, wrapped, utc_stamp(), None, None, None))

    async def may_erase_data_keys(self) -> bool:
        """In memory, whoever holds the journal may erase (``core.data_keys.DataKeyStore``)."""
        return True

    async def erase_data_keys(self, saga_id: str, *, by: str, reason: str) -> int:
        """Drop the wrapped bytes of every generation of the saga, leaving tombstones
        (``core.data_keys.DataKeyStore``). In memory: the process holds no other reference the
        library made (Python may keep freed bytes until the memory is reused).

        Returns:
            The generations that held bytes.

        Raises:
            TypeError, ValueError: see ``backends.data_key_rows.check_erasure``.
        """
        check_erasure(saga_id, by, reason)
        now = utc_stamp()
        with self._lock:
            keys = self._data_keys.get(saga_id, {})
            live = [g for g, k in keys.items() if k.wrapped is not None]
            for generation in live:
                keys[generation] = tombstone(keys[generation], erased_at=now, by=by, reason=reason)
            return len(live)

    async def rewrap_data_keys(self, rewrap: Callable[[StoredDataKey], tuple[str, bytes]]) -> int:
        """Replace every stored wrapped key by ``rewrap(key)`` = ``(master_key_id, wrapped)``
        (master-key rotation; ``core.data_keys.DataKeyStore``): all of them or, when ``rewrap``
        raises, none.

        Returns:
            The keys rewritten (tombstones are left alone).
        """
        with self._lock:
            new = {}
            for saga_id, keys in self._data_keys.items():
                for generation, key in keys.items():
                    if key.wrapped is not None:
                        master, wrapped = rewrap(key)
                        check_new_key(saga_id, generation, master, wrapped)
                        new[(saga_id, generation)] = StoredDataKey(
                            saga_id, generation, master, wrapped, key.created_at, None, None, None)
            for (saga_id, generation), key in new.items():
                self._data_keys[saga_id][generation] = key
            return len(new)

    async def close(self) -> None:
        """Nothing to release."""

    def _replace(self, saga_id: str, seq: int, entry: JournalEntry) -> None:
        """Overwrite a stored entry (tamper tests only: the chain must then fail to verify)."""
        with self._lock:
            chain = self._chains[saga_id]
            chain[[e.seq for e in chain].index(seq)] = entry
            self._leases.pop(saga_id, None)

    def _delete(self, saga_id: str, seq: int) -> None:
        """Remove a stored entry (tamper tests only)."""
        with self._lock:
            chain = self._chains[saga_id]
            del chain[[e.seq for e in chain].index(seq)]
            self._leases.pop(saga_id, None)
