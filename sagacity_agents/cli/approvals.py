"""``sagacity approvals list|show|approve|reject``: decide the calls that paused a saga.

Decisions made here are journaled in the saga's chain (APPROVED / REJECTED with the approver,
the reason and the argument hash decided on); the approval store is working state only.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shlex
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..core.approval import ApprovalRequest, ApprovalStore, args_hash
from ..core.approval_args import approver_view
from ..core.data_keys import DataKeys
from ..core.sensitive import has_committed
from ..core.entries import Phase
from ..core.grants import requests_void
from ..errors import EncodingError, SagacityError
from ..render import data_text, make_console, printable
from ..visible import hidden_in
from ..stores import open_approval_store, open_journal, redacted_uri
from .base import (
    CONTEXT_SETTINGS, UsageFailure, check_journal_file, cli, db_option, print_whole, with_sagacity,
)

__all__ = ["approvals"]

T = TypeVar("T")


def _with_store(db: str, work: Callable[[ApprovalStore], Awaitable[T]]) -> T:
    check_journal_file(db)

    async def run() -> T:
        store = open_approval_store(db)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except SagacityError as exc:  # unreachable server, old schema, missing extra...
        raise click.ClickException(str(exc)) from exc


def _age(created_at: str) -> str:
    created = dt.datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    seconds = int((dt.datetime.now(dt.timezone.utc) - created).total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _state(request: ApprovalRequest, void: str | None = None) -> str:
    if request.consumed_at:
        return f"consumed ({request.decision})"
    if void is not None:  # the store does not know: the journal says the saga is over
        return f"void: {void}" + (f" ({request.decision})" if request.decision else "")
    if request.expired(dt.datetime.now(dt.timezone.utc)):
        return "expired"
    return request.decision or "pending"


async def _void_sagas(db: str, requests: list[ApprovalRequest]) -> dict[str, str]:
    """Saga id -> why its requests can no longer be used (``core.grants.requests_void``), for
    the sagas of ``requests`` whose journal says so (closed, or failed)."""
    journal = open_journal(db)
    try:
        void = {}
        for saga_id in dict.fromkeys(r.saga_id for r in requests if r.consumed_at is None):
            why = requests_void(await journal.entries(saga_id))
            if why is not None:
                void[saga_id] = why
        return void
    finally:
        await journal.close()


@cli.group(context_settings=CONTEXT_SETTINGS, short_help="List, show, approve and reject paused calls.")
def approvals() -> None:
    """Human decisions on irreversible tool calls that paused a saga.

    A request binds a decision to the SHA-256 of the call's canonical validated arguments. Approve
    or reject it here (from any process), then resume the saga with `sagacity saga resume`: the
    resume checks the journaled decision and the hash again and runs the call at most once.
    """


@approvals.command("list")
@db_option()
@click.option("--all", "show_all", is_flag=True, help="Include decided and consumed requests.")
def approvals_list(db: str, show_all: bool) -> None:
    """List approval requests (pending ones unless --all), oldest first.

    A request whose saga is closed or failed (the journal says so) is never pending: nothing can
    run on it any more. --all lists it as void.
    """

    async def load(store: ApprovalStore) -> tuple[list[ApprovalRequest], dict[str, str]]:
        found = await store.list(None, pending_only=not show_all)
        void = await _void_sagas(db, found)
        return [r for r in found if show_all or r.saga_id not in void], void

    requests, void = _with_store(db, load)
    console = make_console()
    if not requests:
        console.print("no pending approval requests" if not show_all else "no approval requests")
        return
    table = Table(title=f"{len(requests)} approval request(s)", title_justify="left", header_style="bold")
    for column in ("request id", "saga", "tool", "call id", "age", "state", "args hash"):
        # The ids are typed next (approvals show|approve ID, saga resume SAGA_ID): whole, on one
        # line, never cut with an ellipsis however narrow the terminal.
        table.add_column(column, no_wrap=column in ("request id", "saga", "args hash"))
    for r in requests:
        table.add_row(data_text(r.request_id), data_text(r.saga_id), data_text(r.tool),
                      data_text(r.call_id), _age(r.created_at), data_text(_state(r, void.get(r.saga_id))),
                      data_text(r.args_hash[:16]))
    print_whole(console, table)  # ids whole, never cut to the terminal's width


@approvals.command("show")
@click.argument("request_id")
@db_option()
def approvals_show(request_id: str, db: str) -> None:
    """Show one request: the arguments the tool would receive, their hash, the saga, its age,
    and the agent that asked (as journaled at the pause)."""

    async def load(store: ApprovalStore) -> tuple[ApprovalRequest | None, dict[str, Any], str | None, Any]:
        request = await store.get(request_id)
        if request is None:
            return None, {}, None, None
        # The tool's reversibility as journaled when the run paused, and whether the saga is
        # over (the journal, not the store); the clear arguments only where the key is.
        journal = open_journal(db)
        try:
            entries = await journal.entries(request.saga_id)
            shown = await approver_view(request, journal, DataKeys.from_env())
        finally:
            await journal.close()
        paused = [e for e in entries
                  if e.phase is Phase.AWAITING_APPROVAL and isinstance(e.payload, dict)
                  and e.payload.get("request_id") == request_id]
        return request, (paused[-1].payload if paused else {}), requests_void(entries), shown

    request, paused, void, shown = _with_store(db, load)
    reversibility = paused.get("reversibility")
    agent = paused.get("agent")  # None for a pause journaled without its agent
    if request is None:
        raise UsageFailure(f"no approval request {request_id!r} (see: sagacity approvals list)")
    try:
        shown_hash = args_hash(request.args)
    except EncodingError:
        shown_hash = None
    if shown_hash != request.args_hash:
        # The store is working state: never show a human arguments other than the hashed ones.
        raise click.ClickException(
            f"request {printable(request_id)}: its arguments in the approval store do not hash to "
            f"its recorded hash {printable(request.args_hash)}: the store was changed; do not "
            "decide it (approve and reject refuse it)"
        )
    console = make_console()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    # Everything below comes from the model or the store: escaped, never read as markup.
    facts.add_row("request", data_text(request.request_id))
    facts.add_row("saga", data_text(request.saga_id))
    facts.add_row("tool", data_text(request.tool))
    facts.add_row("agent", data_text(agent if isinstance(agent, str) else "not journaled"))
    facts.add_row("reversibility", data_text(reversibility if isinstance(reversibility, str)
                                             else "not journaled"))
    facts.add_row("call id", data_text(request.call_id))
    facts.add_row("asked", data_text(f"{request.created_at} ({_age(request.created_at)} ago)"))
    facts.add_row("expires", data_text(request.expires_at or "never"))
    facts.add_row("state", data_text(_state(request, void)))
    if request.decision:
        facts.add_row("decided by", data_text(f"{request.approver} ({request.reason or 'no reason given'})"))
    facts.add_row("args sha256", data_text(request.args_hash))
    console.print(facts)
    args, raw_args, clear = shown
    found = hidden_in((request.request_id, request.saga_id, request.tool, request.call_id,
                       args, raw_args, request.reason, request.approver))
    if found:
        console.print(Text.assemble(
            ("WARNING: ", "bold red"), "this request holds invisible, control or reordering "
            "characters, shown escaped (e.g. \\u202e): ", data_text(", ".join(found)),
            ". Read each value as shown; what it looks like elsewhere may differ.",
        ))
    # json.dumps escapes C0 characters but not DEL and C1; its own line breaks are kept.
    args_json = "\n".join(
        printable(line) for line in json.dumps(args, indent=2, ensure_ascii=False).split("\n")
    )
    mcp = isinstance(args, dict) and set(args) == {"arguments", "mcp_tool"}
    title = ("arguments, and the MCP tool's definition as its server listed it at the pause "
             "(an approval covers both)" if mcp else "arguments the tool will receive")
    if not clear and has_committed(request.args):
        title += " (sensitive values masked: no SAGACITY_DATA_KEY for this saga here)"
    console.print(Panel(Syntax(args_json, "json"), title=title, title_align="left"))
    if raw_args is not None:
        console.print(Panel(data_text(raw_args), title="raw arguments from the model",
                            title_align="left"))


def _decide(request_id: str, db: str, approve: bool, approver: str, reason: str | None,
            app: str | None = None) -> None:
    async def work(sagacity: Any) -> ApprovalRequest:
        if approve:
            return await sagacity.approve(request_id, approver=approver, reason=reason)  # type: ignore[no-any-return]
        return await sagacity.reject(request_id, approver=approver, reason=reason or "")  # type: ignore[no-any-return]

    request = with_sagacity(db, work)
    word = "approved" if approve else "rejected"
    console = make_console(highlight=False)
    # One line each, never wrapped by rich (the terminal folds them visually; a copy stays whole).
    console.print(Text.assemble(
        f"{word} ", data_text(request.request_id), " (", data_text(request.tool),
        f", args sha256 {printable(request.args_hash)}) as ", data_text(approver),
    ), soft_wrap=True)
    if app is None:
        console.print("resume the saga with `sagacity saga resume` and your application's agent "
                      "(--app MODULE:ATTR; give --app here to get the command)", soft_wrap=True)
        return
    # The command goes on a line of its own, so it can be copied and run as it is.
    console.print("resume the saga:", soft_wrap=True)
    command = " ".join(shlex.quote(printable(word)) for word in (
        "sagacity", "saga", "resume", request.saga_id, "--app", app, "--db", redacted_uri(db)))
    console.print(Text(command), soft_wrap=True)


@approvals.command("approve")
@click.argument("request_id")
@click.option("--as", "approver", required=True, help="Who approves (journaled).")
@click.option("--reason", default=None, help="Why (journaled).")
@click.option("--app", "app", default=None, metavar="MODULE:ATTR",
              help="The agent `saga resume` takes: only named in the command printed next.")
@db_option()
def approvals_approve(request_id: str, approver: str, reason: str | None, app: str | None, db: str) -> None:
    """Approve a request: journals APPROVED with the approver, reason and argument hash."""
    _decide(request_id, db, True, approver, reason, app)


@approvals.command("reject")
@click.argument("request_id")
@click.option("--as", "approver", required=True, help="Who rejects (journaled).")
@click.option("--reason", required=True, help="Why (journaled, and shown to the model).")
@click.option("--app", "app", default=None, metavar="MODULE:ATTR",
              help="The agent `saga resume` takes: only named in the command printed next.")
@db_option()
def approvals_reject(request_id: str, approver: str, reason: str, app: str | None, db: str) -> None:
    """Reject a request: journals REJECTED; on resume the body never runs."""
    _decide(request_id, db, False, approver, reason, app)
