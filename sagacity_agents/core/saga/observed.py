"""A journaled call as an observed step (``core.observe``): its attributes at the start, its
outcome *as the journal judged it* at the end (a result ``classify=`` turned into a failure ends
the step in error, while the SDK's own function span shows a success).

What a step carries of the call's values is what the journal holds: once the INTENT and the
outcome are written, their payloads (sensitive values committed) replace the clear arguments,
result and error text, and the argument hash is the hash of the *committed* arguments (a hash
of a clear card number could be brute-forced). Before that (an INTENT that failed) the clear
values are masked by the step itself (``core.observe.Step.shown``, with the tool's declaration)."""

from __future__ import annotations

from typing import Any

from ...errors import EncodingError
from ...errors import describe_error as _describe
from .. import observe
from ..approval import args_hash
from ..declarations import ToolDeclaration
from ..entries import JournalEntry, Phase
from ..identity import Derivation
from ..sensitive import masked
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
    if step is not None:
        step.spec = getattr(decl, "sensitive", None)  # the tool's declaration (core.declarations)
        step.sensitive["sagacity.call.args"] = args  # masked when the step ends (Step.shown)
        step.clear.append(args)  # its sensitive values, masked in the error text (Step.shown)
    return step


def note_intent(step: observe.Step | None, intent: JournalEntry) -> None:
    """The call's INTENT is in the journal: its seq, the hash of its committed arguments and
    the committed arguments themselves (masks at the end) go on the step."""
    if step is None:
        return
    step.attrs["sagacity.call.seq"] = intent.seq
    payload = intent.payload if isinstance(intent.payload, dict) else {}
    if "args" in payload:
        try:  # hashed only for a step someone follows (a few µs)
            step.attrs["sagacity.args.hash"] = args_hash(payload["args"])
        except EncodingError:
            pass
        step.sensitive["sagacity.call.args"] = payload["args"]


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
    written = outcome.payload if outcome is not None and isinstance(outcome.payload, dict) else None
    if written is not None and "result" in written:
        step.sensitive["sagacity.call.result"] = written["result"]  # committed: masks
    elif payload is not None and "result" in payload:
        step.sensitive["sagacity.call.result"] = payload["result"]  # clear: masked by Step.shown
    error = failure.error if failure is not None else (_describe(exc) if exc is not None else None)
    if error is not None and written is not None and isinstance(written.get("error"), (str, dict)):
        error = masked(written["error"])  # the journal's text, its sensitive parts committed
    step.end(error, **{"sagacity.outcome": phase.value if phase is not None else "NOT_RUN",
                       "sagacity.verdict": _verdict(phase, failure, exc)})


def _verdict(phase: Phase | None, failure: FailureRecord | None, exc: BaseException | None) -> str:
    """What the saga made of the call: ``ok``, ``refused`` (no effect, the saga goes on) or
    ``failed`` (the saga fails and compensates)."""
    if failure is not None or exc is not None or phase is None or phase is Phase.FAILED:
        return "failed"
    return "refused" if phase is Phase.REFUSED else "ok"
