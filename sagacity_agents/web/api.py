"""The REST API under ``/api``: approvals (list, show, approve, reject, count), sagas (list,
show, entries, verify) and the caller (``/api/me``). JSON in and out; errors are
``{"error": {"code": ..., "message": ...}}`` with the codes of ``web/decisions.py``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Query, Request

from ..core.approval_args import approver_view, data_keys_of
from ..core.entries import Phase
from ..core.shown import read_shown
from .decisions import Refused, decide
from .models import (
    ApprovalOut,
    ApprovalPage,
    CountOut,
    DecisionIn,
    DecisionOut,
    EntryOut,
    ErrorOut,
    MeOut,
    SagaDetailOut,
    SagaPage,
    VerifyOut,
)
from .views import entry_view, request_view, saga_detail_status, saga_views, verify_view

__all__ = ["router"]

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "`unauthenticated`: no identity"},
    403: {"model": ErrorOut, "description": "`forbidden` (the authenticator refused) or "
          "`csrf_failed` (a POST without the session's CSRF token, or cross-origin)"},
    405: {"model": ErrorOut, "description": "`method_not_allowed`"},
    422: {"model": ErrorOut, "description": "`invalid_request`: a malformed body or parameter"},
    503: {"model": ErrorOut, "description": "`storage_unavailable`: the journal or the approval "
          "store cannot be reached"},
}
"""Errors every route may answer (``http_error`` is any other HTTP status Starlette raises)."""

DECISION_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "`not_found`"},
    409: {"model": ErrorOut, "description": "`hash_mismatch`, `already_decided`, `saga_closed`, "
          "`request_consumed`, `saga_not_verified`, `signing_key_required`, `decision_refused`"},
    410: {"model": ErrorOut, "description": "`request_expired`"},
    422: {"model": ErrorOut, "description": "`reason_required` or `invalid_request`"},
}
"""What a decision may answer besides :data:`ERRORS`."""

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut, "description": "`not_found`"}}

router = APIRouter(prefix="/api", responses=ERRORS)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _inbox(request: Request) -> Any:
    return request.app.state.inbox


async def reversibilities(sagacity: Any, saga_ids: set[str]) -> dict[str, str]:
    """Each request's journaled reversibility (by request id), for the sagas ``saga_ids``."""
    kinds: dict[str, str] = {}
    for saga_id in saga_ids:
        for e in await sagacity.journal.entries(saga_id):
            if e.phase is Phase.AWAITING_APPROVAL and isinstance(e.payload, dict):
                rid, kind = e.payload.get("request_id"), e.payload.get("reversibility")
                if isinstance(rid, str) and isinstance(kind, str):
                    kinds[rid] = kind
    return kinds


async def reversibility_of(sagacity: Any, saga_id: str, request_id: str) -> str | None:
    """The tool's reversibility journaled when the run paused (the journal, not the store)."""
    return (await reversibilities(sagacity, {saga_id})).get(request_id)


async def shown_request(inbox: Any, request_id: str) -> dict[str, Any]:
    """A request's full view, with its journaled reversibility.

    Raises:
        Refused: ``not_found``.
    """
    stored = await inbox.sagacity.approvals.get(request_id)
    if stored is None:
        raise Refused(404, "not_found", f"no approval request {request_id!r}")
    kind = await reversibility_of(inbox.sagacity, stored.saga_id, request_id)
    return request_view(stored, _now(), reversibility=kind, full=True,
                        shown=await approver_view(stored, inbox.sagacity.journal,
                                                  data_keys_of(inbox.sagacity)))


@router.get("/me", response_model=MeOut, summary="The caller and its CSRF token")
async def me(request: Request) -> dict[str, Any]:
    """Who the server thinks the caller is (journaled as the approver) and the CSRF token to
    send as ``X-CSRF-Token`` with each POST (not needed with a bearer token)."""
    caller = request.state.caller
    return {"identity": caller.identity, "csrf_token": _inbox(request).sessions.csrf_token(caller)}


@router.get("/approvals", response_model=ApprovalPage, summary="List approval requests")
async def list_approvals(
    request: Request,
    state: str = Query("pending", pattern="^(pending|expired|decided|all)$",
                       description="pending: awaiting a decision, not expired; expired: undecided "
                       "past its expiry; decided: decided, not yet used by a resume; all: every "
                       "request"),
    saga_id: str | None = Query(None, description="only this saga's requests"),
    offset: int = Query(0, ge=0), limit: int = Query(50, ge=1, le=500),
) -> dict[str, Any]:
    """Requests oldest first, each with its journaled reversibility. Cost: one read of the
    store's requests (of the saga if given), and of the journal of each saga on the page."""
    inbox = _inbox(request)
    now = _now()
    requests = await inbox.sagacity.approvals.list(saga_id, pending_only=state in ("pending", "expired"))
    if state == "pending":
        requests = [r for r in requests if not r.expired(now)]
    elif state == "expired":
        requests = [r for r in requests if r.expired(now)]
    elif state == "decided":
        requests = [r for r in requests if r.decision is not None and r.consumed_at is None]
    page = requests[offset:offset + limit]
    kinds = await reversibilities(inbox.sagacity, {r.saga_id for r in page})
    return {"items": [request_view(r, now, reversibility=kinds.get(r.request_id)) for r in page],
            "offset": offset, "limit": limit,
            "total": len(requests),
            "next_offset": offset + limit if offset + limit < len(requests) else None}


@router.get("/approvals/count", response_model=CountOut, summary="Count pending requests")
async def count_pending(request: Request) -> dict[str, int]:
    """How many requests wait for a decision, expired ones not counted (the inbox polls it)."""
    now = _now()
    waiting = await _inbox(request).sagacity.approvals.list(None, pending_only=True)
    return {"pending": sum(1 for r in waiting if not r.expired(now))}


@router.get("/approvals/{request_id}", response_model=ApprovalOut, summary="Show one request",
            responses=NOT_FOUND)
async def show_approval(request: Request, request_id: str) -> dict[str, Any]:
    """Everything a decision is about: the canonical validated arguments (and their RFC 8785
    text), the raw arguments where they differ, the SHA-256, the tool and its reversibility, the
    saga, call id, times, state and decision. ``hash_ok`` is false when the store's arguments no
    longer hash to the recorded hash (the store was edited: deciding it is refused)."""
    return await shown_request(_inbox(request), request_id)


async def _decide(request: Request, request_id: str, body: DecisionIn, approve: bool) -> dict[str, Any]:
    inbox = _inbox(request)
    decided, changed = await decide(
        inbox.sagacity, request_id, approve=approve, identity=request.state.caller.identity,
        shown_hash=body.args_hash, reason=body.reason,
    )
    await inbox.watcher.saga_decided(decided.saga_id)
    kind = await reversibility_of(inbox.sagacity, decided.saga_id, request_id)
    shown = await approver_view(decided, inbox.sagacity.journal, data_keys_of(inbox.sagacity))
    return {"request": request_view(decided, _now(), reversibility=kind, full=True, shown=shown),
            "changed": changed}


@router.post("/approvals/{request_id}/approve", response_model=DecisionOut, summary="Approve",
             responses=DECISION_ERRORS)
async def approve(request: Request, request_id: str, body: DecisionIn) -> dict[str, Any]:
    """Approve as the authenticated caller, on the hash shown (409 ``hash_mismatch`` when it is
    not the request's). Journals APPROVED through the same code as ``sagacity approvals
    approve``; signed with the server's key when a keyring is configured."""
    return await _decide(request, request_id, body, True)


@router.post("/approvals/{request_id}/reject", response_model=DecisionOut, summary="Reject",
             responses=DECISION_ERRORS)
async def reject(request: Request, request_id: str, body: DecisionIn) -> dict[str, Any]:
    """Reject as the authenticated caller; ``reason`` is required (the model is told it)."""
    return await _decide(request, request_id, body, False)


@router.get("/sagas", response_model=SagaPage, summary="List sagas with their status")
async def list_sagas(request: Request, offset: int = Query(0, ge=0),
                     limit: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
    """Sagas oldest first, with the status their last entry shows (``Journal.saga_summaries``:
    one pass over the journal's index, then two entries per saga of the page)."""
    journal = _inbox(request).sagacity.journal
    page = await journal.saga_summaries(offset=offset, limit=limit + 1)
    return {"items": await saga_views(journal, page[:limit]), "offset": offset, "limit": limit,
            "next_offset": offset + limit if len(page) > limit else None}


async def _entries(inbox: Any, saga_id: str) -> list[Any]:
    entries = await read_shown(inbox.sagacity.journal, saga_id)  # masks, never values
    if not entries:
        raise Refused(404, "not_found", f"no saga {saga_id!r}")
    return entries


@router.get("/sagas/{saga_id:path}/entries", response_model=list[EntryOut], summary="A saga's journal",
            responses=NOT_FOUND)
async def saga_entries(request: Request, saga_id: str) -> list[dict[str, Any]]:
    """Every entry of the saga, in ``seq`` order, as stored (verify before trusting), each
    sensitive value as its mask (``[erased]`` once the saga's data key was erased)."""
    return [entry_view(e) for e in await _entries(_inbox(request), saga_id)]


@router.get("/sagas/{saga_id:path}/verify", response_model=VerifyOut, summary="Verify a saga",
            responses=NOT_FOUND)
async def verify_saga(request: Request, saga_id: str) -> dict[str, Any]:
    """The saga's hash chain, and with checkpoints or a keyring configured its newest signed
    checkpoint and decision signatures: ``ok``, or the first bad ``seq`` and why."""
    inbox = _inbox(request)
    await _entries(inbox, saga_id)
    results = await inbox.sagacity.verify(saga_id)
    return verify_view(results[0] if results else None, saga_id)


@router.get("/sagas/{saga_id:path}", response_model=SagaDetailOut, summary="Show one saga",
            responses=NOT_FOUND)
async def show_saga(request: Request, saga_id: str) -> dict[str, Any]:
    """The saga's status (its whole chain read) and its approval requests."""
    inbox = _inbox(request)
    entries = await _entries(inbox, saga_id)
    now = _now()
    requests = await inbox.sagacity.approvals.list(saga_id)
    return {"saga_id": saga_id, "status": saga_detail_status(entries), "entry_count": len(entries),
            "requests": [request_view(r, now) for r in requests]}
