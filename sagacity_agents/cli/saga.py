"""``sagacity saga show|resume|recover|resolve``: draw a saga's timeline, resume and recover
sagas, answer in-doubt calls.

``saga resume`` loads the application's agent with ``--app module:attr``, the one convention for
commands that need the user's agents and undos: ``attr`` is an ``Agent``, or a callable taking no
arguments that returns one (:func:`load_app`).
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
from typing import Any

import click
from rich.text import Text

from ..core.canonical import parse_json
from ..core.compensation import UndoState, undo_order
from ..core.entries import Phase
from ..core.ledger import SagaLedger
from ..errors import EncodingError, SagacityError, describe_error
from ..render import data_text, make_console, printable, saga_status, status_text, trace_lines
from ..stores import redacted_uri
from .base import CONTEXT_SETTINGS, cli, db_option, resolve_saga, with_journal, with_sagacity
from .timeline import timeline_table

__all__ = ["load_app", "saga"]


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


def connected_mcp_servers(agent: Any) -> Any:
    """Connect the agent graph's MCP servers for the time of a resume or recovery (their tools
    exist only once listed, and undos are calls on them); imported here, not at start-up, as the
    SDK is."""
    from ..sdk.mcp.registry import connected_mcp_servers as connect

    return connect(agent)


@cli.group(context_settings=CONTEXT_SETTINGS, short_help="Show, resume or recover sagas.")
def saga() -> None:
    """Operate on sagas: draw one's timeline, resume one waiting for approval, recover one left
    behind by a crash."""


@saga.command("show")
@click.argument("saga_id")
@db_option()
def saga_show(saga_id: str, db: str) -> None:
    """Draw one saga as a timeline: its runs, calls (durations, failures), undos (newest call
    first), approvals and their waits, on one time axis. SAGA_ID may be any unique prefix.
    The entries themselves: `sagacity journal show SAGA_ID`."""

    async def load(journal: Any) -> tuple[str, list[Any]]:
        sid = await resolve_saga(journal, saga_id)
        return sid, await journal.entries(sid)

    sid, entries = with_journal(db, load)
    console = make_console()
    console.print(Text.assemble(("saga ", "bold"), printable(sid), "  ",
                                status_text(saga_status(entries)), f"  ({len(entries)} entries)"))
    for line in trace_lines(entries):
        console.print(line, soft_wrap=True)
    console.print(timeline_table(entries, width=console.width))


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
        async with connected_mcp_servers(agent):  # MCP tools exist once their servers are listed
            return await sagacity.resume(saga_id, agent, context=context)

    result = with_sagacity(db, work)
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
    if report.in_doubt:
        console.print(data_text(
            f"  in doubt: a human must check the far side, then: sagacity saga resolve "
            f"{result.saga_id} SEQ --ran|--not-run --as NAME --reason TEXT (then recover again)"))
    if any(_UNDO_NOT_FOUND in item.detail for item in report.failed):
        console.print(data_text(
            "  undo not found: the agent given with --app declares no tool under the declaration "
            "id the journal names (module:qualname of the tool's function where it ran). Pass "
            "--app the agent whose module declares it, imported under that module name, or give "
            "the tool that id (compensable(..., declaration_id='ID')); then recover again"))
    if report.failed:
        console.print(data_text(
            "  undo failed: fix what its error names, then recover again (a failed undo is "
            "retried with the same idempotency key; it is not in doubt, `saga resolve` does not "
            "apply)"))


def _print_given_undo_data(console: Any, entries: list[Any]) -> None:
    """Before the undos run: each call a human answered "ran" with undo data, not undone yet,
    and the data its undo is about to get (read, not verified: the recovery verifies)."""
    ledger = SagaLedger(entries)
    for call in undo_order(ledger):
        payload = call.outcome.payload if isinstance(call.outcome.payload, dict) else {}
        if call.outcome.phase is not Phase.RESOLVED or payload.get("undo_data") is None \
                or ledger.undo_state(call)[0] is UndoState.UNDONE:
            continue
        console.print(data_text(
            f"  undo of seq {call.outcome.seq} {call.intent.tool} (call {call.intent.call_id}) gets "
            f"the undo data {payload.get('resolver')} gave: "
            f"{json.dumps(payload['undo_data'], sort_keys=True)}"))


_UNDO_NOT_FOUND = "no undo registered"
"""How ``core.compensation`` words a failed undo whose declaration this process does not have."""


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
    the saga's lease. With --all, every saga is verified first and every one that needs it is
    recovered in turn; a saga that does not verify (its first bad seq named) or whose entries
    cannot be read is reported, never skipped; exit 1 while any of them needs a human (or was
    refused).
    """
    if (saga_id is None) == (not recover_all):
        raise click.UsageError("give a SAGA_ID or --all (not both)")
    agent = load_app(app)
    console = make_console(highlight=False)
    if saga_id is not None:

        async def work(sagacity: Any) -> Any:
            _print_given_undo_data(console, await sagacity.journal.entries(saga_id))
            async with connected_mcp_servers(agent):  # undos through the servers of those names
                return await sagacity.recover(saga_id, agent)

        result = with_sagacity(db, work)
        _print_recovery(console, result)
        if result.status.value not in ("COMPENSATED", "COMPLETED"):
            raise SystemExit(1)
        return

    async def work_all(sagacity: Any) -> Any:
        async with connected_mcp_servers(agent):
            return await sagacity.recover_all(agent)

    outcomes = with_sagacity(db, work_all)
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
@click.option("--undo-data", "undo_data", metavar="JSON", default=None,
              help="With --ran: what the call's undo needs (e.g. '{\"booking_id\": \"B-1\"}'), "
                   "as its own outcome would have carried it.")
@click.option("--force", is_flag=True,
              help="Answer although the call's holder may still act (no recovery took its lease "
                   "over, or its deadline has not passed): only once you made sure that process "
                   "has stopped; journaled with --reason.")
@db_option()
def saga_resolve(saga_id: str, seq: int, ran: bool | None, resolver: str, reason: str,
                 undo_data: str | None, force: bool, db: str) -> None:
    """Answer an in-doubt call or undo (SEQ as `saga recover` lists it): journals RESOLVED.

    Then run `sagacity saga recover`: a call that ran is undone (when it has an undo) with the
    --undo-data given, one that did not is dropped, and the saga closes once nothing is in
    doubt. Refused (exit 1) on a saga that does not verify, is closed or running, when SEQ is
    not in doubt, and (without --force) until a recovery has taken the call's run over and
    reported it in doubt and the call's deadline has passed (the message says when).
    """
    if ran is None:
        raise click.UsageError("say what you found: --ran or --not-run")
    data = None
    if undo_data is not None:
        try:
            data = parse_json(undo_data)
        except EncodingError as exc:
            raise click.UsageError(f"--undo-data is not canonical JSON: {exc}") from exc

    async def work(sagacity: Any) -> Any:
        return await sagacity.resolve(saga_id, seq, ran=ran, resolver=resolver, reason=reason,
                                      undo_data=data, force=force)

    try:
        entry = with_sagacity(db, work)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    console = make_console(highlight=False)
    console.print(Text.assemble(
        f"resolved seq {entry.payload['target_seq']} ({entry.payload['target']}) of saga ",
        data_text(saga_id), f" as {entry.payload['answer']} by ", data_text(resolver),
        f" (RESOLVED seq {entry.seq})"), soft_wrap=True)
    if "undo_data" in entry.payload:
        console.print(data_text(f"  undo data: {json.dumps(entry.payload['undo_data'], sort_keys=True)}"))
    if "forced" in entry.payload:
        console.print(data_text(f"  forced: {entry.payload['forced']['reason']}"))
    console.print("recover the saga to act on it:", soft_wrap=True)
    console.print(Text(f"sagacity saga recover {shlex.quote(printable(saga_id))} --app module:attr "
                       f"--db {shlex.quote(redacted_uri(db))}"), soft_wrap=True)
