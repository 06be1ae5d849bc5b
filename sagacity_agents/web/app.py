"""``create_app``: the approval inbox and its REST API as one ASGI application (FastAPI).

Why FastAPI rather than bare Starlette (which openai-agents already brings): the API's OpenAPI
schema is generated from the pydantic models the code is typed with (``GET /openapi.json``), and
request bodies and query parameters are validated by the same declarations. It adds one
dependency on top of Starlette and pydantic, both already installed. The interactive docs pages
FastAPI can serve load their scripts from a CDN: they are off (no CDN, strict CSP).

Every route but the login form and the static files needs an identity (:mod:`.auth`); every
response carries a strict Content-Security-Policy (scripts, styles and images from the app only;
no inline script or style) and ``Cache-Control: no-store`` (arguments hold personal data).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from ..core.checkpoints import CheckpointStore
from ..core.signing import Keyring
from ..errors import JournalError
from ..visible import escape as escape_hidden
from .api import router as api_router
from .auth import Authenticator, Caller, Forbidden, Sessions, TokenLogin, authenticate
from .decisions import DecisionWatcher, OnDecided, Refused
from .pages import base_of, render
from .pages import router as pages_router
from .views import visible_html

__all__ = ["CSP", "Inbox", "create_app", "mount_inbox"]

log = logging.getLogger("sagacity_agents.web")

HERE = Path(__file__).parent

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
"""The Content-Security-Policy of every response."""

PUBLIC = ("/login", "/static/")
"""Paths reached without an identity (under the app's mount point)."""


@dataclass
class Inbox:
    """What the app's routes share (``app.state.inbox``): the :class:`Sagacity` deciding, the
    authenticator and sessions, the decision watcher, the templates.

    Starlette runs no lifespan of a mounted app: mount it with :func:`mount_inbox`, which wires
    :meth:`running` into the host's lifespan (the poller starts with the host, so decisions
    made elsewhere reach ``on_decided`` with no request to the inbox, and :meth:`aclose` runs at
    shutdown), or enter ``inbox.state.inbox.running()`` in your own lifespan. Served alone, the
    app's own lifespan does it. Without either, polling starts at the inbox's first request
    (logged as a warning).
    """

    sagacity: Any
    """The :class:`~sagacity_agents.Sagacity` decisions go through."""
    authenticator: Authenticator
    """Who the caller is."""
    sessions: Sessions
    """Session cookies and CSRF tokens."""
    watcher: DecisionWatcher
    """Calls ``on_decided``."""
    title: str
    """The pages' title."""
    owns: bool
    """Whether :meth:`aclose` closes ``sagacity`` (this app opened it)."""
    templates: Environment = field(default_factory=lambda: templates())
    """The pages' Jinja2 templates (autoescape on; every value shown visibly escaped)."""

    started: bool = False
    """Whether :meth:`start` ran (a lifespan wired the inbox)."""
    closed: bool = False
    """Whether :meth:`aclose` ran."""

    def start(self) -> None:
        """Start polling for decisions made elsewhere, on the running event loop (idempotent)."""
        self.started = True
        self.watcher.start()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """:meth:`start`, then :meth:`aclose` on exit: what a host's lifespan enters."""
        self.start()
        try:
            yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop the watcher; close the journal and store when this app opened them (once)."""
        if self.closed:
            return
        self.closed = True
        await self.watcher.aclose()
        if self.owns:
            await self.sagacity.aclose()


def templates() -> Environment:
    """The pages' Jinja2 environment: autoescape on, and every ``{{ value }}`` through
    :func:`~.views.visible_html` (invisible and reordering code points shown escaped and
    highlighted); ``|plain`` gives the escaped text without highlighting (for ``<title>``),
    ``|json_text`` a non-string value as JSON text (non-ASCII kept, so it is highlighted too)."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"), finalize=visible_html,
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["plain"] = escape_hidden
    env.filters["json_text"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI schema, with the security schemes every route needs."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version="1", description=app.description,
                             routes=app.routes)
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "a TokenLogin secret (no CSRF token needed)"},
            "session": {"type": "apiKey", "in": "cookie", "name": "sagacity_session",
                        "description": "the session cookie set by the login form (or under a "
                        "proxy's identity); every POST with it also needs X-CSRF-Token"},
            "csrf": {"type": "apiKey", "in": "header", "name": "X-CSRF-Token",
                     "description": "the session's CSRF token (GET /api/me)"},
        }
        schema["security"] = [{"bearer": []}, {"session": [], "csrf": []}]
        app.openapi_schema = schema
    return app.openapi_schema


def _error(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **details}}, status_code=status)


def _wants_json(request: Request) -> bool:
    path = request.url.path[len(base_of(request)):]
    return path.startswith("/api/") or path == "/openapi.json"


def _same_origin(request: Request) -> bool:
    """A POST's ``Origin`` (when the browser sends one) is this server's own."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


def create_app(
    journal: Any = None,
    *,
    authenticator: Authenticator,
    secret_key: str | bytes | None = None,
    on_decided: OnDecided | None = None,
    poll_interval: float | None = 2.0,
    keyring: Keyring | str | Path | None = None,
    checkpoints: CheckpointStore | str | Path | None = None,
    decision_keys: Any = None,
    secure_cookies: bool = False,
    session_seconds: float = 8 * 3600,
    title: str = "Approvals",
) -> FastAPI:
    """Build the approval inbox: HTML pages at ``/``, the REST API at ``/api``, the OpenAPI
    schema at ``/openapi.json``; mount it under any prefix (``app.mount("/approvals", inbox)``).

    Args:
        journal: a :class:`~sagacity_agents.Sagacity` to decide through (kept open), or what
            ``Sagacity(journal)`` takes: a SQLite path, a ``postgresql://`` URI, ``None`` for
            ``$SAGACITY_DB``; the approval store is the one living with it.
        authenticator: who the caller is (:mod:`.auth`): :class:`TokenLogin`,
            :class:`TrustedHeader` or any callable given the request. Required.
        secret_key: signs session cookies and CSRF tokens (>= 32 bytes); default: a random key
            per process (sessions end at restart; replicas need one shared key).
        on_decided: ``callback(saga_id, requests)``, sync or async, run in the background once
            every unconsumed request of a saga is decided (here, or elsewhere: seen by polling).
        poll_interval: seconds between reads of the store for decisions made elsewhere
            (``None``: none).
        keyring, checkpoints, decision_keys: as :class:`Sagacity` (``None`` reads the
            environment); with a keyring holding a decision key, the server signs its decisions.
        secure_cookies: mark the session cookie ``Secure`` (behind HTTPS).
        session_seconds: how long a login lasts.
        title: the pages' title.

    Raises:
        ConfigurationError: a secret key shorter than 32 bytes, an unusable keyring.
    """
    from ..sdk.facade import Sagacity

    owns = not isinstance(journal, Sagacity)
    sagacity = Sagacity(journal, keyring=keyring, checkpoints=checkpoints,
                        decision_keys=decision_keys) if owns else journal
    sessions = Sessions(secret_key or secrets.token_bytes(32), max_age=session_seconds,
                        secure=secure_cookies)
    inbox = Inbox(sagacity, authenticator, sessions,
                  DecisionWatcher(sagacity.approvals, on_decided, poll_interval), title, owns)
    app = _application(inbox)
    _guard_requests(app, inbox)
    _answer_errors(app)
    return app


def _application(inbox: Inbox) -> FastAPI:
    """The app with its lifespan (the inbox's :meth:`Inbox.running`), routes and static files."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        async with inbox.running():
            yield

    app = FastAPI(title=f"sagacity-agents: {inbox.title}", docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json", lifespan=lifespan,
                  description="Decide the irreversible tool calls that paused a saga, bound to "
                  "the SHA-256 of their exact arguments. Every route needs an identity.")
    app.state.inbox = inbox
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.include_router(api_router)
    app.include_router(pages_router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    return app


def _guard_requests(app: FastAPI, inbox: Inbox) -> None:
    """Every request: start the inbox if no lifespan did, check identity and CSRF
    (:func:`_guarded`), and set the security headers on the response."""

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        if not inbox.started:
            log.warning("the approval inbox's lifespan is not wired (mount it with mount_inbox, "
                        "or enter inbox.state.inbox.running() in your lifespan): decisions made "
                        "elsewhere reached on_decided only from this first request on")
            inbox.start()
        response = await _guarded(request, call_next, inbox.authenticator, inbox.sessions)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"  # no-referrer makes browsers post Origin: null
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response


async def _guarded(request: Request, call_next: Any, authenticator: Authenticator,
                   sessions: Sessions) -> Response:
    """The response to ``request``: public paths as they are (same-origin POSTs only); every
    other one needs an identity (401, or the login page), and a non-GET a valid CSRF token."""
    path = request.url.path[len(base_of(request)):]
    if path.startswith(PUBLIC):
        if request.method == "POST" and not _same_origin(request):
            return _error(403, "csrf_failed", "cross-origin post refused")
        return await call_next(request)  # type: ignore[no-any-return]
    try:
        caller = await authenticate(request, authenticator, sessions)
    except Forbidden as exc:
        return _error(403, "forbidden", str(exc) or "not allowed")
    if caller is None:
        if _wants_json(request):
            return _error(401, "unauthenticated", "sign in first (no identity in this request)")
        if isinstance(authenticator, TokenLogin):
            return RedirectResponse(f"{base_of(request)}/login", status_code=303)
        return render(request, "error.html", 401, code="unauthenticated",
                      message="no identity in this request: reach the inbox through the "
                      "proxy that signs you in")
    request.state.caller = caller
    if caller.new_cookie is not None and request.method in ("GET", "HEAD"):
        response = await call_next(request)
        sessions.set_cookie(response, caller.new_cookie, f"{base_of(request)}/")
        return response  # type: ignore[no-any-return]
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        refused = await _csrf_refusal(request, caller, sessions)
        if refused is not None:
            return refused
    return await call_next(request)  # type: ignore[no-any-return]


async def _csrf_refusal(request: Request, caller: Caller, sessions: Sessions) -> Response | None:
    """The error response when a state-changing request lacks the session's CSRF token (from
    the ``X-CSRF-Token`` header or the form's ``csrf_token``) or comes from another origin."""
    token = request.headers.get("x-csrf-token")
    if token is None and "form" in request.headers.get("content-type", ""):
        try:
            await request.body()  # cached: the route reads the form again
            token = str((await request.form()).get("csrf_token", ""))
        except (StarletteHTTPException, MultiPartException) as exc:  # a part over 1 MB...
            return _error(getattr(exc, "status_code", 400), "invalid_request",
                          f"unreadable form: {getattr(exc, 'detail', None) or exc}")
    if not _same_origin(request) or not sessions.csrf_ok(caller, token):
        return _error(403, "csrf_failed", "missing or wrong CSRF token: reload the page")
    return None


def _answer_errors(app: FastAPI) -> None:
    """Errors as the API's JSON error body (``{"error": {"code", "message"}}``), or, for a
    refusal on a page, the error page."""

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        if _wants_json(request):
            return _error(exc.status, exc.code, exc.message, **exc.details)
        return render(request, "error.html", exc.status, code=exc.code, message=exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, "invalid_request", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(JournalError)
    async def storage(request: Request, exc: JournalError) -> Response:
        log.error("journal or store unavailable: %s", exc)
        return _error(503, "storage_unavailable", str(exc))


def mount_inbox(host: Starlette, path: str, inbox: FastAPI) -> None:
    """Mount ``inbox`` (from :func:`create_app`) on ``host`` at ``path`` and wire its lifespan
    into the host's: the inbox starts after the host's own startup (its poller calls
    ``on_decided`` for decisions made elsewhere, with no request to the inbox) and closes
    before the host's own shutdown (so a journal the host closes is still open for it).

    Call it once the host is built (``FastAPI(lifespan=...)`` or ``Starlette(...)``), before it
    is served; serve the host with its lifespan on (uvicorn's default ``--lifespan auto``).
    """
    state: Inbox = inbox.state.inbox
    previous = host.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with previous(app) as value, state.running():
            yield value

    host.router.lifespan_context = lifespan
    host.mount(path, inbox)
