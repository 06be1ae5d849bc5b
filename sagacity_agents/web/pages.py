"""The inbox's HTML pages, rendered on the server (Jinja2, autoescape on): the inbox, a request
with its decision form, a saga with its timeline and verification, the sagas list, login."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..core.shown import read_shown
from .api import shown_request
from .auth import TokenLogin
from .decisions import Refused, decide
from .timeline import timeline_svg
from .views import (
    age_text,
    entry_view,
    request_view,
    saga_detail_status,
    saga_views,
    verify_view,
)

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

DECIDED_SHOWN = 20
"""How many decided requests the inbox shows under the pending ones."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def base_of(request: Request) -> str:
    """The path the app is mounted at (``""`` at the root)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    """``template`` rendered with the page's common values (base path, caller, CSRF token)."""
    inbox = request.app.state.inbox
    caller = getattr(request.state, "caller", None)
    html = inbox.templates.get_template(template).render(
        base=base_of(request), caller=caller, title=inbox.title, age=age_text, quote=quote,
        csrf=inbox.sessions.csrf_token(caller) if caller else "", **values,
    )
    return HTMLResponse(html, status_code=status)


@router.get("/login")
async def login_form(request: Request) -> Response:
    """The login form (only with :class:`TokenLogin`)."""
    if not isinstance(request.app.state.inbox.authenticator, TokenLogin):
        return render(request, "error.html", 401, code="unauthenticated",
                      message="this inbox is not reached through a login form here")
    return render(request, "login.html")


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the secret typed in; set the session cookie and go to the inbox."""
    inbox = request.app.state.inbox
    form = await request.form()
    secret = str(form.get("secret", ""))
    identity = inbox.authenticator.identity_of(secret) if isinstance(inbox.authenticator, TokenLogin) else None
    if identity is None:
        return render(request, "login.html", 401, failed=True)
    response = RedirectResponse(f"{base_of(request)}/", status_code=303)
    value, _ = inbox.sessions.issue(identity, inbox.authenticator.digest_of(identity))
    inbox.sessions.set_cookie(response, value, f"{base_of(request)}/")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Revoke the session (in this process: see :mod:`.auth`) and delete its cookie. Under a
    proxy's identity the next page starts a new session (a new CSRF token)."""
    inbox = request.app.state.inbox
    inbox.sessions.revoke(request.state.caller)
    login = isinstance(inbox.authenticator, TokenLogin)
    response = RedirectResponse(f"{base_of(request)}/{'login' if login else ''}", status_code=303)
    response.delete_cookie(inbox.sessions.cookie, path=f"{base_of(request)}/")
    return response


@router.get("/")
async def inbox_page(request: Request) -> Response:
    """Pending requests oldest first (age, expiry), then the latest decided or expired ones,
    greyed."""
    store = request.app.state.inbox.sagacity.approvals
    now = _now()
    every = await store.list(None)
    pending = [request_view(r, now) for r in every if r.pending and not r.expired(now)]
    decided = [request_view(r, now) for r in every if not r.pending or r.expired(now)]
    decided.sort(key=lambda v: v["decided_at"] or v["consumed_at"] or "", reverse=True)
    return render(request, "inbox.html", pending=pending, decided=decided[:DECIDED_SHOWN])


async def _request_page(request: Request, request_id: str, status: int = 200,
                        error: Refused | None = None) -> Response:
    inbox = request.app.state.inbox
    try:
        shown = await shown_request(inbox, request_id)
    except Refused as refused:
        return render(request, "error.html", refused.status, code=refused.code, message=refused.message)
    entries = await inbox.sagacity.journal.entries(shown["saga_id"])
    return render(request, "request.html", status, r=shown, error=error,
                  timeline=timeline_svg(entries, request_id),
                  raw_differs=shown["raw_args"] is not None)


@router.get("/requests/{request_id}")
async def request_page(request: Request, request_id: str) -> Response:
    """One request: tool, arguments (table, canonical JSON, hash), the saga's timeline, and
    the approve / reject form while it is pending."""
    return await _request_page(request, request_id)


@router.post("/requests/{request_id}/decide")
async def decide_form(request: Request, request_id: str) -> Response:
    """The form's post (CSRF-checked before it gets here): decide, then show the request."""
    inbox = request.app.state.inbox
    form = await request.form()
    choice = str(form.get("decision", ""))
    if choice not in ("approve", "reject"):
        return await _request_page(request, request_id, 422,
                                   Refused(422, "invalid_request", "choose approve or reject"))
    try:
        decided, _ = await decide(inbox.sagacity, request_id, approve=choice == "approve",
                                  identity=request.state.caller.identity,
                                  shown_hash=str(form.get("args_hash", "")),
                                  reason=str(form.get("reason", "")))
    except Refused as refused:
        return await _request_page(request, request_id, refused.status, refused)
    await inbox.watcher.saga_decided(decided.saga_id)
    return RedirectResponse(f"{base_of(request)}/requests/{quote(request_id, safe='')}", status_code=303)


@router.get("/sagas")
async def sagas_page(request: Request, offset: int = 0) -> Response:
    """Sagas, oldest first, 50 a page, with the status their last entry shows."""
    offset = max(offset, 0)
    journal = request.app.state.inbox.sagacity.journal
    page = await journal.saga_summaries(offset=offset, limit=51)
    return render(request, "sagas.html", sagas=await saga_views(journal, page[:50]), offset=offset,
                  next_offset=offset + 50 if len(page) > 50 else None)


@router.get("/sagas/{saga_id:path}")
async def saga_page(request: Request, saga_id: str) -> Response:
    """Any saga, paused or not: its timeline, its verification, its requests, its entries
    (sensitive values as their masks, ``[erased]`` once erased: ``core.shown``)."""
    inbox = request.app.state.inbox
    entries = await read_shown(inbox.sagacity.journal, saga_id)
    if not entries:
        return render(request, "error.html", 404, code="not_found", message=f"no saga {saga_id!r}")
    results = await inbox.sagacity.verify(saga_id)
    now = _now()
    requests = [request_view(r, now) for r in await inbox.sagacity.approvals.list(saga_id)]
    return render(request, "saga.html", saga_id=saga_id, saga_status=saga_detail_status(entries),
                  verify=verify_view(results[0] if results else None, saga_id),
                  timeline=timeline_svg(entries), entries=[entry_view(e) for e in entries],
                  requests=requests)
