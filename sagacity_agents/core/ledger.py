"""The ledger: one reading of a saga's entries (its calls, their outcomes, their undo attempts,
what is in doubt), shared by compensation (``core.compensation``, which re-exports it), the
verdict, resolution and the structure check (``core.structure``: no SAGA_CLOSED with something
in doubt). Its own module so that the structure check, which evidence runs, does not import
compensation (which imports evidence)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from collections.abc import Sequence
from typing import Any

from .entries import EntryLike, JournalEntry, Phase

__all__ = [
    "Contradiction", "SagaLedger", "UndoState", "answer_of", "closed_at", "has_effect",
    "is_closed", "is_in_doubt_mark", "reopened_by", "resolved_ran",
]


class UndoState(str, enum.Enum):
    """Where the undo of one executed call stands, read from the journal
    (:meth:`SagaLedger.undo_state`)."""

    NOT_STARTED = "not_started"
    """No attempt yet (no COMPENSATING)."""
    UNDONE = "undone"
    """Some attempt ended COMPENSATED (late ones included), or a human answered that it ran."""
    FAILED = "failed"
    """The latest attempt raised (COMPENSATION_FAILED), or a human answered that it did not run:
    retried with the same idempotency key."""
    TIMED_OUT = "timed_out"
    """The latest attempt was stopped waiting for (timed out, or its walk's caller cancelled)
    and has not ended since: it may have acted; recovery retries it with the same idempotency
    key."""
    IN_DOUBT = "in_doubt"
    """The latest attempt has no outcome at all (its process stopped while it ran): a human
    answers (``core.resolution``)."""


def is_in_doubt_mark(entry: JournalEntry) -> bool:
    """Whether ``entry`` is the in-doubt mark of an undo attempt that was stopped waiting for
    (COMPENSATION_FAILED with ``in_doubt: true``), rather than the attempt's real end."""
    return entry.phase is Phase.COMPENSATION_FAILED and isinstance(entry.payload, dict) \
        and entry.payload.get("in_doubt") is True


@dataclass(frozen=True, slots=True)
class Contradiction:
    """An answer "not run" (a human's RESOLVED, or a far-side CHECKED) that the call's own
    outcome contradicts: the call ran after all (its holder was stalled, not dead, and wrote
    its outcome, perhaps late). Derived by :class:`SagaLedger` when it reads; never journaled.
    The outcome stands: the call is undone with the outcome's own result and undo data."""

    intent_seq: int
    """The call's INTENT."""
    answer_seq: int
    """The RESOLVED or CHECKED that answered "not run"."""
    outcome_seq: int
    """The call's own outcome (EXECUTED, a FAILED with undo data, or a CHECKED "ran")."""

    def describe(self) -> str:
        """The report's sentence: ``the answer "not run" (seq 9) was contradicted by the
        call's own outcome (seq 11)``."""
        return (f'the answer "not run" (seq {self.answer_seq}) was contradicted by the call\'s '
                f"own outcome (seq {self.outcome_seq})")


@dataclass
class _Call:
    intent: JournalEntry
    outcome: JournalEntry | None = None
    attempts: list[JournalEntry] = field(default_factory=list)
    attempt_outcomes: list[JournalEntry] = field(default_factory=list)
    ends: dict[int, list[JournalEntry]] = field(default_factory=dict)
    """COMPENSATING seq -> that attempt's outcomes (in-doubt mark, real end, a human's answer)."""
    contradiction: Contradiction | None = None
    """The "not run" answer this call's own outcome contradicts (``None``: none)."""


_ANSWERS = (Phase.RESOLVED, Phase.CHECKED)
_REAL_OUTCOMES = (Phase.EXECUTED, Phase.REFUSED, Phase.FAILED)


def answer_of(entry: EntryLike) -> str | None:
    """What an answer to a call says: ``"ran"`` or ``"not_run"`` for a RESOLVED of a call
    (``target: "call"``) or a CHECKED with that verdict; ``None`` for anything else (a CHECKED
    ``"unknown"`` included: the call stays in doubt)."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if entry.phase is Phase.RESOLVED and payload.get("target") == "call":
        said = payload.get("answer")
    elif entry.phase is Phase.CHECKED:
        said = payload.get("verdict")
    else:
        return None
    return said if said in ("ran", "not_run") else None


def has_effect(outcome: EntryLike) -> bool:
    """Whether a call's outcome says its effect may exist (what compensation undoes):
    EXECUTED; FAILED with undo data recorded before the body failed; a RESOLVED or CHECKED
    that says it ran."""
    if outcome.phase is Phase.EXECUTED:
        return True
    if outcome.phase is Phase.FAILED:
        return isinstance(outcome.payload, dict) and "undo_data" in outcome.payload
    return answer_of(outcome) == "ran"


def _outranks(call: _Call, entry: JournalEntry) -> bool:
    """Whether ``entry`` (an outcome or an answer of ``call``) takes the place of the call's
    current outcome. An empty place is filled; an answer (RESOLVED, CHECKED) gives way to an
    effect when it said "not run" (the contradiction), and to the call's own outcome while no
    undo was attempted on the answer's word; a real outcome is never replaced."""
    current = call.outcome
    if current is None:
        return True
    if current.phase not in _ANSWERS:
        return False
    if answer_of(current) == "not_run" and has_effect(entry):
        return True
    if _completes(current, entry.payload if isinstance(entry.payload, dict) else {}):
        return not call.attempts  # a later "ran" with the undo data an earlier "ran" lacked
    return entry.phase in _REAL_OUTCOMES and not call.attempts


class SagaLedger:
    """A reading of one saga's entries: its calls, their outcomes and their undo attempts.

    Args:
        entries: the saga's entries in ``seq`` order.
    """

    def __init__(self, entries: list[JournalEntry]) -> None:
        self.entries = entries
        self.calls: dict[int, _Call] = {}
        self._by_outcome: dict[int, _Call] = {}
        """seq -> the call it was (or is) the outcome of: what an undo's ``target_seq`` names."""
        undo_targets: dict[int, int] = {}
        by_key = {e.write_key: e.seq for e in entries if e.phase is Phase.INTENT}
        for e in entries:
            payload = e.payload if isinstance(e.payload, dict) else {}
            if e.phase is Phase.INTENT:
                self.calls[e.seq] = _Call(e)
            elif e.phase in (Phase.EXECUTED, Phase.REFUSED, Phase.FAILED):
                intent_seq = payload.get("intent_seq")
                if intent_seq is None and payload.get("intent_write_key"):
                    intent_seq = by_key.get(payload["intent_write_key"], -1)
                call = self.calls.get(intent_seq if intent_seq is not None else -1)
                if call is not None:
                    self._pair(call, e)
            elif e.phase is Phase.COMPENSATING:
                target = self._call_of_executed(payload.get("target_seq", -1))
                if target is not None:
                    target.attempts.append(e)
                    undo_targets[e.seq] = target.intent.seq
            elif e.phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED):
                start = payload.get("compensating_seq", -1)
                intent_seq = undo_targets.get(start)
                if intent_seq is not None:
                    self.calls[intent_seq].attempt_outcomes.append(e)
                    self.calls[intent_seq].ends.setdefault(start, []).append(e)
            elif e.phase is Phase.RESOLVED:
                # A human's answer stands as the outcome of the entry it names (core.resolution).
                target = payload.get("target_seq", -1)
                if payload.get("target") == "undo" and target in undo_targets:
                    self.calls[undo_targets[target]].attempt_outcomes.append(e)
                    self.calls[undo_targets[target]].ends.setdefault(target, []).append(e)
                elif answer_of(e) is not None and target in self.calls:
                    self._pair(self.calls[target], e)
            elif e.phase is Phase.CHECKED:
                # A far-side check's verdict (contract in core.entries); "unknown" answers nothing.
                target = payload.get("target_seq", -1)
                if answer_of(e) is not None and isinstance(target, int) and target in self.calls:
                    self._pair(self.calls[target], e)

    def _pair(self, call: _Call, entry: JournalEntry) -> None:
        """Make ``entry`` the outcome of ``call`` when it outranks the current one
        (:func:`_outranks`), noting a contradicted "not run" answer."""
        if not _outranks(call, entry):
            return
        current = call.outcome
        if current is not None and answer_of(current) == "not_run" and has_effect(entry):
            call.contradiction = Contradiction(call.intent.seq, current.seq, entry.seq)
        call.outcome = entry
        self._by_outcome[entry.seq] = call

    def _call_of_executed(self, seq: Any) -> _Call | None:
        return self._by_outcome.get(seq) if isinstance(seq, int) else None

    @property
    def contradictions(self) -> list[Contradiction]:
        """Every call whose own outcome contradicts an answer "not run", in INTENT order:
        derived from the entries as read (``(intent seq, answer seq, outcome seq)``), never a
        journal entry of its own."""
        return [c.contradiction for c in self.calls.values() if c.contradiction is not None]

    def compensable(self) -> list[_Call]:
        """The calls whose outcome says their effect may exist (:func:`has_effect`), in INTENT
        order: the ones compensation walks (``core.compensation.undo_order``)."""
        return [c for c in self.calls.values() if c.outcome is not None and has_effect(c.outcome)]

    def in_doubt(self) -> list[JournalEntry]:
        """INTENT entries with no outcome (a human's RESOLVED answer counts as one)."""
        return [c.intent for c in self.calls.values() if c.outcome is None]

    def undo_in_doubt(self) -> list[JournalEntry]:
        """COMPENSATING entries (the latest attempt of an undo) with no outcome."""
        return [c.attempts[-1] for c in self.calls.values()
                if self.undo_state(c)[0] is UndoState.IN_DOUBT]

    @staticmethod
    def undo_state(call: _Call) -> tuple[UndoState, JournalEntry | None]:
        """Where ``call``'s undo stands, and the entry that says so (the COMPENSATED or
        RESOLVED for UNDONE, the latest attempt's end for FAILED, its in-doubt mark for
        TIMED_OUT, its COMPENSATING for IN_DOUBT; ``None`` for NOT_STARTED).

        Outcomes are paired with their attempt by ``compensating_seq``, never counted: an
        attempt may have two (its in-doubt mark, then its late real end), and a late end of an
        older attempt may land after a newer attempt started.
        """
        if not call.attempts:
            return UndoState.NOT_STARTED, None
        for outcome in call.attempt_outcomes:
            if outcome.phase is Phase.COMPENSATED or (
                    outcome.phase is Phase.RESOLVED and resolved_ran(outcome)):
                return UndoState.UNDONE, outcome
        ends = call.ends.get(call.attempts[-1].seq, [])
        real = [e for e in ends if not is_in_doubt_mark(e)]
        if real:
            return UndoState.FAILED, real[-1]
        if ends:
            return UndoState.TIMED_OUT, ends[-1]
        return UndoState.IN_DOUBT, call.attempts[-1]

    def awaits_outcome(self) -> bool:
        """Whether an outcome may still be appended for an entry of the ledger: an INTENT
        without outcome, or an undo attempt (COMPENSATING) without a real end (none, or only
        its in-doubt mark). Its writer, if stalled rather than dead, writes that outcome late,
        after any later run's RUN_STARTED (``core.fence``)."""
        return any(
            call.outcome is None or any(
                not any(not is_in_doubt_mark(end) for end in call.ends.get(attempt.seq, ()))
                for attempt in call.attempts)
            for call in self.calls.values())

    def has_phase(self, phase: Phase) -> bool:
        """Whether any entry has ``phase``."""
        return any(e.phase is phase for e in self.entries)


def _completes(outcome: JournalEntry | None, payload: dict) -> bool:
    """Whether a RESOLVED "ran" with undo data completes ``outcome``, an earlier RESOLVED "ran"
    given without any (``core.resolution``): the call's undo then gets the later answer's data."""
    if outcome is None:
        return False
    earlier = outcome.payload if isinstance(outcome.payload, dict) else {}
    return (outcome.phase is Phase.RESOLVED and earlier.get("answer") == "ran"
            and earlier.get("undo_data") is None and payload.get("answer") == "ran"
            and payload.get("undo_data") is not None)


def resolved_ran(entry: JournalEntry) -> bool:
    """Whether a RESOLVED entry answers "it ran" (the call's effect, or the undo, happened), or
    a CHECKED entry's verdict is "ran"."""
    if not isinstance(entry.payload, dict):
        return False
    if entry.phase is Phase.CHECKED:
        return entry.payload.get("verdict") == "ran"
    return entry.payload.get("answer") == "ran"


def closed_at(entries: Sequence[EntryLike]) -> int | None:
    """The seq of the saga's last SAGA_CLOSED (``None``: it was never closed)."""
    for entry in reversed(entries):
        if entry.phase is Phase.SAGA_CLOSED:
            return entry.seq
    return None


def is_closed(entries: Sequence[EntryLike]) -> bool:
    """Whether the saga is closed now: its last entry is SAGA_CLOSED (a reopened saga, one
    with an entry after its close, is not; ``core.append_rule``)."""
    return bool(entries) and entries[-1].phase is Phase.SAGA_CLOSED


def reopened_by(entries: Sequence[EntryLike]) -> tuple[int, int] | None:
    """``(close seq, seq of the first entry after it)`` when the saga is *reopened*: an entry
    follows its last SAGA_CLOSED (only a late outcome of a call, under its INTENT's fence, may
    be appended there: ``core.append_rule``); ``None`` otherwise (``SagaStatus.REOPENED``)."""
    close = closed_at(entries)
    if close is None or entries[-1].seq == close:
        return None
    return close, next(e.seq for e in entries if e.seq > close)
