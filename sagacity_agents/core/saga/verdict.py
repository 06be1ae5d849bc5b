"""The saga's verdict on a run still in progress: has it failed, what is to be undone, what is in
doubt. Guardrails (``sdk/guardrails.py``) and the REFUSE_EFFECTS policy (``core/saga/refusals.py``) read
it to withhold a run's final output and to refuse further effects, and to tell the model and the
application why.

Read from the saga's failures (in memory: the failure the SDK swallowed is known there first) and
its journal entries (what ran, what was undone, what has no outcome), never from the framework's
view of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import describe_error
from ..authenticity import authenticated_entries
from ..compensation import CompensationItem, SagaLedger, UndoState
from ..declarations import Reversibility, ToolDeclaration
from ..entries import Phase
from ..journal import Journal
from ..undo import lost_undo_data
from .payloads import UNDECLARED
from .status import FailureRecord, SagaStatus

__all__ = ["SagaVerdict", "VerdictSource", "changes_world", "read_verdict"]


class VerdictSource(Protocol):
    """What :func:`read_verdict` reads from a live saga (a :class:`~.saga.Saga`); a protocol, so
    that the verdict does not depend on the saga that asks for it (the REFUSE_EFFECTS policy)."""

    @property
    def saga_id(self) -> str:
        """The saga."""

    @property
    def status(self) -> SagaStatus:
        """Where the saga stands in this process."""

    @property
    def failures(self) -> Sequence[FailureRecord]:
        """The failed calls, as the saga saw them."""

    @property
    def journal(self) -> Journal:
        """The saga's journal."""

    async def outcomes_written(self) -> None:
        """Wait for outcomes still being written behind their calls."""

_FAILED_STATUSES = frozenset({"FAILED", "COMPENSATED", "COMPENSATION_FAILED", "IN_DOUBT"})


def changes_world(decl: ToolDeclaration | None) -> bool:
    """Whether a call of a tool with this declaration may change the world.

    Compensatable, no-undo and irreversible tools do; read-only ones do not. A tool with no
    declaration is unknown, and counted as changing the world (fail closed).
    """
    return decl is None or decl.reversibility is not Reversibility.READ_ONLY


def _calls(items: tuple[CompensationItem, ...]) -> str:
    return ", ".join(f"{i.tool} (call {i.call_id})" for i in items)


@dataclass(frozen=True, slots=True)
class SagaVerdict:
    """Where a saga stands while a run is still going (before its end-of-run compensation).

    Lists are in journal order; ``to_undo`` is in the order the undos will run (newest first).
    """

    saga_id: str
    """The saga."""
    status: str
    """The saga's status (a :class:`~sagacity_agents.core.saga.SagaStatus` value), or
    ``"FAILED"`` when the journal holds SAGA_FAILED for a saga still open (compensation under
    way, or left behind by a process that died)."""
    failures: tuple[FailureRecord, ...] = ()
    """The failed calls, as the saga saw them (tool, call id, error, journal seq)."""
    to_undo: tuple[CompensationItem, ...] = ()
    """Executed compensatable effects not undone yet, newest first: what compensation will undo
    when the run ends, if the saga has failed."""
    undone: tuple[CompensationItem, ...] = ()
    """Effects already undone (COMPENSATED in the journal)."""
    kept: tuple[CompensationItem, ...] = ()
    """Executed effects that cannot be undone (irreversible, declared without an undo, or whose
    undo data could not be journaled)."""
    in_doubt: tuple[CompensationItem, ...] = ()
    """Calls with no known outcome (an INTENT or COMPENSATING without outcome, an outcome the
    journal refused): an effect may exist."""
    journal_error: str | None = None
    """Why the journal could not be read, if it could not (the verdict then fails closed)."""

    @property
    def failed(self) -> bool:
        """True when a call failed, the saga was marked failed or compensated, or its journal
        could not be read."""
        return bool(self.failures) or self.status in _FAILED_STATUSES or self.journal_error is not None

    @property
    def blocks_output(self) -> bool:
        """True when a run's final output must not be presented as a success: the saga failed,
        was compensated, or has a call in doubt."""
        return self.failed or bool(self.in_doubt)

    def summary(self) -> str:
        """One paragraph for people and logs: the failed calls with their errors, what will be
        undone, what was undone, what is kept and what is in doubt. Empty when nothing is wrong
        (:attr:`blocks_output` false)."""
        if not self.blocks_output:
            return ""
        parts = []
        if self.failures:
            parts.append("; ".join(
                f"{f.tool} (call {f.call_id}) failed: {f.error}" for f in self.failures
            ))
        elif self.status in _FAILED_STATUSES:
            parts.append(f"saga {self.saga_id} is {self.status}")
        if self.journal_error is not None:
            parts.append(f"the journal could not be read ({self.journal_error})")
        if self.to_undo:
            parts.append(f"to be undone when the run ends: {_calls(self.to_undo)}")
        if self.undone:
            parts.append(f"undone: {_calls(self.undone)}")
        if self.kept:
            parts.append(f"cannot be undone: {_calls(self.kept)}")
        if self.in_doubt:
            parts.append(f"outcome unknown (in doubt): {_calls(self.in_doubt)}")
        return "; ".join(parts)

    def model_message(self) -> str:
        """What the model is told when a call is refused after the failure.

        Names the failed tool and what is being undone, but not the error text: the SDK keeps
        exception details from the model on purpose (they may carry data or instructions), and so
        do we. The application gets the details from :meth:`summary`.
        """
        failed = ", ".join(dict.fromkeys(f"{f.tool} (call {f.call_id})" for f in self.failures))
        text = (f"Not run: this task failed earlier ({failed or 'saga ' + self.status}), so nothing "
                "more will be changed.")
        if self.to_undo:
            text += f" The changes already made will be undone: {_calls(self.to_undo)}."
        if self.undone:
            text += f" Already undone: {_calls(self.undone)}."
        if self.kept:
            text += f" Cannot be undone: {_calls(self.kept)}."
        if self.in_doubt:
            text += f" Outcome unknown: {_calls(self.in_doubt)}."
        return text + " Do not retry; tell the user what happened."

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for logs and tracing)."""

        def rows(items: tuple[CompensationItem, ...]) -> list[dict[str, Any]]:
            return [{"seq": i.seq, "tool": i.tool, "call_id": i.call_id, "detail": i.detail}
                    for i in items]

        return {
            "saga_id": self.saga_id,
            "status": self.status,
            "failures": [{"seq": f.seq, "tool": f.tool, "call_id": f.call_id, "error": f.error}
                         for f in self.failures],
            "to_undo": rows(self.to_undo),
            "undone": rows(self.undone),
            "kept": rows(self.kept),
            "in_doubt": rows(self.in_doubt),
            "journal_error": self.journal_error,
        }


async def read_verdict(saga: VerdictSource) -> SagaVerdict:
    """Read ``saga``'s verdict from its failures and its journal.

    Never raises for a journal that cannot be read: the verdict then carries
    :attr:`SagaVerdict.journal_error` and counts as failed (fail closed).
    """
    await saga.outcomes_written()  # a call's outcome written behind it is part of the verdict
    status = saga.status.value
    failures = tuple(saga.failures)
    try:
        entries = await authenticated_entries(saga)  # tags checked under a keyring
    except Exception as exc:  # noqa: BLE001 - fail closed, said in the verdict
        return SagaVerdict(saga.saga_id, status, failures, journal_error=describe_error(exc))
    ledger = SagaLedger(entries)
    to_undo: list[CompensationItem] = []
    undone: list[CompensationItem] = []
    kept: list[CompensationItem] = []
    in_doubt = [CompensationItem(e.seq, e.tool, e.call_id, "INTENT without outcome")
                for e in ledger.in_doubt()]
    for call in ledger.calls.values():
        outcome = call.outcome
        # EXECUTED effects, and FAILED calls whose body recorded undo data before failing:
        # compensation undoes both (core/compensation.py).
        if outcome is None or not (
            outcome.phase is Phase.EXECUTED
            or (outcome.phase is Phase.FAILED and isinstance(outcome.payload, dict)
                 and "undo_data" in outcome.payload)
        ):
            continue
        kind = (call.intent.payload or {}).get("reversibility")
        item = CompensationItem(outcome.seq, call.intent.tool, call.intent.call_id, kind or "")
        if kind in (Reversibility.IRREVERSIBLE.value, Reversibility.NO_UNDO.value, UNDECLARED):
            kept.append(item)
        elif kind == Reversibility.COMPENSATABLE.value and (lost := lost_undo_data(outcome.payload)):
            kept.append(CompensationItem(item.seq, item.tool, item.call_id, lost))
        elif kind == Reversibility.COMPENSATABLE.value:
            # Paired per attempt (a timed-out undo's late end counts once): core.compensation.
            state, _ = ledger.undo_state(call)
            if state is UndoState.UNDONE:
                undone.append(item)
            elif state in (UndoState.IN_DOUBT, UndoState.TIMED_OUT):
                in_doubt.append(CompensationItem(
                    item.seq, item.tool, item.call_id,
                    "COMPENSATING without outcome" if state is UndoState.IN_DOUBT
                    else "undo timed out or was cancelled; it may have acted"))
            else:
                to_undo.append(item)
    if any(e.phase is Phase.SAGA_FAILED for e in entries) and status == "OPEN":
        status = "FAILED"
    return SagaVerdict(
        saga_id=saga.saga_id,
        status=status,
        failures=failures,
        to_undo=tuple(reversed(to_undo)),
        undone=tuple(undone),
        kept=tuple(kept),
        in_doubt=tuple(sorted(in_doubt, key=lambda i: i.seq)),
    )
