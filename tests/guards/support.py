"""Building journals for the T-02 guard tests: real entries, sealed and chained by the memory
backend, so every check before the guard under test passes."""

from __future__ import annotations

import dataclasses
from typing import Any

from sagacity_agents.backends import InMemoryJournal, JournalEntry, Phase
from sagacity_agents.core.canonical import sha256_hex
from sagacity_agents.core.journal import CLAIMANT_KEY, new_claimant

SAGA = "saga-t02"


async def journal_of(*specs: tuple[Phase, dict[str, Any]]) -> tuple[InMemoryJournal, list[JournalEntry]]:
    """A memory journal holding one saga with the given (phase, append keywords) entries."""
    journal = InMemoryJournal()
    for n, (phase, fields) in enumerate(specs, start=1):
        if phase is Phase.CONSUMED and isinstance(fields.get("payload"), dict):
            fields = {**fields, "payload": {CLAIMANT_KEY: new_claimant(), **fields["payload"]}}
        await journal.append(SAGA, phase, **{"write_key": f"k{n}", **fields})
    return journal, await journal.entries(SAGA)


def resealed(entry: JournalEntry, canonical: bytes, **columns: Any) -> JournalEntry:
    """``entry`` with other hashed bytes and their true hash (a writer with database access)."""
    return dataclasses.replace(entry, canonical=canonical, hash=sha256_hex(canonical), **columns)
