"""The ledger: one reading of a saga's entries (its calls, their outcomes, their undo attempts,
what is in doubt), shared by compensation (``core.compensation``, which re-exports it), the
verdict, resolution and the structure check (``core.structure``: no SAGA_CLOSED with something
in doubt). Its own module so that the structure check, which evidence runs, does not import
compensation (which imports evidence)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .entries import JournalEntry, Phase

__all__ = ["SagaLedger", "UndoState", "is_in_doubt_mark", "resolved_ran"]


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


@dataclass
class _Call:
    intent: JournalEntry
    outcome: JournalEntry | None = None
    attempts: list[JournalEntry] = field(default_factory=list)
    attempt_outcomes: list[JournalEntry] = field(default_factory=list)
    ends: dict[int, list[JournalEntry]] = field(default_factory=dict)
    """COMPENSATING seq -> that attempt's outcomes (in-doubt mark, real end, a human's answer)."""


class SagaLedger:
    """A reading of one saga's entries: its calls, their outcomes and their undo attempts.

    Args:
        entries: the saga's entries in ``seq`` order.
    """

    def __init__(self, entries: list[JournalEntry]) -> None:
        self.entries = entries
        self.calls: dict[int, _Call] = {}
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
                if call is not None and call.outcome is None:
                    call.outcome = e
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
            elif e.phase is Phase.CHECKED:
                # A far-side check's "ran" / "not_run" stands as the call's outcome
                # (core.checks); "unknown" leaves it in doubt. Minimal reading; the ledger's
                # owner may refine it (contradicting outcomes).
                target = payload.get("target_seq", -1)
                if payload.get("verdict") in ("ran", "not_run") and target in self.calls \
                        and self.calls[target].outcome is None:
                    self.calls[target].outcome = e
            elif e.phase is Phase.RESOLVED:
                # A human's answer stands as the outcome of the entry it names (core.resolution).
                target = payload.get("target_seq", -1)
                if payload.get("target") == "undo" and target in undo_targets:
                    self.calls[undo_targets[target]].attempt_outcomes.append(e)
                    self.calls[undo_targets[target]].ends.setdefault(target, []).append(e)
                elif payload.get("target") == "call" and target in self.calls \
                        and (self.calls[target].outcome is None
                             or _completes(self.calls[target].outcome, payload)):
                    self.calls[target].outcome = e

    def _call_of_executed(self, seq: int) -> _Call | None:
        for call in self.calls.values():
            if call.outcome is not None and call.outcome.seq == seq:
                return call
        return None

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
