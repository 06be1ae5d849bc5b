"""Which journal a saga belongs to, and the derivation rule its keys and tags follow.

Every journal (a SQLite file, a PostgreSQL schema, an in-memory journal) carries a random 128-bit
*journal id*, made with it and kept with its tables (``Journal.journal_id``). A saga opened under
derivation 2 records that id and ``"derivation": 2`` in its SAGA_OPENED payload, and from then on
every idempotency key it sends (``core.undo``) and every entry tag it carries
(``core.authenticity``) mixes in the journal id and the hash of its SAGA_OPENED:

* the same saga id in two journals (two tenants' schemas, staging and production) gives
  different keys, so a far side that deduplicates on the key never merges their calls;
* a saga re-created after a restore or a reset has another SAGA_OPENED (another ``recorded_at``,
  so another hash): it cannot re-issue a key its lost tail already sent;
* a saga copied byte for byte into another journal fails verification, naming both ids
  (:func:`copied_saga_problem`; with a keyring its tags fail too).

Sagas opened before (no ``"derivation"`` in SAGA_OPENED: derivation 1) keep the old rule for
every entry and undo (:class:`Derivation` with ``version`` 1). Threat model:
docs/threat-model.md, "What a journal id protects against".
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .entries import GENESIS_HASH, JournalEntry, Phase
from .journal import capabilities_of
from .undo import call_idempotency_key, idempotency_key

__all__ = [
    "DERIVATION", "DERIVATION_KEY", "JOURNAL_ID_KEY", "RESERVED_PREFIX", "Derivation",
    "ENTRY_STATEMENT_V2", "BoundTagger", "SagaSeal", "bound_tag_statement", "check_saga_id",
    "copied_saga_problem", "opened_hash_of", "saga_derivation", "statement_for", "unlinked_bytes",
    "derivation_of", "journal_id_of", "new_journal_id", "opening_payload",
]

DERIVATION = 2
"""The derivation a saga opened by this version follows (recorded in its SAGA_OPENED)."""
DERIVATION_KEY = "derivation"
"""The SAGA_OPENED payload member holding the derivation (absent: 1, the rule before)."""
JOURNAL_ID_KEY = "journal_id"
"""The SAGA_OPENED payload member holding the id of the journal the saga was opened in."""

RESERVED_PREFIX = "sagacity."
"""Saga ids the library keeps for itself (``sagacity.keyring``, the keyring adoptions)."""


def check_saga_id(saga_id: str | None) -> None:
    """Refuse a saga id no run may use: an empty one (it used to get a random id silently,
    so two runs meant as one would split) and the reserved ``sagacity.`` prefix (a run in
    ``sagacity.keyring`` would block ``adopt-keyring`` for good). ``None`` (a new random id)
    passes.

    Raises:
        ValueError: ``saga_id`` is empty or starts with :data:`RESERVED_PREFIX`.
    """
    if saga_id is None:
        return
    if isinstance(saga_id, str) and not saga_id:
        raise ValueError("saga_id is empty: pass a non-empty id, or None for a new random one")
    if isinstance(saga_id, str) and saga_id.startswith(RESERVED_PREFIX):
        raise ValueError(f"saga id {saga_id!r} is reserved: ids starting with {RESERVED_PREFIX!r} "
                         "are the library's own (sagacity.keyring holds keyring adoptions)")


def new_journal_id() -> str:
    """A new random journal id: 128 bits from ``uuid.uuid4`` as 32 lowercase hex digits."""
    return uuid.uuid4().hex


async def journal_id_of(journal: Any) -> str | None:
    """The id of ``journal`` (``await journal.journal_id()``), or ``None`` when the object does
    not have one (a journal class of an application that predates the member: its sagas are
    opened under derivation 1).

    Raises:
        JournalError: the id could not be read.
    """
    if not capabilities_of(journal).identified:
        return None
    found = await journal.journal_id()
    return found if isinstance(found, str) and found else None


def opening_payload(metadata: Any, journal_id: str | None) -> dict[str, Any]:
    """The SAGA_OPENED payload of a new saga: ``{"metadata"}``, with ``"derivation": 2`` and
    ``"journal_id"`` when the journal has an id (without one: derivation 1)."""
    if journal_id is None:
        return {"metadata": metadata}
    return {"metadata": metadata, DERIVATION_KEY: DERIVATION, JOURNAL_ID_KEY: journal_id}


@dataclass(frozen=True, slots=True)
class Derivation:
    """How one saga's idempotency keys and entry tags are derived.

    ``version`` 1 (a saga opened before journal ids): keys from (saga id, seq) alone, tags over
    the entry's content alone. ``version`` 2: both also bind ``journal_id`` (the journal's id
    now) and ``opened_hash`` (the saga's SAGA_OPENED hash).
    """

    version: int = 1
    """1 or 2."""
    journal_id: str | None = None
    """The id of the journal the saga is read from (version 2)."""
    opened_hash: str | None = None
    """The hash of the saga's SAGA_OPENED (version 2; ``None`` while it is being written)."""

    @property
    def binds(self) -> bool:
        """Whether keys and tags bind the journal (version 2 with its id known)."""
        return self.version >= 2 and self.journal_id is not None

    def undo_key(self, saga_id: str, seq: int) -> str:
        """``core.undo.idempotency_key`` of the undo of entry ``seq`` under this derivation."""
        if self.opened_hash is None or not self.binds:
            return idempotency_key(saga_id, seq)
        return idempotency_key(saga_id, seq, journal_id=self.journal_id, opened_hash=self.opened_hash)

    def call_key(self, saga_id: str, intent_seq: int) -> str:
        """``core.undo.call_idempotency_key`` of the call of INTENT ``intent_seq``."""
        if self.opened_hash is None or not self.binds:
            return call_idempotency_key(saga_id, intent_seq)
        return call_idempotency_key(saga_id, intent_seq, journal_id=self.journal_id,
                                    opened_hash=self.opened_hash)

    def key_binding(self) -> dict[str, str]:
        """The keyword arguments of the key functions (empty under version 1)."""
        if not self.binds or self.opened_hash is None:
            return {}
        return {"journal_id": self.journal_id, "opened_hash": self.opened_hash}  # type: ignore[dict-item]


def _opened(entries: Sequence[JournalEntry]) -> JournalEntry | None:
    first = entries[0] if entries else None
    if first is None or first.seq != 1 or first.phase is not Phase.SAGA_OPENED:
        return None
    return first


def derivation_of(entries: Sequence[JournalEntry], journal_id: str | None) -> Derivation:
    """The derivation of a saga whose entries (``seq`` order) are ``entries``, read from the
    journal whose id is ``journal_id``: version 2 when its first entry is a SAGA_OPENED (seq 1)
    recording ``"derivation": 2``; version 1 otherwise (opened before, or nothing stored yet)."""
    opened = _opened(entries)
    payload = opened.payload if opened is not None and isinstance(opened.payload, dict) else {}
    if payload.get(DERIVATION_KEY) != DERIVATION:
        return Derivation()
    return Derivation(DERIVATION, journal_id, opened.hash)  # type: ignore[union-attr]


async def saga_derivation(journal: Any, saga_id: str) -> Derivation:
    """The derivation of ``saga_id``'s keys as read from ``journal`` (its id and the saga's
    first entries): what to compare a far side's idempotency keys with.

    Raises:
        JournalError: the journal could not be read.
    """
    return derivation_of((await journal.entries(saga_id))[:1], await journal_id_of(journal))


def copied_saga_problem(entries: Sequence[JournalEntry], journal_id: str | None) -> tuple[int, str] | None:
    """``(1, why)`` when the saga's SAGA_OPENED records another journal id than ``journal_id``
    (the saga was copied from that journal, or the journal was given a new id since); ``None``
    otherwise (the ids agree, the saga is of derivation 1, or ``journal_id`` is unknown)."""
    opened = _opened(entries)
    if opened is None or journal_id is None or not isinstance(opened.payload, dict):
        return None
    recorded = opened.payload.get(JOURNAL_ID_KEY)
    if opened.payload.get(DERIVATION_KEY) != DERIVATION or recorded == journal_id:
        return None
    return (1, f"saga opened in journal {recorded}, read from journal {journal_id}: a copy of "
               "another journal's saga (or this journal got a new id since); its keys and tags "
               "belong to the journal it was opened in")


def unlinked_bytes(canonical: bytes, seq: int, prev_hash: str) -> bytes:
    """The entry's canonical bytes with ``prev_hash`` set to 64 zeros and ``seq`` to 0: what
    its tag covers (the content without the chain links, the same on every backend).

    The top-level ``prev_hash`` and ``seq`` are the *last* occurrences of their members: RFC 8785
    sorts keys, so both follow the payload, and the members after them (``recorded_at``,
    ``saga_id``, ``tool``, ``write_key``) are strings, in which a quote is always escaped.

    Args:
        canonical: the stored canonical bytes.
        seq: the entry's seq (inside those bytes).
        prev_hash: its ``prev_hash`` (inside those bytes).

    Raises:
        ValueError: the bytes do not hold those members (not a journal entry's bytes).
    """
    link = b'"prev_hash":"' + prev_hash.encode("ascii") + b'","recorded_at":'
    at = canonical.rfind(link)
    number = b',"seq":' + str(seq).encode("ascii") + b',"tool":'
    seq_at = canonical.rfind(number)
    if at < 0 or seq_at < at:
        raise ValueError("not a journal entry's canonical bytes (prev_hash or seq not found)")
    start, seq_start = at + 13, seq_at + 7
    return (canonical[:start] + GENESIS_HASH.encode("ascii") + canonical[start + 64:seq_start]
            + b"0" + canonical[seq_start + len(str(seq)):])


ENTRY_STATEMENT_V2 = "sagacity.entry.v2"
"""The ``type`` of the statement an entry's tag signs under derivation 2."""


def bound_tag_statement(unlinked: bytes, key_id: str, journal_id: str, opened: str) -> bytes:
    """The bytes an entry's tag signs under derivation 2: RFC 8785 of ``{"type":
    "sagacity.entry.v2", "content": SHA-256 hex of unlinked, "journal_id", "key_id",
    "opened"}``, ``opened`` the saga's SAGA_OPENED hash (``""`` in the SAGA_OPENED's own tag,
    which covers the journal id only). Key ids are ``[A-Za-z0-9._-]`` and journal ids and hashes
    hex, so nothing needs escaping (equal to ``core.signing.statement_bytes``, tested).

    Raises:
        ValueError: a journal id or ``opened`` that is not lowercase hex.
    """
    if not _HEX.fullmatch(journal_id) or (opened and not _HEX.fullmatch(opened)):
        raise ValueError("journal id and SAGA_OPENED hash must be lowercase hex")
    digest = hashlib.sha256(unlinked).hexdigest()
    return (f'{{"content":"{digest}","journal_id":"{journal_id}","key_id":"{key_id}",'
            f'"opened":"{opened}","type":"{ENTRY_STATEMENT_V2}"}}').encode("ascii")


_HEX = re.compile(r"[0-9a-f]{1,128}")
_FIRST = b',"seq":0,"tool":'


def opened_hash_of(unlinked: bytes) -> str:
    """The hash a SAGA_OPENED whose content without chain links is ``unlinked`` has at seq 1
    after the genesis hash (where every saga's first entry is): its bytes with ``seq`` 1.

    Raises:
        ValueError: the bytes are not an unlinked entry's.
    """
    at = unlinked.rfind(_FIRST)
    if at < 0:
        raise ValueError("not an unlinked entry's bytes (seq 0 not found)")
    return hashlib.sha256(unlinked[:at] + b',"seq":1,"tool":' + unlinked[at + len(_FIRST):]).hexdigest()


def statement_for(unlinked: bytes, key_id: str, entry_phase: Any, seq: int,
                  derivation: Derivation) -> bytes | None:
    """The derivation-2 statement of an entry read back (``None``: derivation 1, the caller
    uses the v1 statement). ``seq`` 1's SAGA_OPENED signs ``opened`` empty."""
    if not derivation.binds:
        return None
    opened = "" if entry_phase is Phase.SAGA_OPENED and seq == 1 else (derivation.opened_hash or "")
    return bound_tag_statement(unlinked, key_id, derivation.journal_id, opened)  # type: ignore[arg-type]


class SagaSeal:
    """What a writer's view knows of one saga to tag its entries: the journal id, the saga's
    derivation (``None``: no SAGA_OPENED seen yet) and its SAGA_OPENED hash. Filled when the
    view first writes to the saga (from its entries), and by the SAGA_OPENED it writes.

    Args:
        journal_id: the journal's id (``None``: the journal has none; derivation 1).
        entries: the saga's entries as stored (``seq`` order; empty for a new saga).
    """

    __slots__ = ("journal_id", "opened", "version")

    def __init__(self, journal_id: str | None, entries: Sequence[JournalEntry]) -> None:
        self.journal_id = journal_id
        self.version: int | None = None
        self.opened: str | None = None
        if entries:
            self.note(entries[0])
            self.version = self.version or 1

    def note(self, entry: JournalEntry) -> None:
        """Learn the derivation and the SAGA_OPENED hash from a stored entry (its first)."""
        if entry.phase is Phase.SAGA_OPENED and entry.seq == 1:
            payload = entry.payload if isinstance(entry.payload, dict) else {}
            self.version = DERIVATION if payload.get(DERIVATION_KEY) == DERIVATION else 1
            self.opened = entry.hash

    def tagger(self, base: Any, phase: Phase, payload: Any) -> Any:
        """The tagger of one append of ``phase`` with ``payload``: ``base`` itself under
        derivation 1, else a :class:`BoundTagger`."""
        if self.journal_id is None or getattr(base, "key_id", None) is None:
            return base  # no journal id (derivation 1), or a tagger that refuses every append
        if phase is Phase.SAGA_OPENED:
            wanted = isinstance(payload, dict) and payload.get(DERIVATION_KEY) == DERIVATION
            return BoundTagger(base, self, opening=True) if wanted else base
        if self.version == 1:
            return base
        # Decided when the entry is sealed: a SAGA_OPENED in the same batch comes first.
        return BoundTagger(base, self)


class BoundTagger:
    """A writer's tagger for one append to a saga of derivation 2: signs
    :func:`bound_tag_statement` with the writer's key (``core.authenticity.EntryTagger``).

    Args:
        base: the writer's tagger (``sign(statement)`` signs bytes).
        seal: the saga's :class:`SagaSeal`.
        opening: this append is the saga's SAGA_OPENED (its tag covers the journal id only; its
            hash is noted for the appends after it, in the same batch too).
    """

    __slots__ = ("_base", "_opening", "_seal", "key_id")

    def __init__(self, base: Any, seal: SagaSeal, *, opening: bool = False) -> None:
        self._base, self._seal, self._opening = base, seal, opening
        self.key_id = base.key_id

    def tag(self, unlinked: bytes) -> tuple[str, str]:
        """``(key_id, tag)`` for an entry whose unlinked bytes are ``unlinked``.

        Raises:
            JournalWriteError: the saga's SAGA_OPENED is not known (nothing is written).
        """
        seal = self._seal
        if self._opening:
            statement = bound_tag_statement(unlinked, self.key_id, seal.journal_id, "")  # type: ignore[arg-type]
            seal.version, seal.opened = DERIVATION, opened_hash_of(unlinked)
            return self._base.sign(statement)  # type: ignore[no-any-return]
        if seal.version != DERIVATION:
            return self._base.tag(unlinked)  # type: ignore[no-any-return]
        if seal.opened is None:
            from ..errors import JournalWriteError  # noqa: PLC0415

            raise JournalWriteError("the saga's SAGA_OPENED is not known to this writer: its "
                                    "entries cannot be tagged; nothing written")
        statement = bound_tag_statement(unlinked, self.key_id, seal.journal_id, seal.opened)  # type: ignore[arg-type]
        return self._base.sign(statement)  # type: ignore[no-any-return]

    def tag_entry(self, entry: JournalEntry) -> JournalEntry:
        """``entry`` (sealed) with its tag."""
        key_id, tag = self.tag(unlinked_bytes(entry.canonical, entry.seq, entry.prev_hash))
        return replace(entry, tag_key=key_id, tag=tag)
