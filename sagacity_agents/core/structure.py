"""Structure that no run writes is refused, whatever the keys.

The library writes a saga's entries in a few fixed shapes (``core.journal``, ``core.fence``,
``core.compensation``). A writer that can only INSERT rows can append entries of any shape
through the journal's own ``append``; a keyring (``core.authenticity``) refuses every such entry,
and this module refuses, even without a keyring, those whose *shape* no run of the library
writes, before recovery or anything else acts on them:

* **Fences.** An entry's fence (``payload.fence``) names the RUN_STARTED whose lease its writer
  held: it must be the seq of a RUN_STARTED before the entry. A fenced entry that is not late
  must have been written while that RUN_STARTED was the saga's newest (the journal refuses it
  otherwise, atomically with the insert); a late one must be an outcome of a call or an undo
  (``core.journal.LATE_PHASES``). ``late`` without a fence is refused.
* **Outcomes belong to their INTENT's writer.** An outcome (EXECUTED, REFUSED, FAILED) that
  pairs with an INTENT (``intent_seq``, or ``intent_write_key``) of a call that may change the
  world (not read-only) must name the same tool and call id and carry the same fence as that
  INTENT: it was written by the same lease holder (a late outcome of that holder included). A
  forged RUN_STARTED followed by a forged outcome under it is refused at the outcome. One
  exception, written by the library itself: a call still running when its run paused for an
  approval (an agent tool whose inner agent asked for one: RUN_ENDED ``AWAITING_APPROVAL``
  under the INTENT's fence, after the INTENT) gets its outcome from a run that resumes the
  saga after that pause, under that run's fence (the SDK resumes the call, not a new one).
* **Nothing in doubt at the close.** A SAGA_CLOSED follows no INTENT and no undo's
  COMPENSATING without an outcome (a human's RESOLVED, or a check's CHECKED "ran" / "not_run",
  counts as one: ``core.ledger``): a run that ends with a call in doubt leaves the saga open,
  IN_DOUBT, and recovery closes it only when nothing is. A saga reopened by a late outcome
  after its close (``core.append_rule.reopens``; the chain check accepts that one entry) is
  held to the same rule at its next SAGA_CLOSED.
* **The access log stands apart.** DATA_REVEALED and DATA_ERASED (``entries.ACCESS_PHASES``)
  are written only in the reserved saga ``entries.ACCESS_SAGA`` (``core.access_log``; the
  journal refuses them elsewhere), and that saga holds nothing else, unfenced: no run writes
  there.
* **Undo outcomes belong to their claim's writer.** COMPENSATED and COMPENSATION_FAILED answer
  the COMPENSATING named by ``compensating_seq``: same tool, call id and fence; and a
  COMPENSATING names, in ``target_seq``, an outcome of the same call.

Without a keyring this is a net against forgeries that do not copy the structure: a writer who
reads the saga can still write an outcome with the right fence (docs/threat-model.md). With one,
every such entry is refused anyway for its missing tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from .entries import ACCESS_PHASES, ACCESS_SAGA, OUTCOME_PHASES, EntryLike, JournalEntry, Phase
from .journal import FENCE_KEY, LATE_KEY, LATE_PHASES
from .ledger import SagaLedger, answer_of

__all__ = ["structure_problem"]

# The members the rule compares, as module constants: ``Phase.X`` is an attribute look-up
# through the enum's metaclass (~150 ns on CPython 3.11), and verify pays it per entry.
_COMPENSATING = Phase.COMPENSATING
_INTENT = Phase.INTENT
_RESOLVED = Phase.RESOLVED
_CHECKED = Phase.CHECKED
_RUN_ENDED = Phase.RUN_ENDED
_RUN_STARTED = Phase.RUN_STARTED
_SAGA_CLOSED = Phase.SAGA_CLOSED

_UNDO_OUTCOMES = (Phase.COMPENSATED, Phase.COMPENSATION_FAILED)
PAUSED_STATUS = "AWAITING_APPROVAL"
"""RUN_ENDED's status when its run paused for an approval (``SagaStatus.AWAITING_APPROVAL``)."""


def _payload(entry: EntryLike) -> Mapping[str, Any]:
    return entry.payload if isinstance(entry.payload, dict) else {}


def _int(value: Any) -> int | None:
    if type(value) is int:  # the usual case, in one test
        return value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fence(entry: EntryLike) -> int | None:
    # _int(_payload(entry).get(FENCE_KEY)), in one call: verify asks twice per outcome.
    payload = entry.payload
    value = payload.get(FENCE_KEY) if isinstance(payload, dict) else None
    return value if type(value) is int else _int(value)


def _same_writer(entry: EntryLike, start: EntryLike, what: str) -> str | None:
    """Why ``entry`` cannot be the answer of ``start`` (an INTENT or a COMPENSATING), or None."""
    if entry.tool != start.tool or entry.call_id != start.call_id:
        return (f"{entry.phase.value if isinstance(entry.phase, Phase) else entry.phase} names "
                f"{what} seq {start.seq} of another call ({start.tool!r}, call {start.call_id!r}; "
                f"this entry: {entry.tool!r}, call {entry.call_id!r})")
    if _fence(entry) != _fence(start):
        return (f"outcome written under another lease than its {what} (seq {start.seq}): fence "
                f"{_fence(entry)} here, {_fence(start)} there; only the lease holder that wrote "
                f"the {what} writes its outcome (late, when it lost the lease)")
    return None


def structure_problem(entries: Sequence[EntryLike], saga_id: str | None = None) -> tuple[int, str] | None:
    """The first entry (lowest seq) whose shape no run of the library writes (module rules).

    Args:
        entries: one saga's entries in ``seq`` order, already chain-verified (``core.chain``):
            the entries, or the fields of their verified rows (``chain.verify_rows``).
        saga_id: the saga's id; ``None``: the first entry's (fields of rows carry none: then
            the saga is judged as one that is not the access log).

    Returns:
        ``(seq, why)`` of the first such entry, or ``None`` when every entry has a shape the
        library writes.
    """
    if saga_id is None and entries:
        saga_id = getattr(entries[0], "saga_id", None)
    if saga_id == ACCESS_SAGA:
        return _access_saga_problem(entries)
    # One pass, the per-entry work inlined: verify runs this on every entry it reads.
    by_seq = {e.seq: e for e in entries}
    intents_by_key = {e.write_key: e for e in entries if e.phase is _INTENT}
    newest_run: int | None = None
    paused: dict[int, int] = {}  # fence -> seq of its run's RUN_ENDED AWAITING_APPROVAL
    unanswered: set[Any] = set()  # INTENTs no outcome named by intent_seq yet (see _closed_in_doubt)
    undo_started = False
    for entry in entries:
        payload = entry.payload
        if not isinstance(payload, dict):
            payload = _EMPTY
        phase = entry.phase
        raw_fence = payload.get(FENCE_KEY)
        fence = raw_fence if type(raw_fence) is int else _int(raw_fence)
        late = payload.get(LATE_KEY) is True
        if fence is None and FENCE_KEY in payload:
            return entry.seq, f"fence {raw_fence!r} is not a seq"
        if fence is not None:
            run = by_seq.get(fence)
            if run is None or run.phase is not _RUN_STARTED or fence >= entry.seq:
                return entry.seq, f"fence {fence} names no RUN_STARTED before this entry"
            if late:
                if phase not in LATE_PHASES:
                    return entry.seq, f"a late {phase} (only outcomes may be late)"
            elif fence != newest_run:
                return entry.seq, (
                    f"written under the lease of RUN_STARTED seq {fence} while the saga's lease "
                    f"was RUN_STARTED seq {newest_run}: the journal refuses that (only a late "
                    "outcome may follow a takeover)")
        elif late:
            return entry.seq, "a late entry without the fence of the lease it lost"
        if phase in _ANSWERS:
            problem = _answer_problem(entry, payload, by_seq, intents_by_key, paused)
            if problem is not None:
                return entry.seq, problem
        if phase is _INTENT:
            unanswered.add(entry.seq)
        elif phase in OUTCOME_PHASES or phase is _RESOLVED or phase is _CHECKED:
            # The ledger's rule (answer_of): an answer counts only when it says ran or not_run.
            named = payload.get("intent_seq") if phase in OUTCOME_PHASES else (
                payload.get("target_seq") if answer_of(entry) is not None else None)
            try:
                unanswered.discard(named)
            except TypeError:  # unhashable: the ledger decides
                undo_started = True
        elif phase is _COMPENSATING:
            undo_started = True
        elif phase is _SAGA_CLOSED and (unanswered or undo_started):
            # Maybe something in doubt: the ledger's own reading decides.
            problem = _closed_in_doubt(entries, entry)
            if problem is not None:
                return entry.seq, problem
        elif phase is _RUN_STARTED:
            newest_run = entry.seq
        elif (entry.phase is _RUN_ENDED and fence is not None
              and payload.get("status") == PAUSED_STATUS):
            paused.setdefault(fence, entry.seq)
        elif phase in ACCESS_PHASES:
            return entry.seq, (f"a {Phase(phase).value} entry outside the access log (saga "
                               f"{ACCESS_SAGA!r}): the journal writes it only there")
    return None


def _access_saga_problem(entries: Sequence[EntryLike]) -> tuple[int, str] | None:
    """The first entry of the access log (``entries.ACCESS_SAGA``) that is not an unfenced
    DATA_REVEALED or DATA_ERASED naming a saga (module rules), or ``None``."""
    for entry in entries:
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if entry.phase not in ACCESS_PHASES:
            phase = entry.phase.value if isinstance(entry.phase, Phase) else entry.phase
            return entry.seq, (f"a {phase} entry in the access log (saga {ACCESS_SAGA!r}), which "
                               "holds DATA_REVEALED and DATA_ERASED only")
        if FENCE_KEY in payload or LATE_KEY in payload:
            return entry.seq, "a fenced entry in the access log: no run writes there"
        if not isinstance(payload.get("saga_id"), str):
            return entry.seq, f"a {Phase(entry.phase).value} entry naming no saga"
    return None


_EMPTY: Mapping[str, Any] = {}
_ANSWERS = OUTCOME_PHASES | {_COMPENSATING, *_UNDO_OUTCOMES}
"""The phases :func:`_answer_problem` checks (it passes every other one)."""


def _closed_in_doubt(entries: Sequence[EntryLike], closed: EntryLike) -> str | None:
    """Why ``closed`` (a SAGA_CLOSED) closes a saga with something in doubt, or ``None``: no run
    closes one while an INTENT or an undo's COMPENSATING has no outcome (a human's RESOLVED
    counts as one): ``finish`` leaves such a saga open, IN_DOUBT, and recovery closes only when
    its report is clean (``core.compensation``; the ledger read here, ``core.ledger``, is theirs).

    :func:`structure_problem` asks only when its own pass may have seen something in doubt: an
    INTENT that no later outcome (or RESOLVED) names by ``intent_seq`` (the ledger also pairs by
    ``intent_write_key``), or an undo started. Where every INTENT is named so and no undo
    started, the ledger finds nothing in doubt either."""
    # The ledger reads seq, phase, write_key and payload, which the fields of a row carry too.
    ledger = SagaLedger(cast("list[JournalEntry]", [e for e in entries if e.seq < closed.seq]))
    doubt = sorted(e.seq for e in [*ledger.in_doubt(), *ledger.undo_in_doubt()])
    if not doubt:
        return None
    return (f"SAGA_CLOSED while seq {', '.join(map(str, doubt))} is in doubt (an INTENT or "
            "COMPENSATING without outcome): no run closes a saga with a call in doubt")


def _resumed_after_pause(entry: EntryLike, intent: EntryLike, paused: Mapping[int, int]) -> bool:
    """Whether ``entry`` is the outcome of a call carried across an approval pause: same call,
    not late, the INTENT's run ended AWAITING_APPROVAL after the INTENT, and ``entry``'s fence
    is a run started after that pause (module doc)."""
    start, here = _fence(intent), _fence(entry)
    pause = paused.get(start) if start is not None else None
    return (pause is not None and here is not None and intent.seq < pause < here
            and entry.tool == intent.tool and entry.call_id == intent.call_id
            and _payload(entry).get(LATE_KEY) is not True)


def _answer_problem(
    entry: EntryLike, payload: Mapping[str, Any], by_seq: Mapping[int, EntryLike],
    intents_by_key: Mapping[str, EntryLike], paused: Mapping[int, int],
) -> str | None:
    """Whether ``entry`` (an outcome, a claim or an undo's outcome) answers what it names."""
    if entry.phase in OUTCOME_PHASES:
        intent_seq = _int(payload.get("intent_seq"))
        intent = by_seq.get(intent_seq) if intent_seq is not None else None
        if intent_seq is None and isinstance(payload.get("intent_write_key"), str):
            intent = intents_by_key.get(payload["intent_write_key"])
        if intent is None or intent.phase is not _INTENT or intent.seq >= entry.seq:
            return None  # pairs with nothing: the ledger never acts on it
        started = intent.payload
        if isinstance(started, dict) and started.get("reversibility") == "read_only":
            return None
        problem = _same_writer(entry, intent, "INTENT")
        if problem is not None and _resumed_after_pause(entry, intent, paused):
            return None
        return problem
    if entry.phase in _UNDO_OUTCOMES:
        claim = by_seq.get(_int(payload.get("compensating_seq")) or -1)
        if claim is None or claim.phase is not _COMPENSATING or claim.seq >= entry.seq:
            return None  # answers no claim: the ledger never counts it
        return _same_writer(entry, claim, "COMPENSATING")
    if entry.phase is _COMPENSATING:
        target = by_seq.get(_int(payload.get("target_seq")) or -1)
        if target is None or target.seq >= entry.seq:
            return None
        if target.tool != entry.tool or target.call_id != entry.call_id:
            return (f"COMPENSATING names seq {target.seq} of another call ({target.tool!r}, call "
                    f"{target.call_id!r}; this entry: {entry.tool!r}, call {entry.call_id!r})")
    return None
