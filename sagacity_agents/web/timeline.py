"""A saga's timeline as an inline SVG, drawn on the server from its journal entries.

One row per call (a bar from its INTENT to its outcome, coloured by the outcome), per pause
for approval (with its decision), and per undo (COMPENSATING to its outcome: undos come newest
call first); then, dashed, the undos that would run if the saga were compensated now (what a
rejection with ``fail_on_rejection``, or a recovery, would undo). The x axis is the entry's
``seq``. Every text comes from the journal, i.e. from a model: each one goes through
:func:`html.escape`, its invisible and reordering code points shown escaped
(:mod:`sagacity_agents.visible`; highlighted in the label), and the SVG uses classes and
presentation attributes only (no inline
style, no script), so the page's Content-Security-Policy holds.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.compensation import SagaLedger
from ..core.ledger import is_closed
from ..core.declarations import Reversibility
from ..core.entries import JournalEntry, Phase
from ..core.shown import shown_entries
from ..render import phase_name
from ..visible import escape, segments

__all__ = ["Row", "timeline_rows", "timeline_svg"]

ROW = 26
LABEL = 300
WIDTH = 900


@dataclass(frozen=True)
class Row:
    """One bar of the timeline."""

    start: int
    """The seq where the bar starts."""
    end: int
    """The seq where it ends (``start`` for a point; the last seq for something unfinished)."""
    kind: str
    """CSS class: ``executed``, ``failed``, ``refused``, ``in-doubt``, ``awaiting``,
    ``approved``, ``rejected``, ``undo``, ``undo-failed``, ``would-undo``."""
    label: str
    """What the bar is (unescaped; escaped when drawn)."""
    current: bool = False
    """The pause being decided on this page."""


def _pauses(entries: Sequence[JournalEntry], last: int, current: str | None) -> list[Row]:
    rows = []
    decided: dict[str, JournalEntry] = {}
    for e in entries:
        if e.phase in (Phase.APPROVED, Phase.REJECTED, Phase.CONSUMED) and isinstance(e.payload, dict):
            rid = e.payload.get("request_id")
            if isinstance(rid, str) and (e.phase is not Phase.CONSUMED or rid not in decided):
                decided[rid] = e
    for e in entries:
        if e.phase is not Phase.AWAITING_APPROVAL or not isinstance(e.payload, dict):
            continue
        rid = e.payload.get("request_id")
        outcome = decided.get(rid) if isinstance(rid, str) else None
        if outcome is None:
            kind, word, end = "awaiting", "awaiting approval", last
        elif outcome.phase is Phase.CONSUMED:
            kind, word, end = "awaiting", "consumed undecided", outcome.seq
        else:
            kind = "approved" if outcome.phase is Phase.APPROVED else "rejected"
            who = outcome.payload.get("approver") if isinstance(outcome.payload, dict) else None
            word, end = f"{kind} by {who}", outcome.seq
        rows.append(Row(e.seq, end, kind, f"pause: {e.tool} ({e.call_id}) {word}",
                        current=current is not None and rid == current))
    return rows


def timeline_rows(entries: Sequence[JournalEntry], current_request: str | None = None) -> list[Row]:
    """The rows of a saga's timeline, in the order they are drawn.

    Args:
        entries: the saga's entries in ``seq`` order (their sensitive values are masked here
            whoever read them: ``core.shown``).
        current_request: the request id of the pause being decided (highlighted), if any.
    """
    if not entries:
        return []
    entries = shown_entries(entries)
    last = entries[-1].seq
    ledger = SagaLedger(list(entries))
    rows: list[Row] = []
    would_undo: list[Row] = []
    for call in ledger.calls.values():
        intent, outcome = call.intent, call.outcome
        name = f"{intent.tool} ({intent.call_id})"
        if outcome is None:
            rows.append(Row(intent.seq, last, "in-doubt", f"{name}: no outcome (in doubt or running)"))
            continue
        kind = {"EXECUTED": "executed", "FAILED": "failed", "REFUSED": "refused"}.get(
            phase_name(outcome), "executed")
        rows.append(Row(intent.seq, outcome.seq, kind, f"{name}: {phase_name(outcome)}"))
        for attempt, result in zip(call.attempts, [*call.attempt_outcomes, *[None] * len(call.attempts)]):
            if result is None:
                rows.append(Row(attempt.seq, last, "in-doubt", f"undo {name}: no outcome"))
            else:
                failed = result.phase is Phase.COMPENSATION_FAILED
                rows.append(Row(attempt.seq, result.seq, "undo-failed" if failed else "undo",
                                f"undo {name}: {phase_name(result)}"))
        reversible = isinstance(intent.payload, dict) and \
            intent.payload.get("reversibility") == Reversibility.COMPENSATABLE.value
        done = any(o.phase is Phase.COMPENSATED for o in call.attempt_outcomes)
        if outcome.phase is Phase.EXECUTED and reversible and not done:
            would_undo.append(Row(outcome.seq, outcome.seq, "would-undo",
                                  f"would be undone if compensated: {name}"))
    rows += _pauses(entries, last, current_request)
    rows.sort(key=lambda r: (r.start, r.end))
    closed = is_closed(entries)  # a reopened saga's late effect would be undone too
    return rows + ([] if closed else sorted(would_undo, key=lambda r: -r.start))


def timeline_svg(entries: Sequence[JournalEntry], current_request: str | None = None) -> str:
    """The timeline of ``entries`` as an ``<svg>`` element (escaped; see the module notes)."""
    rows = timeline_rows(entries, current_request)
    last = entries[-1].seq if entries else 1
    span = max(last, 1)
    plot = WIDTH - LABEL - 20
    height = ROW * (len(rows) + 1) + 10

    def x(seq: int) -> float:
        return LABEL + plot * (seq - 1) / span

    parts = [
        (f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
         f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
         f'aria-label="saga timeline, {len(rows)} rows">'),
        f'<text class="axis" x="{LABEL}" y="14">seq 1</text>',
        f'<text class="axis" x="{WIDTH - 20}" y="14" text-anchor="end">seq {last}</text>',
    ]
    for i, row in enumerate(rows):
        y = ROW * (i + 1) + 4
        width = max(x(row.end) - x(row.start), 0.0) + plot / span
        css = f"bar {row.kind}" + (" current" if row.current else "")
        label = html.escape(escape(row.label), quote=True)
        parts.append(
            f'<g class="row"><title>{label} (seq {row.start}..{row.end})</title>'
            f'<text class="label" x="{LABEL - 8}" y="{y + 15}" text-anchor="end">{_svg_text(row.label)}</text>'
            f'<rect class="{css}" x="{x(row.start):.1f}" y="{y}" width="{width:.1f}" height="{ROW - 8}" rx="3"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _svg_text(text: str, limit: int = 44) -> str:
    """``text`` as SVG text: hidden code points escaped in a highlighted ``<tspan>``, the rest
    HTML-escaped, cut to ``limit`` characters as shown (an escape is never cut in half)."""
    out: list[str] = []
    used = 0
    for piece, original in segments(text):
        if used + len(piece) > limit:
            if not original:
                out.append(html.escape(piece[: max(limit - 1 - used, 0)]))
            out.append("…")
            break
        used += len(piece)
        out.append(f'<tspan class="esc">{html.escape(piece)}</tspan>' if original else html.escape(piece))
    return "".join(out)
