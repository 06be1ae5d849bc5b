"""What the API returns and the pages show: approval requests and sagas as plain data.

The same dictionaries feed the JSON API (:mod:`.api`, typed by :mod:`.models`) and the HTML
templates, so a page never shows what the API would not say. Values are returned as stored:
escaping is the template's job (Jinja2 autoescape, and :func:`visible_html` for every value a
template shows: :mod:`sagacity_agents.visible`) and JSON's. ``hidden_characters`` names the
invisible, control and reordering code points a request's values hold (the page warns).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from ..core.approval import ApprovalRequest, args_hash
from ..core.approval_args import shown_args
from ..core.canonical import canonical_bytes
from ..core.chain import VerifyResult
from ..core.entries import JournalEntry, Phase
from ..core.journal import LATE_KEY, SagaSummary
from ..core.ledger import reopened_by
from ..core.scrub import Scrubber
from ..errors import EncodingError
from ..render import phase_name, reopened_text, saga_status
from ..visible import code_point_name, hidden, hidden_in, segments

__all__ = ["age_text", "entry_view", "request_state", "request_view", "saga_view",
           "saga_views", "summary_status", "verify_view", "visible_html"]

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _parse(stamp: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(stamp, _FORMAT).replace(tzinfo=dt.UTC) if stamp else None
    except ValueError:
        return None


def visible_html(value: object) -> object:
    """A template value as HTML where every hidden code point (:mod:`sagacity_agents.visible`)
    is an escape such as ``\\u202e`` in a highlighted ``<span class="esc">`` naming it; the rest
    HTML-escaped. Markup and non-strings are returned unchanged (autoescape handles them): the
    templates' ``finalize``, so every ``{{ value }}`` goes through it."""
    if isinstance(value, Markup) or not isinstance(value, str) or not any(hidden(c) for c in value):
        return value
    html = Markup()
    for piece, original in segments(value):
        if original:
            html += Markup('<span class="esc" title="{}">{}</span>').format(code_point_name(original), piece)
        else:
            html += escape(piece)
    return html


def age_text(seconds: float | None) -> str:
    """``seconds`` for people: ``42 s``, ``17 min``, ``5 h``, ``3 d`` (``""`` for ``None``)."""
    if seconds is None:
        return ""
    s = int(abs(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 3 * 86400:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


def request_state(request: ApprovalRequest, now: dt.datetime) -> str:
    """``pending``, ``approved``, ``rejected``, ``consumed`` or ``expired``."""
    if request.consumed_at:
        return "consumed"
    if request.decision:
        return request.decision
    if request.expired(now):
        return "expired"
    return "pending"


def request_view(request: ApprovalRequest, now: dt.datetime, *, reversibility: str | None = None,
                 full: bool = False,
                 shown: tuple[Any, str | None, bool] | None = None) -> dict[str, Any]:
    """One request as data; ``full`` adds the canonical JSON text and whether the arguments
    still hash to the recorded hash (``hash_ok``: computed from the stored, committed arguments,
    so with no key). ``shown``: what the approver may see of the arguments
    (``core.approval_args.approver_view``: clear only where the key is); default: masked."""
    created, expires = _parse(request.created_at), _parse(request.expires_at)
    args, raw_args, clear = shown or shown_args(request.args, request.raw_args, None, None)
    view: dict[str, Any] = {
        "request_id": request.request_id, "saga_id": request.saga_id, "call_id": request.call_id,
        "tool": request.tool, "reversibility": reversibility, "args": args,
        "raw_args": raw_args, "args_clear": clear, "args_version": request.args_version,
        "args_hash": request.args_hash,
        "created_at": request.created_at, "expires_at": request.expires_at,
        "age_seconds": (now - created).total_seconds() if created else None,
        "expires_in_seconds": (expires - now).total_seconds() if expires else None,
        "state": request_state(request, now), "decision": request.decision,
        "approver": request.approver, "reason": request.reason,
        "decided_at": request.decided_at, "consumed_at": request.consumed_at,
        "hidden_characters": hidden_in((request.request_id, request.saga_id, request.tool,
                                        request.call_id, args, raw_args,
                                        request.reason, request.approver)),
    }
    if full:
        try:
            view["canonical_json"] = canonical_bytes(request.args).decode("utf-8")
            view["hash_ok"] = args_hash(request.args) == request.args_hash
        except EncodingError:
            view["canonical_json"], view["hash_ok"] = None, False
    return view


def summary_status(summary: SagaSummary) -> str:
    """A listed saga's status from its last entry: the closed status, the status its last run
    ended with (``... (open)``), else ``OPEN (last PHASE)`` (unverified, as listed)."""
    last = summary.last
    payload = last.payload if isinstance(last.payload, dict) else {}
    if last.phase is Phase.SAGA_CLOSED:
        return str(payload.get("status", "CLOSED"))
    if last.phase is Phase.RUN_ENDED:
        status = str(payload.get("status", "OPEN"))
        return status if status == "OPEN" else f"{status} (open)"
    return f"OPEN (last {phase_name(last)})"


async def saga_views(journal: Any, summaries: Sequence[SagaSummary]) -> list[dict[str, Any]]:
    """Listed sagas as data (:func:`saga_view`). A saga whose last entry is a late outcome may
    be REOPENED (that outcome followed its SAGA_CLOSED, ``core.ledger.reopened_by``): the
    summary cannot tell, so that saga alone is read whole (rare: a stalled holder's outcome).

    Raises:
        JournalError: such a saga could not be read.
    """
    views = []
    for summary in summaries:
        view = saga_view(summary)
        last = summary.last
        if isinstance(last.payload, dict) and last.payload.get(LATE_KEY) is True:
            reopened = reopened_by(await journal.entries(summary.saga_id))
            if reopened is not None:
                view["status"] = reopened_text(reopened)
        views.append(view)
    return views


def saga_view(summary: SagaSummary) -> dict[str, Any]:
    """A listed saga as data."""
    return {"saga_id": summary.saga_id, "status": summary_status(summary),
            "entry_count": summary.entry_count, "first_recorded_at": summary.first.recorded_at,
            "last_recorded_at": summary.last.recorded_at, "last_phase": phase_name(summary.last)}


def saga_detail_status(entries: Sequence[JournalEntry]) -> str:
    """The status ``sagacity journal list`` shows for a saga (its whole chain read)."""
    return saga_status(entries)


def entry_view(entry: JournalEntry) -> dict[str, Any]:
    """One journal entry as data: the payload as stored, its sensitive values as their masks
    (``core.shown``: callers pass entries :func:`~sagacity_agents.core.shown.read_shown` read,
    for ``[erased]`` and values quoted across entries; masked here again whoever read them)."""
    return {"seq": entry.seq, "phase": phase_name(entry), "tool": entry.tool,
            "call_id": entry.call_id, "write_key": entry.write_key,
            "recorded_at": entry.recorded_at, "prev_hash": entry.prev_hash, "hash": entry.hash,
            "payload": Scrubber().payload(entry.payload)}


def verify_view(result: VerifyResult | None, saga_id: str) -> dict[str, Any]:
    """A verification result as data (``None``: the saga has no entries)."""
    if result is None:
        return {"saga_id": saga_id, "ok": False, "entries": 0, "head": None, "bad_seq": None,
                "fault": "missing", "detail": "no entries"}
    return {"saga_id": result.saga_id, "ok": result.ok, "entries": result.entries,
            "head": result.head, "bad_seq": result.bad_seq,
            "fault": result.fault.value if result.fault else None, "detail": result.detail}
