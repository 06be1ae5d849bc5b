"""A saga drawn as a timeline in the terminal (``sagacity saga show``), with rich.

One row per run, per call (INTENT to outcome: its duration, its failure), per undo (COMPENSATING
to its outcome; undos come newest call first, so they read in reverse) and per pause for
approval (AWAITING_APPROVAL to the decision: the human's wait). The bar's position and length
are the entries' ``recorded_at`` on one time axis from the saga's first entry to its last. Every
text comes from the journal, i.e. partly from a model: it goes through :func:`data_text`
(escaped, never markup). The seq range of each row leads back to ``sagacity journal show``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from ..core.compensation import SagaLedger
from ..core.entries import JournalEntry, Phase
from ..core.shown import shown_entries
from ..render import data_text, phase_name, short

__all__ = ["TimelineRow", "timeline_rows", "timeline_table"]

BAR = 30
"""Characters of the time axis."""

_STYLES = {
    "run": "dim", "EXECUTED": "green", "FAILED": "red", "REFUSED": "magenta", "IN_DOUBT": "bold yellow",
    "COMPENSATED": "blue", "COMPENSATION_FAILED": "bold red", "APPROVED": "green",
    "REJECTED": "red", "WAITING": "yellow",
}


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One row of the timeline."""

    kind: str
    """``run``, ``call``, ``undo`` or ``approval``."""
    label: str
    """What the row is (from the journal: escaped when drawn)."""
    outcome: str
    """EXECUTED, FAILED, REFUSED, COMPENSATED, COMPENSATION_FAILED, APPROVED, REJECTED,
    IN_DOUBT (no outcome), WAITING (no decision yet), or a run's status."""
    start: JournalEntry
    """The entry that starts it."""
    end: JournalEntry | None
    """The entry that ends it (``None``: nothing has, yet)."""
    detail: str = ""
    """An error, who decided, ... (from the journal)."""


def _time(entry: JournalEntry) -> dt.datetime:
    return dt.datetime.strptime(entry.recorded_at, "%Y-%m-%dT%H:%M:%S.%fZ")


def _runs(entries: Sequence[JournalEntry]) -> list[TimelineRow]:
    rows: list[TimelineRow] = []
    start: JournalEntry | None = None
    for e in entries:
        if e.phase is Phase.RUN_STARTED:
            start = e
        elif e.phase is Phase.RUN_ENDED and start is not None:
            status = e.payload.get("status") if isinstance(e.payload, dict) else None
            rows.append(TimelineRow("run", _run_label(start), str(status or "?"), start, e))
            start = None
    if start is not None:
        rows.append(TimelineRow("run", _run_label(start), "RUNNING", start, None))
    return rows


def _run_label(start: JournalEntry) -> str:
    agent = start.payload.get("agent") if isinstance(start.payload, dict) else None
    return f"run {agent or ''}".rstrip()


def _pauses(entries: Sequence[JournalEntry]) -> list[TimelineRow]:
    decided = {e.payload.get("request_id"): e for e in entries
               if e.phase in (Phase.APPROVED, Phase.REJECTED) and isinstance(e.payload, dict)}
    rows = []
    for e in entries:
        if e.phase is not Phase.AWAITING_APPROVAL or not isinstance(e.payload, dict):
            continue
        decision = decided.get(e.payload.get("request_id"))
        label = f"⏸ approval {e.tool} ({e.call_id})"
        if decision is None:
            rows.append(TimelineRow("approval", label, "WAITING", e, None))
            continue
        who = decision.payload.get("approver")
        rows.append(TimelineRow("approval", label, phase_name(decision), e, decision, f"by {who}"))
    return rows


def timeline_rows(entries: Sequence[JournalEntry]) -> list[TimelineRow]:
    """The rows of the saga's timeline, in the order they started (by ``seq``).

    Args:
        entries: the saga's entries in ``seq`` order (verified or not: a drawing, not evidence);
            their sensitive values are masked here whoever read them (``core.shown``).
    """
    entries = shown_entries(entries)
    rows = _runs(entries) + _pauses(entries)
    for call in SagaLedger(list(entries)).calls.values():
        intent, outcome = call.intent, call.outcome
        name = f"{intent.tool} ({intent.call_id})"
        if outcome is None:
            rows.append(TimelineRow("call", name, "IN_DOUBT", intent, None))
            continue
        error = outcome.payload.get("error") if isinstance(outcome.payload, dict) else None
        rows.append(TimelineRow("call", name, phase_name(outcome), intent, outcome,
                                short(error, 60) if error else ""))
        results: list[JournalEntry | None] = [*call.attempt_outcomes]
        for attempt, result in zip(call.attempts, results + [None] * len(call.attempts)):
            label = f"↩ undo {intent.tool}"  # the call id is on the call's row
            if result is None:
                rows.append(TimelineRow("undo", label, "IN_DOUBT", attempt, None))
                continue
            error = result.payload.get("error") if isinstance(result.payload, dict) else None
            rows.append(TimelineRow("undo", label, phase_name(result), attempt, result,
                                    short(error, 60) if error else ""))
    rows.sort(key=lambda r: (r.start.seq, r.kind != "run"))
    return rows


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _bar(start: float, end: float, total: float, style: str, open_ended: bool, size: int) -> Text:
    first = min(int(start / total * size), size - 1)
    last = max(min(int(end / total * size), size - 1), first)
    bar = Text(" " * first)
    bar.append("█" * (last - first + 1), style=style)
    if open_ended:
        bar.append("…", style=style)
    return bar


def timeline_table(entries: Sequence[JournalEntry], width: int = 120) -> Table:
    """The saga's timeline as a rich table: seq range, what, outcome, duration, the bar on the
    time axis (from the first entry to the last), and a detail (an error, who decided), cut to
    fit ``width`` columns (the console's) on one line per row."""
    table = Table(header_style="bold", expand=False, box=None, padding=(0, 1))
    for name in ("seq", "what", "outcome", "took"):
        table.add_column(name, justify="right" if name in ("seq", "took") else "left", no_wrap=True)
    if not entries:
        return table
    origin, finish = _time(entries[0]), _time(entries[-1])
    total = max((finish - origin).total_seconds(), 1e-6)
    rows = []
    for row in timeline_rows(entries):
        end = row.end or entries[-1]
        began = (_time(row.start) - origin).total_seconds()
        took = (_time(end) - _time(row.start)).total_seconds()
        word = "waited " if row.kind == "approval" else ""
        rows.append((row, began, took, [
            f"{row.start.seq}-{row.end.seq}" if row.end is not None else f"{row.start.seq}-",
            short(row.label, 30), row.outcome,
            f"{word}{_duration(took)}" + ("+" if row.end is None else ""),
        ]))
    # Measured, not guessed: rich shrinks every column of a table too wide for the console.
    fixed = [max(len(name), *(len(cells[i]) for *_, cells in rows))
             for i, name in enumerate(("seq", "what", "outcome", "took"))]
    room = width - sum(fixed) - 2 * 6 - 1
    bar = max(16, min(BAR, room - 30))  # the detail (an error) gets ~30 columns first
    detail_room = room - bar - 1
    table.add_column(f"0 → {_duration(total)}", no_wrap=True, min_width=bar + 1)
    if detail_room >= 8:
        table.add_column("detail", no_wrap=True)
    for row, began, took, cells in rows:
        style = _STYLES.get(row.outcome, "dim" if row.kind == "run" else "")
        out = [data_text(cells[0]), data_text(cells[1], "dim" if row.kind == "run" else ""),
               Text(cells[2], style=style), data_text(cells[3]),
               _bar(began, began + took, total, style or "white", row.end is None, bar)]
        if detail_room >= 8:
            out.append(data_text(short(row.detail, detail_room) if row.detail else ""))
        table.add_row(*out)
    return table
