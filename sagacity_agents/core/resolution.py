"""A human's answer to an in-doubt entry: did the call (or the undo) run?

An INTENT with no outcome, or a COMPENSATING with no outcome, is in doubt: nobody can know from
the journal whether the effect happened, so nothing acts on it automatically (design.md,
"Vocabulary"). A person who checked the far side answers with :func:`resolve_in_doubt`
(``sagacity saga resolve SAGA_ID SEQ --ran|--not-run --as NAME --reason TEXT``), which journals a
RESOLVED entry naming the entry, the answer, who and why. The entry then stands as the missing
outcome (``core.compensation.SagaLedger``):

* a call that **ran** is treated as executed: the next recovery undoes it when its tool is
  compensatable, with the undo data given with the answer (``--undo-data JSON``,
  ``undo_data=``: the call's own outcome, which would have carried it, is missing), lists it
  kept or without undo otherwise;
* a call that did **not run** is dropped: nothing to undo;
* an undo that **ran** counts as COMPENSATED; one that did **not run** is retried by the next
  recovery with the same idempotency key.

**Only once the holder cannot still act.** An answer is accepted when (1) a recovery has taken
the lease of the run that wrote the entry over (its RUN_STARTED names that run in
``took_over``, or follows that run's RUN_ENDED) and reported the entry in doubt (a RUN_ENDED
IN_DOUBT or COMPENSATION_FAILED of a recovery since), and (2) the call's deadline has passed:
the entry's ``recorded_at`` + its ``deadline_seconds`` (journaled in the INTENT; for an undo,
``core.declarations.DEFAULT_UNDO_TIMEOUT``; for an INTENT without one,
``core.declarations.DEFAULT_CALL_DEADLINE``) + one lease period of the run that wrote it (a
clock-skew margin) is before the resolver's clock. Until then its holder, stalled rather than
dead, may still write the call's outcome. ``force=True`` overrides both (an operator who stopped
that process), journaled as ``forced: {"reason"}``.

**Undo data** is accepted only with "ran" on a call, only in canonical JSON form (its journaled
form equals it: no NaN, no integer beyond 2**53, no tuple or Decimal), and only with every key
the call's declaration names in ``undo_needs`` when this process knows that declaration. A call
answered "ran" without undo data may be answered again with its undo data while it is not
undone (a RESOLVED that completes the first; the ledger reads the later).

With a keyring (``core.evidence``), the answer is signed like an approval decision
(``core.authenticity.sign_resolution``, by a key ``decision_keys`` allows) and
an unsigned RESOLVED is refused wherever the saga is verified; a host whose keyring cannot sign a
decision is refused before anything is journaled.

Acted on only when the saga's chain verifies (``core.evidence``); refused on a closed saga, while
another run holds the saga's lease, and for an entry that is not in doubt (already answered
included: an answer is never changed, a later one would contradict evidence).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError, EncodingError, JournalConflictError, SagaStateError
from .authenticity import sign_resolution
from .canonical import canonical_bytes, to_canonical_value
from .compensation import SagaLedger, UndoState
from .declarations import DEFAULT_CALL_DEADLINE, DEFAULT_UNDO_TIMEOUT, declaration_by_id
from .entries import JournalEntry, Phase
from .evidence import Evidence, verified_entries
from .journal import FENCE_KEY, Journal, utc_now
from .key_roles import Role
from .lease import lease_of, lease_seconds
from .protection import held_secrets
from .sensitive import DEFAULT_SENSITIVITY, redact_text
from .undo import missing_undo_needs

__all__ = ["answer_not_yet", "answerable_at", "resolve_in_doubt"]

_ATTEMPTS = 20
"""Conditional appends tried before giving up (each loses only to a real write)."""

_REPORTED = ("IN_DOUBT", "COMPENSATION_FAILED")
"""A recovery's RUN_ENDED statuses that report something in doubt (or failed) to a human."""


def _target(ledger: SagaLedger, seq: int, supplement: bool) -> tuple[str, JournalEntry] | None:
    """The in-doubt entry ``seq`` names: an INTENT without outcome (``"call"``), or the undo in
    doubt of a call (its latest COMPENSATING has no outcome, or only an in-doubt mark: it timed
    out or was cancelled), named by that COMPENSATING's seq or by the seq of the entry being
    undone (``"undo"``). With ``supplement`` (an answer "ran" carrying undo data), also an
    INTENT answered "ran" without undo data whose undo has not run to its end."""
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
    answered = ledger.calls.get(seq)
    if supplement and answered is not None and answered.outcome is not None \
            and answered.outcome.phase is Phase.RESOLVED and _ran_without_data(answered.outcome) \
            and ledger.undo_state(answered)[0] in (UndoState.NOT_STARTED, UndoState.FAILED):
        return "call", answered.intent
    return None


def _ran_without_data(entry: JournalEntry) -> bool:
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    return payload.get("answer") == "ran" and payload.get("undo_data") is None


def _stamp(entry: JournalEntry) -> dt.datetime:
    return dt.datetime.strptime(entry.recorded_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc)


def _writer_run(entries: Sequence[JournalEntry], target: JournalEntry) -> JournalEntry | None:
    """The RUN_STARTED whose lease ``target`` was written under (its fence), if any."""
    payload = target.payload if isinstance(target.payload, dict) else {}
    fence = payload.get(FENCE_KEY)
    return next((e for e in entries if e.seq == fence and e.phase is Phase.RUN_STARTED), None)


def _holder_problem(entries: Sequence[JournalEntry], target: JournalEntry) -> str | None:
    """Why the run that wrote ``target`` may still act on it, or ``None``: a recovery took its
    lease over (or followed its RUN_ENDED) and has reported the entry in doubt since."""
    run = _writer_run(entries, target)
    holder = (run.payload or {}).get("holder") if run is not None else None
    gone_at: int | None = None
    recoverers: set[Any] = set()
    ended = run is None  # no lease named (a journal without leases): any later recovery will do
    for entry in entries:
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if entry.seq <= target.seq:
            continue
        if entry.phase is Phase.RUN_ENDED and holder is not None and payload.get("holder") == holder:
            ended = True
        if entry.phase is not Phase.RUN_STARTED:
            continue
        took_over = payload.get("took_over")
        took: dict[str, Any] = took_over if isinstance(took_over, dict) else {}
        names_holder = run is not None and (took.get("run_seq") == run.seq
                                            or took.get("holder") == holder)
        if gone_at is None and (names_holder or ended) and payload.get("agent") == "recover":
            gone_at = entry.seq
        if gone_at is not None and (payload.get("agent") == "recover" or took.get("holder") in recoverers):
            recoverers.add(payload.get("holder"))
    who = f"the run that wrote it ({holder}, RUN_STARTED seq {run.seq})" if run is not None \
        else "the run that wrote it"
    if gone_at is None:
        return (f"{who} may still be running the call: no recovery has taken its lease over "
                "yet; recover the saga first (it reports the call in doubt)")
    if not any(e.phase is Phase.RUN_ENDED and e.seq > gone_at and isinstance(e.payload, dict)
               and e.payload.get("holder") in recoverers and e.payload.get("status") in _REPORTED
               for e in entries):
        return (f"a recovery took {who} over (RUN_STARTED seq {gone_at}) but has not reported "
                "the call in doubt yet; let it finish (or recover the saga again)")
    return None


def answerable_at(entries: Sequence[JournalEntry], target: JournalEntry, kind: str) -> tuple[dt.datetime, str]:
    """When ``target``'s holder can no longer act on it (aware UTC), and how that was computed:
    its ``recorded_at`` + its deadline + the lease period of the run that wrote it.

    Args:
        entries: the saga's verified entries.
        target: an in-doubt INTENT (``kind`` ``"call"``) or COMPENSATING (``"undo"``).
        kind: ``"call"`` or ``"undo"``.
    """
    payload = target.payload if isinstance(target.payload, dict) else {}
    if kind == "call":
        seconds = lease_seconds(payload.get("deadline_seconds", DEFAULT_CALL_DEADLINE))
    else:
        seconds = DEFAULT_UNDO_TIMEOUT
    run = _writer_run(entries, target)
    lease = lease_seconds((run.payload or {}).get("lease_seconds")) if run is not None \
        else lease_seconds(None)
    at = _stamp(target) + dt.timedelta(seconds=seconds + lease)
    return at, (f"{'INTENT' if kind == 'call' else 'COMPENSATING'} seq {target.seq} recorded at "
                f"{target.recorded_at} + deadline {seconds:g} s + one lease period {lease:g} s")


def answer_not_yet(entries: Sequence[JournalEntry], target: JournalEntry, kind: str,
                   now: dt.datetime) -> str | None:
    """Why a human may not answer ``target`` yet (its holder may still act), or ``None``.

    Args:
        entries: the saga's verified entries.
        target: the in-doubt INTENT (``kind`` ``"call"``) or COMPENSATING (``"undo"``).
        kind: ``"call"`` or ``"undo"``.
        now: the resolver's clock (aware UTC).

    Returns:
        The refusal's text (what is missing, and when the deadline passes), or ``None``.
    """
    problem = _holder_problem(entries, target)
    at, how = answerable_at(entries, target, kind)
    if problem is None and at < now:
        return None
    stamp = at.isoformat().replace("+00:00", "Z")
    when = (f"its deadline passes at {stamp} ({how}; in {(at - now).total_seconds():.0f} s)"
            if at >= now else f"its deadline passed at {stamp}")
    return f"{problem}; {when}" if problem is not None else f"the call may still be running: {when}"


def _checked_undo_data(undo_data: Any, ran: bool, kind: str, target: JournalEntry) -> Any:
    """``undo_data`` if an answer may carry it; else a clear ValueError."""
    if undo_data is None:
        return None
    if not ran or kind != "call":
        raise ValueError("undo data goes only with the answer that a call ran (--ran on an INTENT)")
    try:
        canonical = to_canonical_value(undo_data)
        canonical_bytes(canonical)
    except EncodingError as exc:
        raise ValueError(f"the undo data has no canonical JSON encoding: {exc}") from None
    if canonical != undo_data:
        raise ValueError("the undo data must be plain JSON, journaled as given (objects, arrays, "
                         f"strings, numbers, booleans, null); it would be stored as {canonical!r}")
    payload = target.payload if isinstance(target.payload, dict) else {}
    decl_id = payload.get("declaration")
    decl = declaration_by_id(decl_id) if isinstance(decl_id, str) else None
    missing = missing_undo_needs(decl.undo_needs, undo_data) if decl is not None else []
    if missing:
        raise ValueError(f"the undo of {target.tool!r} needs undo data {', '.join(missing)}; "
                         f"the undo data given lacks it: {undo_data!r}")
    return undo_data


async def _signing_problem(journal: Journal, evidence: Evidence | None, undo_data: Any) -> str | None:
    """Why an answer signed on this host would not verify (``None``: it would): a decision
    key signs every answer; with undo data, which an undo acts on, the key must be a run
    writer's too (``core.key_roles``)."""
    problem = evidence.decision_key_problem if evidence is not None else None
    if problem is None and undo_data is not None and evidence is not None:
        problem = await evidence.role_problem(journal, Role.RUN_WRITER, "an answer carrying undo data")
    return problem


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
    undo_data: Any = None,
    force: bool = False,
    now: dt.datetime | None = None,
) -> JournalEntry:
    """Journal a human's answer to the in-doubt entry ``seq`` of ``saga_id`` (RESOLVED).

    Args:
        journal: the saga's journal.
        saga_id: the saga.
        seq: the in-doubt entry: an INTENT without outcome, or a COMPENSATING without outcome
            (or the seq of the entry whose undo is in doubt, as the recovery report lists it).
        ran: ``True``: the call's effect (or the undo) happened; ``False``: it did not.
        resolver: who answers (journaled; required).
        reason: why, e.g. what was checked at the far side (journaled; required; also the
            reason of a forced answer).
        evidence: how the saga is verified first (default: the hash chain alone).
        verified: the saga's entries, verified by the caller just now: the first attempt
            decides on them instead of reading (the answer's append is conditional on their
            tail; a later attempt reads and verifies again).
        undo_data: with ``ran`` on a call: what its undo gets as ``ctx.undo_data`` (plain
            JSON; journaled as ``undo_data``); also completes an earlier "ran" given without it.
        force: answer although the holder may still act (see the module notes); journaled as
            ``forced: {"reason": reason}``.
        now: the resolver's clock (aware UTC; default: the system clock).

    Returns:
        The RESOLVED entry. Run ``recover`` next: it undoes a call that ran (when compensatable)
        and closes the saga once nothing is in doubt.

    Raises:
        ValueError: an empty ``resolver`` or ``reason``; undo data with "not run" or on an
            undo, without a canonical JSON encoding, or lacking a key the declaration's
            ``undo_needs`` names.
        ConfigurationError: a keyring is configured and cannot sign the answer (no private key,
            or one ``decision_keys`` does not allow); nothing was written.
        EvidenceError: the saga's journal does not verify; nothing was written.
        SagaStateError: no such saga; the saga is closed; another run holds its lease; ``seq``
            is not in doubt (no such entry, it has an outcome, or it was answered already);
            without ``force``, the entry's holder may still act (no recovery took its lease
            over and reported it, or its deadline has not passed: the message says which and
            when it passes).
        JournalError: the journal could not be read or written.
    """
    reason = _masked_reason(journal, saga_id, resolver, reason)
    problem = await _signing_problem(journal, evidence, undo_data)
    if problem is not None:
        raise ConfigurationError(f"cannot sign the answer here: {problem}; nothing was journaled")
    for attempt in range(_ATTEMPTS):
        if attempt == 0 and verified is not None:
            entries = verified
        else:
            entries = await verified_entries(journal, saga_id, evidence)
        kind, entry, supplement = _answerable(entries, saga_id, seq, ran, undo_data)
        data = _checked_undo_data(undo_data, ran, kind, entry)
        why = None if force or supplement else answer_not_yet(entries, entry, kind, now or utc_now())
        if why is not None:
            raise SagaStateError(f"seq {seq} of saga {saga_id} cannot be answered yet: {why}; "
                                 "or answer with --force --reason TEXT once you have made sure "
                                 "that process has stopped")
        payload = _answer_payload(saga_id, entry.seq, kind, ran, resolver, reason, data, force, evidence)
        try:
            return await journal.append(
                saga_id, Phase.RESOLVED, tool=entry.tool, call_id=entry.call_id, payload=payload,
                write_key=f"resolve:{entry.seq}" + (":undo-data" if supplement else ""),
                expected_seq=entries[-1].seq,
            )
        except JournalConflictError:
            continue  # someone wrote in between: read again and decide again
    raise SagaStateError(f"saga {saga_id} is too busy to record the answer; try again")


def _masked_reason(journal: Journal, saga_id: str, resolver: str, reason: str) -> str:
    """``reason`` with the card numbers and the saga's known sensitive values in it masked
    (``core.sensitive.redact_text``), when ``journal`` protects the saga's appends. The reason
    is signed (``sign_resolution``) and journaled twice (``forced``): masked here, as plain text,
    it is the same in the signed statement and in both places of the stored entry, where the
    append's own scan finds nothing left to commit (a committed reason would no longer match
    its signature, and ``forced.reason`` is not scanned).

    Raises:
        ValueError: an empty ``resolver`` or ``reason``.
    """
    if not resolver or not reason:
        raise ValueError("a resolution needs the resolver's identity and a reason")
    secrets = held_secrets(journal, saga_id)
    if secrets is None:
        return reason
    return redact_text(reason, DEFAULT_SENSITIVITY, tuple(secrets.known)) or reason


def _answer_payload(saga_id: str, seq: int, kind: str, ran: bool, resolver: str, reason: str,
                    data: Any, force: bool, evidence: Evidence | None) -> dict[str, Any]:
    """The RESOLVED payload (signed under a keyring)."""
    payload: dict[str, Any] = {"target_seq": seq, "target": kind,
                               "answer": "ran" if ran else "not_run", "resolver": resolver,
                               "reason": reason}
    if data is not None:
        payload["undo_data"] = data
    if force:
        payload["forced"] = {"reason": reason}
    if evidence is not None and evidence.keyring is not None:
        payload["signature"] = sign_resolution(evidence.keyring, saga_id, payload)
    return payload


def _answerable(entries: list[JournalEntry], saga_id: str, seq: int, ran: bool,
                undo_data: Any) -> tuple[str, JournalEntry, bool]:
    """``(kind, the entry answered, whether the answer completes an earlier "ran")``.

    Raises:
        SagaStateError: no such saga, closed, its lease held, or ``seq`` not in doubt.
    """
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
    ledger = SagaLedger(entries)
    found = _target(ledger, seq, ran and undo_data is not None)
    if found is None:
        raise SagaStateError(
            f"seq {seq} of saga {saga_id} is not in doubt (not an INTENT or undo without "
            "outcome, or already answered); see `sagacity journal show`"
        )
    kind, entry = found
    call = ledger.calls.get(entry.seq)
    return kind, entry, kind == "call" and call is not None and call.outcome is not None
