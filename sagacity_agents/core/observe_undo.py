"""One undo of a compensation walk as an observed step (``core.observe``): begun before its
COMPENSATING claim, ended with what the walk made of it (read from which report list grew)."""

from __future__ import annotations

from typing import Any

from . import observe
from .entries import JournalEntry

__all__ = ["begin_undo", "end_undo"]


def begin_undo(
    saga_id: str, intent: JournalEntry, target_seq: int, key: str, attempt: int, decl_id: Any,
) -> observe.Step | None:
    """Start the ``"undo"`` step of the undo of entry ``target_seq`` (``None``: unobserved)."""
    if not observe._observers or not observe.followed("undo"):
        return None
    step = observe.begin(
        "undo", **{
            "gen_ai.tool.name": intent.tool,
            "gen_ai.tool.call.id": intent.call_id,
            "sagacity.saga.id": saga_id,
            "sagacity.call.seq": target_seq,
            "sagacity.undo.key": key,
            "sagacity.undo.attempt": attempt,
            "sagacity.declaration.id": decl_id if isinstance(decl_id, str) else None,
        },
    )
    if step is not None and isinstance(intent.payload, dict):
        step.sensitive["sagacity.call.args"] = intent.payload.get("args")
    return step


def end_undo(
    step: observe.Step | None, before: tuple[int, int, int], undone: list[Any], failed: list[Any],
    in_doubt: list[Any],
) -> None:
    """End the step: COMPENSATED, COMPENSATION_FAILED (in error, with the report's text),
    IN_DOUBT (in error: it may have acted) or NOT_RUN (the walk was cancelled)."""
    if step is None:
        return
    if len(undone) > before[0]:
        step.end(**{"sagacity.outcome": "COMPENSATED", "sagacity.verdict": "ok"})
    elif len(failed) > before[1]:
        step.end(failed[-1].detail, **{"sagacity.outcome": "COMPENSATION_FAILED",
                                       "sagacity.verdict": "failed"})
    elif len(in_doubt) > before[2]:
        step.end(in_doubt[-1].detail, **{"sagacity.outcome": "IN_DOUBT",
                                         "sagacity.verdict": "in_doubt"})
    else:
        step.end("cancelled", **{"sagacity.outcome": "NOT_RUN", "sagacity.verdict": "failed"})
