"""``sagacity saga show|resume|recover|resolve``: draw a saga's timeline, resume and recover
sagas, answer in-doubt calls.

``saga resume`` loads the application's agent with ``--app module:attr``, the one convention for
commands that need the user's agents and undos: ``attr`` is an ``Agent``, or a callable taking no
arguments that returns one (:func:`load_app`); for ``saga recover``, also a callable taking the
saga's scope (``app(scope)``), so that each tenant's saga is recovered with its own agent.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import importlib
import inspect
import json
import shlex
import sys
from typing import Any

import click
from rich.text import Text

from ..core.canonical import parse_json
from ..core.compensation import UndoState, undo_order
from ..core.entries import Phase
from ..core.erasure import erasure_state
from ..core.ledger import SagaLedger
from ..core.scrub import scrub_text, scrub_value
from ..core.shown import read_shown
from ..errors import EncodingError, SagacityError, describe_error
from ..render import data_text, make_console, printable, saga_status, status_text, trace_lines
from ..stores import redacted_uri
from .base import (
    CONTEXT_SETTINGS, cli, db_option, keyless_export_back, keyless_export_off, resolve_saga,
    with_journal, with_sagacity,
)
from .timeline import timeline_table

__all__ = ["answerable_from", "command_line", "load_app", "saga"]


def load_app(spec: str, *, scoped: bool = False) -> Any:
    """Load the application's agent from ``module:attr``.

    ``attr`` (dotted attributes allowed) is an ``Agent``, or a callable with no arguments
    returning one. With ``scoped`` (``saga recover``), it may also be a callable taking the
    saga's scope (one parameter named ``scope``, or one required positional parameter) that
    returns that scope's agent: it is returned as it is, and called per saga. The current
    directory is importable, as with ``python -m``.

    Raises:
        click.UsageError: the spec is malformed, or the module or attribute cannot be found, or
            it is not an Agent nor a callable returning one (a scope callable without
            ``scoped``).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.UsageError(f"--app takes MODULE:ATTR, got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    keyless_export_off()  # before the application registers trace processors of its own
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise click.UsageError(f"cannot load --app {spec!r}: {exc}") from exc
    finally:
        keyless_export_back()
    from agents import Agent

    if not isinstance(obj, Agent) and callable(obj):
        if _takes_scope(obj):
            if scoped:
                return obj
            raise click.UsageError(f"--app {spec!r} takes a scope; this command needs an Agent "
                                   "or a callable with no arguments returning one")
        obj = obj()
    if not isinstance(obj, Agent):
        raise click.UsageError(f"--app {spec!r} is not an Agent nor a callable returning one")
    return obj


def _takes_scope(app: Any) -> bool:
    """Whether ``app`` is called with a saga's scope: a parameter named ``scope``, or exactly
    one parameter that must be given."""
    try:
        params = list(inspect.signature(app).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.name == "scope" for p in params):
        return True
    required = [p for p in params if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) == 1


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
    The entries themselves: `sagacity journal show SAGA_ID`. Sensitive values show as their
    mask, `[erased]` once the saga's data key was erased."""

    async def load(journal: Any) -> tuple[str, list[Any], Any]:
        sid = await resolve_saga(journal, saga_id)
        return sid, await read_shown(journal, sid), await erasure_state(journal, sid)

    sid, entries, erasure = with_journal(db, load)
    console = make_console()
    console.print(Text.assemble(("saga ", "bold"), printable(sid), "  ",
                                status_text(saga_status(entries)), f"  ({len(entries)} entries)"))
    erased = erasure.describe() if erasure is not None else None
    if erased is not None:  # an erasure, and values a late outcome wrote after it (for a human)
        console.print(data_text(erased), soft_wrap=True)
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
        console.print(data_text(f"run raised: {scrub_text(describe_error(result.exception))}"))
    for request in result.approvals:
        console.print(data_text(f"waiting again: {request.request_id} ({request.tool})"))
    if not result.ok and result.status.value != "AWAITING_APPROVAL":
        raise SystemExit(1)


def _print_recovery(console: Any, result: Any, app: str, db: str,
                    answerable: dict[int, str] | None = None) -> None:
    """One saga's recovery: its status, one line per report item, then what to run next (each
    command on a line of its own, runnable as printed)."""
    console.print(status_text(result.status.value), data_text(f"saga {result.saga_id}"))
    report = result.report
    if report is None:
        return
    for label, items in (("undone", report.undone), ("undo failed", report.failed),
                         ("in doubt", report.in_doubt), ("no undo", report.no_undo),
                         ("kept (irreversible)", report.kept_irreversible),
                         ("approved, never ran", report.approved_not_run),
                         ("answer contradicted", report.contradicted)):
        for item in items:
            detail = scrub_text(item.detail)  # an undo's error may quote a card number
            console.print(data_text(f"  {label}: seq {item.seq} {item.tool} (call {item.call_id}) {detail}"),
                          soft_wrap=True)
    if any(_UNDO_NOT_FOUND in item.detail for item in report.failed):
        console.print(data_text(
            "  undo not found: the agent given with --app declares no tool under the declaration "
            "id the journal names (module:qualname of the tool's function where it ran). Pass "
            "--app the agent whose module declares it, imported under that module name, or give "
            "the tool that id (compensable(..., declaration_id='ID')); then recover again"), soft_wrap=True)
    if report.failed:
        console.print(data_text(
            "  undo failed: fix what its error names, then recover again (a failed undo is "
            "retried with the same idempotency key; it is not in doubt, `saga resolve` does not "
            "apply)"), soft_wrap=True)
    _print_next(console, result, app, db, answerable or {})


def command_line(*words: str) -> str:
    """``words`` as one shell command line (each quoted as the shell needs it)."""
    return " ".join(shlex.quote(printable(word)) for word in words)


def _operator() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container's bare uid): a plain word
        return "operator"


_ANSWERS = (("--ran", "far side checked: the effect is there"),
            ("--not-run", "far side checked: nothing there"))


def _print_next(console: Any, result: Any, app: str, db: str, answerable: dict[int, str]) -> None:
    """After a recovery that left the saga open: the `resolve` commands for each call in doubt
    (one per answer; --as and --reason are journaled: put who checked and what was found), and
    the `recover` to run after them."""
    if result.status.value in ("COMPENSATED", "COMPLETED"):
        return
    where = ("--db", redacted_uri(db))
    in_doubt = result.report.in_doubt if result.report is not None else ()
    if in_doubt:
        console.print("  in doubt: a human checks the far side for each call, then journals what "
                      "was found (edit --as and --reason: both are journaled), one of:", soft_wrap=True)
    for item in in_doubt:
        if item.seq in answerable:
            console.print(f"  seq {item.seq} can be answered from {answerable[item.seq]} (its "
                          "deadline and one lease period past):", soft_wrap=True)
        for flag, reason in _ANSWERS:
            console.print(Text("    " + command_line(
                "sagacity", "saga", "resolve", result.saga_id, str(item.seq), flag, "--as", _operator(),
                "--reason", reason, "--app", app, *where)), soft_wrap=True)
    console.print("  then recover it again:", soft_wrap=True)
    console.print(Text("    " + command_line("sagacity", "saga", "recover", result.saga_id, "--app", app, *where)),
                  soft_wrap=True)


async def answerable_from(journal: Any, saga_id: str, seqs: Any) -> dict[int, str]:
    """In-doubt INTENT seq -> when a human's answer will be accepted, for those whose INTENT
    deadline has not passed yet, judged by the rule ``resolve`` applies
    (``core.resolution.answerable_at``)."""
    from ..core.entries import Phase
    from ..core.resolution import answerable_at

    wanted = set(seqs)
    if not wanted:
        return {}
    entries = await journal.entries(saga_id)
    now = dt.datetime.now(dt.timezone.utc)
    found = {}
    for entry in entries:
        if entry.seq not in wanted or entry.phase is not Phase.INTENT:
            continue
        at, _how = answerable_at(entries, entry, "call")
        if at > now:
            found[entry.seq] = at.isoformat().replace("+00:00", "Z")
    return found


def _servers_of(agent: Any) -> Any:
    """:func:`connected_mcp_servers` of an agent; a scope callable connects its own agents'."""
    from agents import Agent

    return connected_mcp_servers(agent) if isinstance(agent, Agent) else contextlib.nullcontext()


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
            f"{json.dumps(scrub_value(payload['undo_data']), sort_keys=True)}"))


_UNDO_NOT_FOUND = "no undo registered"
"""How ``core.compensation`` words a failed undo whose declaration this process does not have."""


@saga.command("recover")
@click.argument("saga_id", required=False)
@click.option("--all", "recover_all", is_flag=True,
              help="Every saga whose run lease expired without RUN_ENDED, or left IN_DOUBT / "
                   "COMPENSATION_FAILED, or opened a lease period ago with no run started (never "
                   "one waiting for approval, idle or running).")
@click.option("--app", "app", required=True, metavar="MODULE:ATTR",
              help="The agent whose tool declarations hold the undos, a no-argument callable "
                   "returning it, or a callable given each saga's scope (app(scope)) returning "
                   "that scope's agent.")
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
    agent = load_app(app, scoped=True)
    console = make_console(highlight=False)
    if saga_id is not None:

        async def work(sagacity: Any) -> Any:
            _print_given_undo_data(console, await sagacity.journal.entries(saga_id))
            async with _servers_of(agent):  # undos through the servers of those names
                done = await sagacity.recover(saga_id, agent)
            return done, await _answerable(sagacity, done)

        result, answerable = with_sagacity(db, work)
        _print_recovery(console, result, app, db, answerable)
        if result.status.value not in ("COMPENSATED", "COMPLETED"):
            raise SystemExit(1)
        return

    async def work_all(sagacity: Any) -> Any:
        async with _servers_of(agent):
            done = await sagacity.recover_all(agent)
        return [(sid, why, outcome, {} if isinstance(outcome, SagacityError)
                 else await _answerable(sagacity, outcome)) for sid, why, outcome in done]

    outcomes = with_sagacity(db, work_all)
    if not outcomes:
        console.print("no saga needs recovery")
        return
    needs_human = 0
    for sid, why, outcome, answerable in outcomes:
        console.print(data_text(f"saga {sid}: {why}"), soft_wrap=True)
        if isinstance(outcome, SagacityError):
            needs_human += 1
            console.print(Text.assemble(status_text("REFUSED"), " ", data_text(describe_error(outcome))),
                          soft_wrap=True)
            continue
        _print_recovery(console, outcome, app, db, answerable)
        needs_human += outcome.status.value not in ("COMPENSATED", "COMPLETED")
    console.print(f"{len(outcomes)} saga(s) recovered, {needs_human} need a human", soft_wrap=True)
    if needs_human:
        raise SystemExit(1)


async def _answerable(sagacity: Any, result: Any) -> dict[int, str]:
    seqs = [item.seq for item in result.report.in_doubt] if result.report is not None else []
    return await answerable_from(sagacity.journal, result.saga_id, seqs)


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
@click.option("--app", "app", default=None, metavar="MODULE:ATTR",
              help="The agent `saga recover` takes: only named in the command printed next.")
@db_option()
def saga_resolve(saga_id: str, seq: int, ran: bool | None, resolver: str, reason: str,
                 undo_data: str | None, force: bool, app: str | None, db: str) -> None:
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
        shown = scrub_value(entry.payload["undo_data"])  # masks, as journal show has it
        console.print(data_text(f"  undo data: {json.dumps(shown, sort_keys=True)}"))
    if "forced" in entry.payload:
        console.print(data_text(f"  forced: {entry.payload['forced']['reason']}"))
    if app is None:
        console.print("recover the saga to act on it: `sagacity saga recover` with your "
                      "application's agent (--app MODULE:ATTR; give --app here to get the command)",
                      soft_wrap=True)
        return
    console.print("recover the saga to act on it:", soft_wrap=True)
    console.print(Text(command_line("sagacity", "saga", "recover", saga_id, "--app", app,
                                    "--db", redacted_uri(db))), soft_wrap=True)
