"""A human's answer to an in-doubt entry: did the call (or the undo) run?

An INTENT with no outcome, or a COMPENSATING with no outcome, is in doubt: nobody can know from
the journal whether the effect happened, so nothing acts on it automatically (design.md,
"Vocabulary"). A person who checked the far side answers with :func:`resolve_in_doubt`
(``sagacity saga resolve SAGA_ID SEQ --ran|--not-run --as NAME --reason TEXT``), which journals a
RESOLVED entry naming the entry, the answer, who and why. The entry then stands as the missing
outcome (``core.compensation.SagaLedger``):

* a call that **ran** is treated as executed: the next recovery undoes it when its tool is
  compensatable (the undo gets the journaled arguments; no result or undo data exists), lists it
  kept or without undo otherwise;
* a call that did **not run** is dropped: nothing to undo;
* an undo that **ran** counts as COMPENSATED; one that did **not run** is retried by the next
  recovery with the same idempotency key.

With a keyring (``core.evidence``), the answer is signed like an approval decision
(``core.authenticity.sign_resolution``, by a key ``decision_keys`` allows) and
an unsigned RESOLVED is refused wherever the saga is verified; a host whose keyring cannot sign a
decision is refused before anything is journaled.

Acted on only when the saga's chain verifies (``core.evidence``); refused on a closed saga, while
another run holds the saga's lease, and for an entry that is not in doubt (already answered
included: an answer is never changed, a later one would contradict evidence).
"""

from __future__ import annotations

from ..errors import ConfigurationError, JournalConflictError, SagaStateError
from .authenticity import sign_resolution
from .compensation import SagaLedger, UndoState
from .entries import JournalEntry, Phase
from .evidence import Evidence, verified_entries
from .journal import Journal
from .lease import lease_of

__all__ = ["resolve_in_doubt"]

_ATTEMPTS = 20
"""Conditional appends tried before giving up (each loses only to a real write)."""


def _target(ledger: SagaLedger, seq: int) -> tuple[str, JournalEntry] | None:
    """The in-doubt entry ``seq`` names: an INTENT without outcome (``"call"``), or the undo in
    doubt of a call (its latest COMPENSATING has no outcome, or only an in-doubt mark: it timed
    out or was cancelled), named by that COMPENSATING's seq or by the seq of the entry being
    undone (``"undo"``: the report lists an undo in doubt under that entry's seq)."""
    for intent in ledger.in_doubt():
        if intent.seq == seq:
            return "call", intent
    for call in ledger.calls.values():
        # An undo with no outcome, or one stopped waiting for (timed out, cancelled) that has
        # not ended since: both may have acted (core.compensation.SagaLedger.undo_state).
        if ledger.undo_state(call)[0] in (UndoState.IN_DOUBT, UndoState.TIMED_OUT):
            claim = call.attempts[-1]
            if seq in (claim.seq, call.outcome.seq if call.outcome is not None else -1):
                return "undo", claim
    return None


async def resolve_in_doubt(
    journal: Journal,
    saga_id: str,
    seq: int,
    *,
    ran: bool,
    resolver: str,
    reason: str,
    evidence: Evidence | None = None,
    verified: list[JournalEntry] | None = None,
) -> JournalEntry:
    """Journal a human's answer to the in-doubt entry ``seq`` of ``saga_id`` (RESOLVED).

    Args:
        journal: the saga's journal.
        saga_id: the saga.
        seq: the in-doubt entry: an INTENT without outcome, or a COMPENSATING without outcome
            (or the seq of the entry whose undo is in doubt, as the recovery report lists it).
        ran: ``True``: the call's effect (or the undo) happened; ``False``: it did not.
        resolver: who answers (journaled; required).
        reason: why, e.g. what was checked at the far side (journaled; required).
        evidence: how the saga is verified first (default: the hash chain alone).
        verified: the saga's entries, verified by the caller just now: the first attempt
            decides on them instead of reading (the answer's append is conditional on their
            tail; a later attempt reads and verifies again).

    Returns:
        The RESOLVED entry. Run ``recover`` next: it undoes a call that ran (when compensatable)
        and closes the saga once nothing is in doubt.

    Raises:
        ValueError: an empty ``resolver`` or ``reason``.
        ConfigurationError: a keyring is configured and cannot sign the answer (no private key,
            or one ``decision_keys`` does not allow); nothing was written.
        EvidenceError: the saga's journal does not verify; nothing was written.
        SagaStateError: no such saga; the saga is closed; another run holds its lease; ``seq``
            is not in doubt (no such entry, it has an outcome, or it was answered already).
        JournalError: the journal could not be read or written.
    """
    if not resolver or not reason:
        raise ValueError("a resolution needs the resolver's identity and a reason")
    problem = evidence.decision_key_problem if evidence is not None else None
    if problem is not None:
        raise ConfigurationError(f"cannot sign the answer here: {problem}; nothing was journaled")
    for attempt in range(_ATTEMPTS):
        if attempt == 0 and verified is not None:
            entries = verified
        else:
            entries = await verified_entries(journal, saga_id, evidence)
        if not entries:
            raise SagaStateError(f"no saga {saga_id} in the journal")
        if any(e.phase is Phase.SAGA_CLOSED for e in entries):
            raise SagaStateError(f"saga {saga_id} is closed; nothing in it is in doubt")
        lease = lease_of(entries)
        if lease is not None and lease.held():
            raise SagaStateError(
                f"saga {saga_id} is running (its run lease is held by {lease.holder}); "
                "answer once the run has ended"
            )
        found = _target(SagaLedger(entries), seq)
        if found is None:
            raise SagaStateError(
                f"seq {seq} of saga {saga_id} is not in doubt (not an INTENT or undo without "
                "outcome, or already answered); see `sagacity journal show`"
            )
        kind, entry = found
        payload = {"target_seq": entry.seq, "target": kind, "answer": "ran" if ran else "not_run",
                   "resolver": resolver, "reason": reason}
        if evidence is not None and evidence.keyring is not None:
            payload["signature"] = sign_resolution(evidence.keyring, saga_id, payload)
        try:
            return await journal.append(
                saga_id, Phase.RESOLVED, write_key=f"resolve:{entry.seq}", tool=entry.tool,
                call_id=entry.call_id, payload=payload,
                expected_seq=entries[-1].seq,
            )
        except JournalConflictError:
            continue  # someone wrote in between: read again and decide again
    raise SagaStateError(f"saga {saga_id} is too busy to record the answer; try again")
