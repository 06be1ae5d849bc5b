"""A journaled call as an observed step (``core.observe``): its attributes at the start, its
outcome *as the journal judged it* at the end (a result ``classify=`` turned into a failure ends
the step in error, while the SDK's own function span shows a success)."""

from __future__ import annotations

from typing import Any

from ...errors import EncodingError
from ...errors import describe_error as _describe
from .. import observe
from ..approval import args_hash
from ..declarations import ToolDeclaration
from ..entries import JournalEntry, Phase
from ..identity import Derivation
from .payloads import REVERSIBILITY_TEXT, UNDECLARED
from .status import FailureRecord

__all__ = ["begin_call", "end_call", "note_intent"]


def begin_call(
    saga_id: str, decl: ToolDeclaration | None, tool: str, call_id: str | None,
    args: dict[str, Any], agent: str | None,
) -> observe.Step | None:
    """Start the ``"call"`` step of one wrapped call (``None``: nobody observes it)."""
    if not observe._observers or not observe.followed("call"):  # the hot path: nothing built
        return None
    step = observe.begin(
        "call", **{
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "sagacity.saga.id": saga_id,
            "sagacity.declaration.id": decl.declaration_id if decl is not None else None,
            "sagacity.reversibility": REVERSIBILITY_TEXT[decl.reversibility] if decl else UNDECLARED,
            "sagacity.agent": agent,
        },
    )
    if step is not None:  # hashed only for a step someone follows (a few µs)
        try:
            step.attrs["sagacity.args.hash"] = args_hash(args)
        except EncodingError:
            pass  # the INTENT will fail closed on the same arguments
        step.sensitive["sagacity.call.args"] = args
    return step


def note_intent(step: observe.Step | None, intent: JournalEntry) -> None:
    """The call's INTENT is in the journal: its seq goes on the step."""
    if step is not None:
        step.attrs["sagacity.call.seq"] = intent.seq


def end_call(
    step: observe.Step | None, phase: Phase | None, payload: dict[str, Any] | None,
    failure: FailureRecord | None, exc: BaseException | None = None,
    outcome: JournalEntry | None = None, derivation: Derivation | None = None,
) -> None:
    """End the call's step: ``phase`` is the outcome journaled (``None``: none, e.g. the INTENT
    failed), ``failure`` the saga's failure record when the call failed the saga, ``outcome``
    the outcome entry when it was written before the step ended (its seq, and for an undoable
    effect the undo's idempotency key under the saga's ``derivation``, go on the step)."""
    if step is None:
        return
    if outcome is not None:
        step.attrs["sagacity.outcome.seq"] = outcome.seq
        if phase is Phase.EXECUTED and step.attrs.get("sagacity.reversibility") == "compensatable":
            step.attrs["sagacity.undo.key"] = (derivation or Derivation()).undo_key(outcome.saga_id, outcome.seq)
    if payload is not None and "result" in payload:
        step.sensitive["sagacity.call.result"] = payload["result"]
    error = failure.error if failure is not None else (_describe(exc) if exc is not None else None)
    step.end(error, **{"sagacity.outcome": phase.value if phase is not None else "NOT_RUN",
                       "sagacity.verdict": _verdict(phase, failure, exc)})


def _verdict(phase: Phase | None, failure: FailureRecord | None, exc: BaseException | None) -> str:
    """What the saga made of the call: ``ok``, ``refused`` (no effect, the saga goes on) or
    ``failed`` (the saga fails and compensates)."""
    if failure is not None or exc is not None or phase is None or phase is Phase.FAILED:
        return "failed"
    return "refused" if phase is Phase.REFUSED else "ok"
