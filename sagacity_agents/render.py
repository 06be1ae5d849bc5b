"""Rich renderings of journal entries, shared by the CLI (``sagacity journal ...``) and the demo.

Read-only helpers: they take :class:`~sagacity_agents.core.entries.JournalEntry` lists and
:class:`~sagacity_agents.core.chain.VerifyResult` values and return rich renderables or text.

Journal data is untrusted (payloads come from models and tools, and anyone with write access can
edit the file): every string taken from it goes through :func:`printable`, which escapes control
characters, and into a :class:`~rich.text.Text`, never a markup string, so it can neither drive
the terminal nor break rich markup.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .core.chain import VerifyResult
from .core.entries import JournalEntry, Phase
from .core.lease import lease_of
from .core.ledger import reopened_by
from .core.observe import TRACE_KEY
from .core.shown import shown_entries
from .visible import escape, segments

__all__ = [
    "COMPACT_BELOW",
    "ESCAPE_STYLE",
    "NEST_INDENT",
    "PHASE_STYLES",
    "adoption_lines",
    "call_depths",
    "data_text",
    "journal_table",
    "make_console",
    "print_lines",
    "phase_name",
    "reopened_text",
    "phase_text",
    "printable",
    "saga_status",
    "short",
    "status_text",
    "summarize_payload",
    "verify_text",
]

PHASE_STYLES: dict[str, str] = {
    Phase.SAGA_OPENED.value: "dim",
    Phase.RUN_STARTED.value: "dim",
    Phase.LEASE_RENEWED.value: "dim",
    Phase.RUN_ENDED.value: "dim",
    Phase.CONSUMED.value: "cyan",
    Phase.REQUEST_VOIDED.value: "dim cyan",
    Phase.INTENT.value: "yellow",
    Phase.EXECUTED.value: "green",
    Phase.REFUSED.value: "magenta",
    Phase.FAILED.value: "red",
    Phase.AWAITING_APPROVAL.value: "bold yellow",
    Phase.APPROVED.value: "green",
    Phase.REJECTED.value: "magenta",
    Phase.SAGA_FAILED.value: "dim red",
    Phase.COMPENSATING.value: "cyan",
    Phase.COMPENSATED.value: "blue",
    Phase.COMPENSATION_FAILED.value: "bold red",
    Phase.RESOLVED.value: "bold cyan",
    Phase.CHECKED.value: "cyan",
    Phase.SAGA_CLOSED.value: "dim",
}
"""Style of each phase name in tables (saga-level phases are dim)."""

STATUS_STYLES: dict[str, str] = {
    "COMPLETED": "green",
    "OPEN": "yellow",
    "COMPENSATED": "blue",
    "COMPENSATION_FAILED": "bold red",
    "IN_DOUBT": "bold red",
    "AWAITING_APPROVAL": "bold yellow",
    "LEASE_LOST": "bold red",
    "REOPENED": "bold red",
}


def printable(value: object) -> str:
    """``str(value)`` with every control, format, separator and otherwise invisible code point
    escaped (``\\n``, ``\\t``, ``\\r``, else ``\\u202e``-style; the rule of
    :mod:`sagacity_agents.visible`, shared with the web inbox), so data from the journal can
    neither move the cursor, recolour the terminal, set its title or split a table row, nor
    reorder or hide what an approver reads (bidi overrides, zero-width characters).

    Args:
        value: any value; ``None`` becomes ``""``.

    Returns:
        The escaped text.
    """
    return escape(value)


ESCAPE_STYLE = "reverse"
"""How an escaped code point is highlighted in rich output."""


def data_text(value: object, style: str = "") -> Text:
    """Journal data as a :class:`~rich.text.Text`: escaped by :func:`printable` (each escape
    highlighted in :data:`ESCAPE_STYLE`), no markup."""
    text = Text(style=style)
    if value is None:
        return text
    for piece, escaped in segments(str(value)):
        text.append(piece, style=ESCAPE_STYLE if escaped else None)
    return text


PIPE_WIDTH = 160
"""Console width used when output is not a terminal and ``COLUMNS`` is unset."""


def make_console(**kwargs: Any) -> Console:
    """A rich console for command output: the terminal's width; ``COLUMNS`` or
    :data:`PIPE_WIDTH` when writing to a pipe or file (so tables are not squeezed to 80)."""
    console = Console(**kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=PIPE_WIDTH, **kwargs)
    return console


def print_lines(console: Console, lines: Iterable[Text]) -> None:
    """Print ``lines``, one per line, as ``console.print`` prints each: written plain in one write
    where the console renders no style (a pipe or a file: ``color_system`` is ``None``) and every
    line fits its width, so rich would add nothing to the text; through ``console.print``
    otherwise. Rich spends ~250 us per ``print`` call, most of ``journal verify``'s time on a
    journal of small sagas (issue 37: verify at read speed through the CLI too).

    Args:
        console: where to print (``make_console``).
        lines: the lines, rich ``Text`` without newlines.
    """
    lines = list(lines)
    plain = [line.plain for line in lines]
    if console.color_system is None and all(len(text) <= console.width and "\n" not in text for text in plain):
        console.file.write("".join(f"{text}\n" for text in plain))
        console.file.flush()
        return
    for line in lines:
        console.print(line)


def phase_name(entry: JournalEntry) -> str:
    """The entry's phase as a string (storage may hold a phase this version does not know)."""
    return entry.phase.value if isinstance(entry.phase, Phase) else str(entry.phase)


def phase_text(name: str) -> Text:
    """A phase name, coloured (escaped: storage may hold any string)."""
    return data_text(name, PHASE_STYLES.get(name, ""))


def status_text(status: str) -> Text:
    """A saga status, coloured (escaped: it may come from a payload)."""
    return data_text(status, STATUS_STYLES.get(status.split(" ")[0], ""))


def short(value: Any, limit: int = 60) -> str:
    """Compact JSON for a value (strings as they are), cut to ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kv(mapping: dict[str, Any], limit: int = 70) -> str:
    return short(", ".join(f"{k}={short(v, 40)}" for k, v in mapping.items()), limit)


def _report_summary(report: dict[str, Any]) -> str:
    parts = []
    for key in ("undone", "failed", "no_undo", "kept_irreversible", "in_doubt", "approved_not_run",
                "contradicted"):
        rows = report.get(key) or []
        if rows:
            parts.append(f"{key}: " + ", ".join(f"{r.get('tool')}#{r.get('seq')}" for r in rows))
    return "; ".join(parts)


def summarize_payload(entry: JournalEntry) -> str:
    """A one-line, human-readable summary of an entry's payload."""
    p = entry.payload if isinstance(entry.payload, dict) else {}
    name = phase_name(entry)
    if entry.payload is None:
        return ""
    if name == Phase.SAGA_OPENED.value:
        return _kv(p["metadata"]) if p.get("metadata") else "(no metadata)"
    if name == Phase.RUN_STARTED.value:
        text = f"agent {p.get('agent')!s}"
        if p.get("holder"):
            text += f", lease {p.get('lease_seconds')} s held by {p.get('holder')}"
        if isinstance(p.get("took_over"), dict):
            text += f" (took over expired lease of {p['took_over'].get('holder')})"
        if isinstance(p.get("durable_outcomes"), bool):
            text += ("; outcomes durable at once" if p["durable_outcomes"]
                     else "; outcomes durable with the next commit")
        return text
    if name in (Phase.RUN_ENDED.value, Phase.LEASE_RENEWED.value):
        return f"{p.get('status', 'renewed')} (holder {p.get('holder')})"
    if name == Phase.CONSUMED.value:
        return f"request {p.get('request_id')} {p.get('decision', '')}, args sha256 {p.get('args_hash')}"
    if name == Phase.REQUEST_VOIDED.value:
        return f"request {p.get('request_id')} voided: {short(p.get('reason', ''), 60)}"
    if name == Phase.INTENT.value:
        args = p.get("args")
        # A call journaled from outside its body (undeclared, protect_tool) has ``args == {}``
        # and its arguments in ``raw_args``: show those.
        raw = p.get("raw_args")
        text = short(raw) if isinstance(raw, str) and (not isinstance(args, dict) or not args) \
            else _kv(args) if isinstance(args, dict) else ""
        return f"{text}  [{p.get('reversibility', '?')}]"
    if name in (Phase.EXECUTED.value, Phase.REFUSED.value):
        text = f"-> {short(p.get('result'), 50)}"
        if p.get("result_type") == "bytes":
            text += " (bytes, base64)"
        if "undo_data" in p:
            text += f"  undo_data {short(p['undo_data'], 40)}"
        return text
    if name == Phase.FAILED.value:
        return short(p.get("error", ""), 90)
    if name == Phase.SAGA_FAILED.value:
        return short(p.get("reason", ""), 90)
    if name == Phase.COMPENSATING.value:
        key = short(p.get("idempotency_key") or "", 16)
        return f"undo of seq {p.get('target_seq')}, attempt {p.get('attempt')}, key {key}"
    if name == Phase.COMPENSATED.value:
        return f"seq {p.get('target_seq')} undone"
    if name == Phase.COMPENSATION_FAILED.value:
        return f"undo of seq {p.get('target_seq')} failed: {short(p.get('error', ''), 70)}"
    if name == Phase.RESOLVED.value:
        answer = "ran" if p.get("answer") == "ran" else "did not run"
        return (f"{p.get('target')} at seq {p.get('target_seq')} {answer}, says {p.get('resolver')}: "
                f"{short(p.get('reason', ''), 60)}"
                + (" (forced)" if p.get("forced") else "")
                + (f"; undo data {short(p.get('undo_data'), 40)}" if "undo_data" in p else ""))
    if name == Phase.CHECKED.value:
        return (f"call at seq {p.get('target_seq')}: far-side check says {p.get('verdict')} "
                f"({p.get('checker')})" + (f": {short(p.get('error', ''), 50)}" if p.get("error") else ""))
    if name == Phase.SAGA_CLOSED.value:
        report = _report_summary(p.get("report") or {})
        return f"status {p.get('status')}" + (f"; {report}" if report else "")
    if isinstance(p.get("args_hash"), str):
        # Approval entries: the hash is what a human compares with the request, so it is
        # printed whole, never cut with the rest of the summary.
        rest = {k: v for k, v in p.items() if k not in ("args_hash", "snapshot_sha256")}
        return f"{_kv(rest, 90)}  args_hash {p['args_hash']}"
    return short(entry.payload, 90)


def saga_status(entries: Sequence[JournalEntry]) -> str:
    """The final status from SAGA_CLOSED; ``REOPENED (...: recover it)`` when a late outcome
    follows it (``core.ledger.reopened_by``); for an open saga the status its last run ended
    with (``IN_DOUBT (open: recover it)``, ``AWAITING_APPROVAL (open)``...), ``RUNNING`` while
    a run holds an unexpired lease, else ``OPEN (last PHASE)``; ``empty`` for no entries."""
    if not entries:
        return "empty"
    reopened = reopened_by(entries)
    if reopened is not None:
        return reopened_text(reopened)
    for entry in reversed(entries):
        if phase_name(entry) == Phase.SAGA_CLOSED.value and isinstance(entry.payload, dict):
            return str(entry.payload.get("status", "CLOSED"))
    last = entries[-1]
    if phase_name(last) == Phase.RUN_ENDED.value and isinstance(last.payload, dict):
        status = str(last.payload.get("status", "OPEN"))
        if status in ("IN_DOUBT", "COMPENSATION_FAILED"):
            return f"{status} (open: recover it)"
        return status if status == "OPEN" else f"{status} (open)"
    try:
        lease = lease_of(entries)
    except (ValueError, TypeError):  # a malformed stamp: show the plain state
        lease = None
    if lease is not None and lease.held():
        return f"RUNNING (last {phase_name(last)})"
    return f"OPEN (last {phase_name(last)})"


def reopened_text(reopened: tuple[int, int]) -> str:
    """The status shown for a reopened saga, from ``core.ledger.reopened_by``'s pair."""
    return (f"REOPENED (late outcome seq {reopened[1]} after SAGA_CLOSED seq {reopened[0]}: "
            "recover it)")


COMPACT_BELOW = 120
"""Console widths below this get the compact journal layout (payload under the phase)."""


def _time(stamp: str, compact: bool) -> str:
    return stamp[11:23] if compact else stamp.replace("T", " ").rstrip("Z")


NEST_INDENT = "  "
"""Indentation per nesting level of a call made inside another call (a nested agent run)."""


def call_depths(entries: Sequence[JournalEntry]) -> dict[int, int]:
    """Nesting depth by ``seq`` of every tool entry: 0 for a call of the run's own agent, one more
    per enclosing call (an INTENT's ``parent_intent_seq``); outcomes take their INTENT's depth.

    Args:
        entries: one saga's entries in ``seq`` order (payloads are untrusted: a parent that is
            not an earlier INTENT counts as none).
    """
    depths: dict[int, int] = {}
    for e in entries:
        p = e.payload if isinstance(e.payload, dict) else {}
        if phase_name(e) == Phase.INTENT.value:
            parent = p.get("parent_intent_seq")
            depths[e.seq] = depths[parent] + 1 if isinstance(parent, int) and parent in depths else 0
        elif isinstance(p.get("intent_seq"), int) and p["intent_seq"] in depths:
            depths[e.seq] = depths[p["intent_seq"]]
    return depths


def _journal_columns(table: Table, compact: bool, full: bool, width: int | None) -> bool:
    """Add :func:`journal_table`'s columns but the span's; whether the hash goes in the entry
    cell (compact and full: a whole hash gets its own line there)."""
    table.add_column("seq", justify="right", no_wrap=True)
    if compact:
        table.add_column("entry", overflow="fold", min_width=20)
        table.add_column("time (UTC)", no_wrap=True)
    else:
        table.add_column("phase", no_wrap=True)
        table.add_column("tool", no_wrap=True)
        table.add_column("call id", no_wrap=True)
        table.add_column("recorded at (UTC)", no_wrap=True)
        table.add_column("payload", overflow="fold", min_width=24)
    hash_in_entry = compact and full
    if not hash_in_entry:
        whole_hash = full and (width is None or width >= 180)
        table.add_column("hash", no_wrap=not full or whole_hash, overflow="fold",
                         min_width=64 if whole_hash else None)
    return hash_in_entry


def journal_table(
    entries: Sequence[JournalEntry],
    *,
    title: str | None = None,
    full: bool = False,
    width: int | None = None,
    revealed: bool = False,
) -> Table:
    """One saga's entries as a table: seq, phase, tool, call id, time, payload summary, hash.

    A call made inside another call (a nested agent run) is indented under it, with its outcome
    (:func:`call_depths`).

    Args:
        entries: the saga's entries in ``seq`` order.
        title: table title.
        full: show the whole payload as JSON instead of a summary, and the whole hash.
        width: the console width; below :data:`COMPACT_BELOW` the phase, tool, call id and
            payload share one column (the payload on its own line) and times lose their date.
        revealed: the payloads hold values revealed on purpose (``journal show --reveal``):
            shown as they are. Otherwise every sensitive value is shown as its mask
            (``core.shown.shown_entries``), whoever read the entries.
    """
    if not revealed:
        entries = shown_entries(entries)
    compact = width is not None and width < COMPACT_BELOW
    table = Table(title=title, title_justify="left", header_style="bold", expand=False)
    hash_in_entry = _journal_columns(table, compact, full, width)
    spans = {e.seq: span_of(e) for e in entries}
    with_span = not compact and any(spans.values())
    if with_span:
        table.add_column("span", no_wrap=True)  # the trace's span that wrote it (trace_lines)
    depths = call_depths(entries)
    for e in entries:
        name = phase_name(e)
        depth = depths.get(e.seq, 0)
        tool = f"{NEST_INDENT * depth}└ {printable(e.tool)}" if depth and e.tool else printable(e.tool)
        payload = printable(
            json.dumps(e.payload, ensure_ascii=False, sort_keys=True) if full else summarize_payload(e)
        )
        hash_cell = data_text(e.hash if full else e.hash[: 8 if compact else 12])
        seq_cell = data_text(e.seq)
        row_style = "dim" if PHASE_STYLES.get(name, "").startswith("dim") else None
        if compact:
            cell = phase_text(name)
            for part in (tool, printable(e.call_id)):
                if part:
                    cell.append(f"  {part}")
            if payload:
                cell.append(f"\n{payload}", style="default")
            if spans[e.seq]:
                cell.append(f"\n{printable(spans[e.seq])}", style="dim")
            time_cell = data_text(_time(e.recorded_at, True))
            if hash_in_entry:
                cell.append(f"\nhash {printable(e.hash)}", style="dim")
                table.add_row(seq_cell, cell, time_cell, style=row_style)
            else:
                table.add_row(seq_cell, cell, time_cell, hash_cell, style=row_style)
        else:
            table.add_row(
                seq_cell,
                phase_text(name),
                Text(tool),
                data_text(e.call_id),
                data_text(_time(e.recorded_at, False)),
                Text(payload),
                hash_cell,
                *([data_text(spans[e.seq] or "")] if with_span else []),
                style=row_style,
            )
    return table


def _link(entry: JournalEntry) -> dict[str, Any]:
    link = entry.payload.get(TRACE_KEY) if isinstance(entry.payload, dict) else None
    return link if isinstance(link, dict) else {}


def span_of(entry: JournalEntry) -> str | None:
    """The span that wrote ``entry`` (``core.observe.TRACE_KEY``): the SDK's span id, else the
    OTel one (``otel:`` + 16 hex), else ``None``."""
    link = _link(entry)
    span = link.get("span_id") or (f"otel:{link['otel_span_id']}" if link.get("otel_span_id") else None)
    return span if isinstance(span, str) else None


def trace_lines(entries: Sequence[JournalEntry]) -> list[Text]:
    """One line per trace the saga's entries were written in: its ids (the SDK's, the OTel one)
    and the entries' seqs, so a trace leads to the journal and back (docs/observability.md)."""
    seqs: dict[tuple[str, str], list[int]] = {}
    for e in entries:
        link = _link(e)
        key = (str(link.get("trace_id") or ""), str(link.get("otel_trace_id") or ""))
        if any(key):
            seqs.setdefault(key, []).append(e.seq)
    lines = []
    for (sdk, otel), found in seqs.items():
        text = Text("trace ", style="bold")
        text.append_text(data_text(sdk or "-"))
        if otel:
            text.append("  otel ")
            text.append_text(data_text(otel))
        text.append(f"  seq {_ranges(found)}")
        lines.append(text)
    return lines


def _ranges(seqs: list[int]) -> str:
    parts: list[str] = []
    start = prev = seqs[0]
    for n in [*seqs[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(parts)


def adoption_lines(adoption: Any) -> list[str]:
    """What ``journal verify --keyring`` says about the journal's keyring adoption
    (``core.authenticity.Adoption`` or ``None``: the reserved saga is empty): which adoption
    counts, and every row or adoption of the reserved saga that was ignored, and why."""
    if adoption is None:
        return []
    if adoption.adopted:
        lines = [(f"keyring adoption {printable(adoption.adoption_id)}: {len(adoption.heads)} saga(s) "
                  "listed as written before the keyring")]
    else:
        lines = ["keyring adoption: none counts; every untagged entry is BROKEN under the keyring"]
    return lines + [f"keyring adoption: {printable(note)}" for note in adoption.notes]


def verify_text(result: VerifyResult) -> Text:
    """``verify: ok ...`` or ``verify: BROKEN ...`` for one saga (saga id and detail escaped).

    An ok chain checked against an anchored head says ``anchored seq N matches``.
    """
    saga_id = printable(result.saga_id)
    if result.ok:
        text = Text("verify: ", style="bold")
        text.append("ok", style="bold green")
        head = printable(result.head[:16]) if result.head else "-"
        text.append(f"  saga {saga_id}  {result.entries} entries, head {head}")
        if result.anchor is not None:
            text.append(f", anchored seq {result.anchor.seq} matches")
        if result.unauthenticated:
            text.append(f", {result.unauthenticated} unauthenticated, before the keyring")
        return text
    text = Text("verify: ", style="bold")
    text.append("BROKEN", style="bold red")
    fault = result.fault.value if result.fault is not None else "?"
    text.append(f"  saga {saga_id}  at seq {result.bad_seq}: {fault}: {printable(result.detail)}")
    return text
