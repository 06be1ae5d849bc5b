"""``sagacity approvals ...`` and ``sagacity saga resume|recover``: decide paused calls, resume and recover sagas.

Decisions made here are journaled in the saga's chain (APPROVED / REJECTED with the approver,
the reason and the argument hash decided on); the approval store is working state only.
``saga resume`` loads the application's agent with ``--app module:attr``, the one convention for
commands that need the user's agents and undos: ``attr`` is an ``Agent``, or a callable taking no
arguments that returns one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import json
import shlex
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .base import CONTEXT_SETTINGS, UsageFailure, _check_journal_file, cli, db_option
from ..core.approval import ApprovalRequest, ApprovalStore, args_hash
from ..core.entries import Phase
from ..backends.postgres.setup import redacted_uri
from ..errors import ApprovalError, EncodingError, SagacityError, describe_error
from ..render import data_text, make_console, printable, status_text
from ..stores import open_approval_store, open_journal

__all__ = ["approvals", "load_app", "saga"]

T = TypeVar("T")


def _with_sagacity(db: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(Sagacity(db))`` (journal and approval store in the same file) and close it."""
    _check_journal_file(db)
    from ..sdk.facade import Sagacity  # imports the Agents SDK: only for commands that need it

    async def run() -> T:
        sagacity = Sagacity(db)
        try:
            return await work(sagacity)
        finally:
            await sagacity.aclose()

    from agents.exceptions import AgentsException

    try:
        return asyncio.run(run())
    except ApprovalError as exc:
        raise click.ClickException(f"refused: {exc}") from exc
    except SagacityError as exc:
        raise click.ClickException(str(exc)) from exc
    except AgentsException as exc:
        # The SDK raised outside the saga's run (a run that raises inside it is compensated and
        # reported): one clear line, no traceback; the journal says where the saga stands.
        raise click.ClickException(
            f"the Agents SDK raised {describe_error(exc)}; see `sagacity journal show` for the "
            "saga's state, and `sagacity saga recover` to finish it") from exc


def _with_store(db: str, work: Callable[[ApprovalStore], Awaitable[T]]) -> T:
    _check_journal_file(db)

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


def _state(request: ApprovalRequest) -> str:
    if request.consumed_at:
        return f"consumed ({request.decision})"
    if request.expired(dt.datetime.now(dt.timezone.utc)):
        return "expired"
    return request.decision or "pending"


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
    """List approval requests (pending ones unless --all), oldest first."""

    async def load(store: ApprovalStore) -> list[ApprovalRequest]:
        return await store.list(None, pending_only=not show_all)

    requests = _with_store(db, load)
    console = make_console()
    if not requests:
        console.print("no pending approval requests" if not show_all else "no approval requests")
        return
    table = Table(title=f"{len(requests)} approval request(s)", title_justify="left", header_style="bold")
    for column in ("request id", "saga", "tool", "call id", "age", "state", "args hash"):
        table.add_column(column, no_wrap=column in ("request id", "args hash"))
    for r in requests:
        table.add_row(data_text(r.request_id), data_text(r.saga_id[:12]), data_text(r.tool),
                      data_text(r.call_id), _age(r.created_at), data_text(_state(r)),
                      data_text(r.args_hash[:16]))
    console.print(table)


@approvals.command("show")
@click.argument("request_id")
@db_option()
def approvals_show(request_id: str, db: str) -> None:
    """Show one request: the arguments the tool would receive, their hash, the saga, its age."""

    async def load(store: ApprovalStore) -> tuple[ApprovalRequest | None, str | None]:
        request = await store.get(request_id)
        if request is None:
            return None, None
        # The tool's reversibility as journaled when the run paused (the journal, not the store).
        journal = open_journal(db)
        try:
            paused = [e for e in await journal.entries(request.saga_id)
                      if e.phase is Phase.AWAITING_APPROVAL and isinstance(e.payload, dict)
                      and e.payload.get("request_id") == request_id]
        finally:
            await journal.close()
        kind = paused[-1].payload.get("reversibility") if paused else None
        return request, kind if isinstance(kind, str) else None

    request, reversibility = _with_store(db, load)
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
    facts.add_row("reversibility", data_text(reversibility or "not journaled"))
    facts.add_row("call id", data_text(request.call_id))
    facts.add_row("asked", data_text(f"{request.created_at} ({_age(request.created_at)} ago)"))
    facts.add_row("expires", data_text(request.expires_at or "never"))
    facts.add_row("state", data_text(_state(request)))
    if request.decision:
        facts.add_row("decided by", data_text(f"{request.approver} ({request.reason or 'no reason given'})"))
    facts.add_row("args sha256", data_text(request.args_hash))
    console.print(facts)
    # json.dumps escapes C0 characters but not DEL and C1; its own line breaks are kept.
    args_json = "\n".join(
        printable(line) for line in json.dumps(request.args, indent=2, ensure_ascii=False).split("\n")
    )
    console.print(Panel(Syntax(args_json, "json"),
                        title="arguments the tool will receive", title_align="left"))
    if request.raw_args is not None:
        console.print(Panel(data_text(request.raw_args), title="raw arguments from the model",
                            title_align="left"))


def _decide(request_id: str, db: str, approve: bool, approver: str, reason: str | None) -> None:
    async def work(sagacity: Any) -> ApprovalRequest:
        if approve:
            return await sagacity.approve(request_id, approver=approver, reason=reason)  # type: ignore[no-any-return]
        return await sagacity.reject(request_id, approver=approver, reason=reason or "")  # type: ignore[no-any-return]

    request = _with_sagacity(db, work)
    word = "approved" if approve else "rejected"
    console = make_console(highlight=False)
    # One line each, never wrapped by rich (the terminal folds them visually; a copy stays whole).
    console.print(Text.assemble(
        f"{word} ", data_text(request.request_id), " (", data_text(request.tool),
        f", args sha256 {printable(request.args_hash)}) as ", data_text(approver),
    ), soft_wrap=True)
    # The command goes on a line of its own, so it can be copied as it is.
    console.print("resume the saga with your application's agent, passed as --app module:attr:",
                  soft_wrap=True)
    command = (f"sagacity saga resume {shlex.quote(printable(request.saga_id))} "
               f"--app module:attr --db {shlex.quote(redacted_uri(db))}")
    console.print(Text(command), soft_wrap=True)


@approvals.command("approve")
@click.argument("request_id")
@click.option("--as", "approver", required=True, help="Who approves (journaled).")
@click.option("--reason", default=None, help="Why (journaled).")
@db_option()
def approvals_approve(request_id: str, approver: str, reason: str | None, db: str) -> None:
    """Approve a request: journals APPROVED with the approver, reason and argument hash."""
    _decide(request_id, db, True, approver, reason)


@approvals.command("reject")
@click.argument("request_id")
@click.option("--as", "approver", required=True, help="Who rejects (journaled).")
@click.option("--reason", required=True, help="Why (journaled, and shown to the model).")
@db_option()
def approvals_reject(request_id: str, approver: str, reason: str, db: str) -> None:
    """Reject a request: journals REJECTED; on resume the body never runs."""
    _decide(request_id, db, False, approver, reason)


def load_app(spec: str) -> Any:
    """Load the application's agent from ``module:attr``.

    ``attr`` (dotted attributes allowed) is an ``Agent``, or a callable with no arguments
    returning one. The current directory is importable, as with ``python -m``.

    Raises:
        click.UsageError: the spec is malformed, or the module or attribute cannot be found.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.UsageError(f"--app takes MODULE:ATTR, got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise click.UsageError(f"cannot load --app {spec!r}: {exc}") from exc
    from agents import Agent

    if not isinstance(obj, Agent) and callable(obj):
        obj = obj()
    if not isinstance(obj, Agent):
        raise click.UsageError(f"--app {spec!r} is not an Agent nor a callable returning one")
    return obj


@cli.group(context_settings=CONTEXT_SETTINGS, short_help="Resume or recover sagas.")
def saga() -> None:
    """Operate on sagas: resume one waiting for approval, recover one left behind by a crash."""


@saga.command("resume")
@click.argument("saga_id")
@click.option("--app", "app", required=True, metavar="MODULE:ATTR",
              help="The agent to resume with: an Agent or a no-argument callable returning one.")
@click.option("--context-json", default=None, metavar="JSON",
              help="Trusted application context (a JSON object); the stored snapshot has none.")
@db_option()
def saga_resume(saga_id: str, app: str, context_json: str | None, db: str) -> None:
    """Resume a saga whose decisions are all made; exit 1 if any check refuses.

    Checks, failing closed: every pending call has an unconsumed, unexpired request; its decision
    is in the journal with the same argument hash; the call in the stored snapshot hashes to it.
    The requests are consumed atomically, so a second resume (here or elsewhere) runs nothing.
    """
    agent = load_app(app)
    context = json.loads(context_json) if context_json else None

    async def work(sagacity: Any) -> Any:
        return await sagacity.resume(saga_id, agent, context=context)

    result = _with_sagacity(db, work)
    console = make_console(highlight=False)
    console.print(status_text(result.status.value), data_text(f"saga {result.saga_id}"))
    if result.final_output is not None:  # model text: escaped, never markup
        console.print(data_text(f"final output: {result.final_output}"))
    if result.exception is not None:
        console.print(data_text(f"run raised: {describe_error(result.exception)}"))
    for request in result.approvals:
        console.print(data_text(f"waiting again: {request.request_id} ({request.tool})"))
    if not result.ok and result.status.value != "AWAITING_APPROVAL":
        raise SystemExit(1)


def _print_recovery(console: Any, result: Any) -> None:
    """One saga's recovery: its status, then one line per report item."""
    console.print(status_text(result.status.value), data_text(f"saga {result.saga_id}"))
    report = result.report
    if report is None:
        return
    for label, items in (("undone", report.undone), ("undo failed", report.failed),
                         ("in doubt", report.in_doubt), ("no undo", report.no_undo),
                         ("kept (irreversible)", report.kept_irreversible),
                         ("approved, never ran", report.approved_not_run)):
        for item in items:
            console.print(data_text(f"  {label}: seq {item.seq} {item.tool} (call {item.call_id}) {item.detail}"))
    if report.in_doubt or report.failed:
        console.print(data_text(
            f"  a human must check the far side, then: sagacity saga resolve {result.saga_id} "
            "SEQ --ran|--not-run --as NAME --reason TEXT (then recover again)"))


@saga.command("recover")
@click.argument("saga_id", required=False)
@click.option("--all", "recover_all", is_flag=True,
              help="Every saga whose run lease expired without RUN_ENDED, or left IN_DOUBT / "
                   "COMPENSATION_FAILED (never one waiting for approval, idle or running).")
@click.option("--app", "app", required=True, metavar="MODULE:ATTR",
              help="The agent whose tool declarations hold the undos.")
@db_option()
def saga_recover(saga_id: str | None, recover_all: bool, app: str, db: str) -> None:
    """Finish a saga its process left behind: undo its executed effects from the journal.

    Undos already COMPENSATED are not applied again; an INTENT or COMPENSATING without outcome
    is reported in doubt (exit 1) for a human to check and answer (`saga resolve`); the saga then
    stays open. It is closed once everything is undone (COMPENSATED). Refused while a run holds
    the saga's lease. With --all, every saga that needs it is verified and recovered in turn;
    exit 1 while any of them needs a human (or was refused).
    """
    if (saga_id is None) == (not recover_all):
        raise click.UsageError("give a SAGA_ID or --all (not both)")
    agent = load_app(app)
    console = make_console(highlight=False)
    if saga_id is not None:

        async def work(sagacity: Any) -> Any:
            return await sagacity.recover(saga_id, agent)

        result = _with_sagacity(db, work)
        _print_recovery(console, result)
        if result.status.value not in ("COMPENSATED", "COMPLETED"):
            raise SystemExit(1)
        return

    async def work_all(sagacity: Any) -> Any:
        return await sagacity.recover_all(agent)

    outcomes = _with_sagacity(db, work_all)
    if not outcomes:
        console.print("no saga needs recovery")
        return
    needs_human = 0
    for sid, why, outcome in outcomes:
        console.print(data_text(f"saga {sid}: {why}"))
        if isinstance(outcome, SagacityError):
            needs_human += 1
            console.print(Text.assemble(status_text("REFUSED"), " ", data_text(describe_error(outcome))))
            continue
        _print_recovery(console, outcome)
        needs_human += outcome.status.value not in ("COMPENSATED", "COMPLETED")
    console.print(f"{len(outcomes)} saga(s) recovered, {needs_human} need a human", soft_wrap=True)
    if needs_human:
        raise SystemExit(1)


@saga.command("resolve")
@click.argument("saga_id")
@click.argument("seq", type=int)
@click.option("--ran/--not-run", "ran", default=None,
              help="Whether the call's effect (or the undo) happened at the far side.")
@click.option("--as", "resolver", required=True, help="Who answers (journaled).")
@click.option("--reason", required=True, help="What was checked (journaled).")
@db_option()
def saga_resolve(saga_id: str, seq: int, ran: bool | None, resolver: str, reason: str, db: str) -> None:
    """Answer an in-doubt call or undo (SEQ as `saga recover` lists it): journals RESOLVED.

    Then run `sagacity saga recover`: a call that ran is undone (when it has an undo), one that
    did not is dropped, and the saga closes once nothing is in doubt. Refused (exit 1) on a saga
    that does not verify, is closed or running, or when SEQ is not in doubt.
    """
    if ran is None:
        raise click.UsageError("say what you found: --ran or --not-run")

    async def work(sagacity: Any) -> Any:
        return await sagacity.resolve(saga_id, seq, ran=ran, resolver=resolver, reason=reason)

    try:
        entry = _with_sagacity(db, work)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    console = make_console(highlight=False)
    console.print(Text.assemble(
        f"resolved seq {entry.payload['target_seq']} ({entry.payload['target']}) of saga ",
        data_text(saga_id), f" as {entry.payload['answer']} by ", data_text(resolver),
        f" (RESOLVED seq {entry.seq})"), soft_wrap=True)
    console.print("recover the saga to act on it:", soft_wrap=True)
    console.print(Text(f"sagacity saga recover {shlex.quote(printable(saga_id))} --app module:attr "
                       f"--db {shlex.quote(redacted_uri(db))}"), soft_wrap=True)
