"""The access log: who saw a sensitive value in clear, and who erased a saga's data key.

Both are entries of the journal itself, in the reserved saga :data:`ACCESS_SAGA`
(``sagacity.access``, like the keyring's ``sagacity.keyring``): DATA_REVEALED
``{saga_id, by, reason, paths, tool?}`` and DATA_ERASED ``{saga_id, by, reason, forced,
generations}``, hash-chained, append-only like every saga, tagged by the host's keyring key when
a keyring is configured (under key roles only a ``checkpoint_signer`` may tag them:
``core.key_roles``). The journal refuses these phases in any other saga
(``core.append_rule``) and ``verify`` reports them there (``core.structure``); no run opens a
saga whose id starts with ``sagacity.`` (``core.identity.check_saga_id``).

A reveal is recorded *before* anything is shown: a caller treats any exception of
:func:`record_access` as "refuse the reveal" (a read-only journal, a keyring that cannot sign,
a storage failure: nothing is shown).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from .entries import ACCESS_PHASES, ACCESS_SAGA, JournalEntry, Phase
from .journal import Journal

__all__ = ["ACCESS_SAGA", "erasures", "record_access", "reveals"]


async def record_access(view_or_journal: Journal, phase: Phase, payload: Mapping[str, Any]) -> JournalEntry:
    """Append one access-log entry to :data:`ACCESS_SAGA` and return it once stored.

    Args:
        view_or_journal: where to write: a writer's view carrying the host's tagger
            (``core.authenticity.signing_view(journal, keyring)``: the entry is tagged by the
            keyring's signing key), or a journal (untagged: no keyring).
        phase: ``Phase.DATA_REVEALED`` or ``Phase.DATA_ERASED``.
        payload: DATA_REVEALED: ``{"saga_id": str, "by": str, "reason": str, "paths": [RFC 6901
            pointers], "tool"?: str}``; DATA_ERASED: ``{"saga_id": str, "by": str, "reason":
            str, "forced": bool, "generations": [int, ...]}`` (SENSITIVE.md's shapes; extra keys
            are kept).

    Returns:
        The stored entry (a fresh write key each call: two reveals are two entries).

    Raises:
        ValueError: ``phase`` is not an access-log phase, or the payload names no saga, no
            ``by`` or no ``reason``.
        Whatever the append raises (``JournalWriteError`` on a read-only journal or a failed
        write; a tagger that cannot sign): the caller must then refuse the reveal.
    """
    if phase not in ACCESS_PHASES:
        raise ValueError(f"the access log holds DATA_REVEALED and DATA_ERASED, not {phase!r}")
    phase = Phase(phase)
    for name in ("saga_id", "by", "reason"):
        value = payload.get(name)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"an access-log entry names {name!r} (a non-empty string)")
    key = f"{'reveal' if phase is Phase.DATA_REVEALED else 'erase'}:{uuid.uuid4().hex}"
    return await view_or_journal.append(ACCESS_SAGA, phase, write_key=key, payload=dict(payload))


async def _entries_of(journal: Journal, phase: Phase) -> list[JournalEntry]:
    """The access log's entries of ``phase`` that name a saga, in ``seq`` order."""
    return [e for e in await journal.entries(ACCESS_SAGA)
            if e.phase is phase and isinstance(e.payload, dict)
            and isinstance(e.payload.get("saga_id"), str)]


async def erasures(journal: Journal) -> dict[str, JournalEntry]:
    """Each erased saga's DATA_ERASED entry (its newest, when erased more than once), for
    display (``journal show`` prints ``[erased]``). Read as stored, not verified: run
    ``sagacity journal verify`` on :data:`ACCESS_SAGA` for evidence.

    Returns:
        ``{saga_id: entry}``.

    Raises:
        JournalError: the journal could not be read.
    """
    return {e.payload["saga_id"]: e for e in await _entries_of(journal, Phase.DATA_ERASED)}


async def reveals(journal: Journal, saga_id: str | None = None) -> list[JournalEntry]:
    """The DATA_REVEALED entries (of ``saga_id``'s values only, when given), in ``seq`` order,
    read as stored (see :func:`erasures`).

    Raises:
        JournalError: the journal could not be read.
    """
    found = await _entries_of(journal, Phase.DATA_REVEALED)
    return found if saga_id is None else [e for e in found if e.payload["saga_id"] == saga_id]
