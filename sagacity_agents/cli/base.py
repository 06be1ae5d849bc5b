"""The ``sagacity`` command line: run the demo, read and verify saga journals.

Layout: one click group, :func:`cli`, with a subgroup per area (``journal`` here; ``approvals``
and ``saga`` in :mod:`sagacity_agents.cli.saga`). To add an area, declare ``@cli.group()`` and
hang commands under it; use :func:`db_option` for the journal location and :func:`with_journal`
to run async journal code from a sync command (it opens the journal, runs the coroutine, and
closes the journal). Strings read from a journal are untrusted: render them with
:func:`~sagacity_agents.render.data_text` / :func:`~sagacity_agents.render.printable`.

Exit statuses: 0 success; 1 a chain failed verification (or the journal could not be read);
2 usage errors, including a journal file or saga id that does not exist.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table
from rich.text import Text

from .. import __version__
from ..core.chain import (
    ChainHead,
    VerifyResult,
    heads_from_json,
    heads_of,
    heads_to_json,
    verify_journal,
)
from ..core.entries import JournalEntry
from ..core.evidence import verify_sagas
from ..core.journal import Journal
from ..errors import ConfigurationError, JournalError
from ..render import (
    data_text,
    journal_table,
    make_console,
    printable,
    saga_status,
    status_text,
    verify_text,
)
from ..settings import (
    CHECKPOINTS_ENVVAR,
    DB_ENVVAR,
    DECISION_KEYS_ENVVAR,
    DEFAULT_JOURNAL_PATH,
    KEYRING_ENVVAR,
    evidence_from,
)
from ..backends.postgres.setup import redacted_uri
from ..stores import is_postgres_uri
from ..stores import open_journal as open_journal_at

__all__ = ["DB_ENVVAR", "UsageFailure", "cli", "db_option", "main", "open_journal", "with_journal"]

T = TypeVar("T")

JOURNAL_TABLE = "sagacity_journal"

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UsageFailure(click.ClickException):
    """A usage error that is not about the command line's syntax (exit status 2): a journal
    file or saga id that does not exist."""

    exit_code = 2


def db_option(
    default: str = DEFAULT_JOURNAL_PATH, envvar: str | None = DB_ENVVAR
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--db PATH|URI`` option: the SQLite journal file or a ``postgresql://`` URI
    (``$SAGACITY_DB``, else ``sagacity.db``)."""
    source = f"${envvar}, else {default}" if envvar else default
    return click.option(
        "--db",
        "db",
        default=default,
        envvar=envvar,
        show_envvar=envvar is not None,
        metavar="PATH|URI",
        help=f"SQLite journal file or postgresql:// URI. Default: {source} (in the current "
        "directory).",
    )


def _check_journal_file(db: str) -> None:
    if is_postgres_uri(db):
        return  # the server reports a missing schema itself, naming `sagacity db migrate`
    path = Path(db)
    if not path.exists():
        raise UsageFailure(
            f"no journal at {db}: the file does not exist (pass --db PATH or set {DB_ENVVAR})"
        )
    if path.is_dir():
        raise UsageFailure(f"{db} is a directory, not a journal file")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return  # let the journal itself report what is wrong
    try:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (JOURNAL_TABLE,)
        ).fetchone()
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise UsageFailure(f"{db} is not a SQLite database") from exc
        return
    finally:
        conn.close()
    if found is None:
        raise UsageFailure(f"{db} is a SQLite database but not a sagacity journal (no {JOURNAL_TABLE} table)")


def open_journal(db: str) -> Journal:
    """Open an existing journal for reading; never creates a file.

    Raises:
        UsageFailure: the file does not exist or is not a sagacity journal (exit status 2).
    """
    _check_journal_file(db)
    try:
        return open_journal_at(db)
    except (JournalError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc


def with_journal(db: str, work: Callable[[Journal], Awaitable[T]], closing: Sequence[Any] = ()) -> T:
    """Open the journal at ``db``, run ``work(journal)`` to completion, close the journal and
    each of ``closing`` that has a ``close`` (a PostgreSQL checkpoint store's pool)."""
    journal = open_journal(db)

    async def run() -> T:
        try:
            return await work(journal)
        finally:
            await journal.close()
            for other in closing:
                close = getattr(other, "close", None)
                if close is not None:
                    await close()

    try:
        return asyncio.run(run())
    except (JournalError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc


async def _resolve_saga(journal: Journal, saga_id: str, also: Sequence[str] = ()) -> str:
    """``saga_id`` itself, or the one saga whose id starts with it (among the journal's sagas
    and ``also``, e.g. the sagas of a heads file)."""
    ids = list(dict.fromkeys([*await journal.saga_ids(), *also]))
    if saga_id in ids:
        return saga_id
    matches = [i for i in ids if i.startswith(saga_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = ", ".join(printable(m) for m in matches)
        raise UsageFailure(f"saga id prefix {saga_id!r} is ambiguous: {listed}")
    raise UsageFailure(f"no saga {saga_id!r} in this journal (see: sagacity journal list)")


def _load_heads(path: str) -> dict[str, ChainHead]:
    """The anchored heads in the JSON file at ``path``.

    Raises:
        UsageFailure: the file cannot be read or is not a heads file (exit status 2).
    """
    try:
        data = json.loads(Path(path).read_text("utf-8"))
        return heads_from_json(data)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageFailure(f"{path} is not a heads file written by `sagacity journal heads`: {exc}") from exc


# --- the group ------------------------------------------------------------------------------
@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="sagacity")
def cli() -> None:
    """Saga semantics for OpenAI Agents SDK tool calls.

    Every wrapped tool call is journaled in a tamper-evident hash chain; when a call fails, the
    effects already made are undone in reverse order. This command runs the demo and reads,
    shows and verifies journals.

    \b
    Start here:
      sagacity demo                      run a trip booking whose card charge fails
      sagacity journal list              the sagas in a journal
      sagacity journal show SAGA_ID      one saga's entries
      sagacity journal verify            re-check every hash chain
      sagacity journal heads --out F     export each chain's head (keep F elsewhere)
      sagacity journal verify --heads F  also check the chains against those heads
      sagacity approvals list            calls paused for a human decision
      sagacity saga resume SAGA_ID --app MODULE:ATTR
                                         continue a saga once its approvals are decided
      sagacity saga recover SAGA_ID --app MODULE:ATTR
                                         undo what a crashed process left behind

    Journal commands read the SQLite file or postgresql:// URI named by --db, else
    $SAGACITY_DB, else sagacity.db in the current directory. A PostgreSQL database is set up
    (and upgraded) with `sagacity db migrate --db URI`.
    """


# --- demo -----------------------------------------------------------------------------------
@cli.command(short_help="Run a trip booking whose card charge fails; watch the saga undo it.")
@click.option(
    "--db",
    "db",
    default="sagacity-demo.db",
    show_default=True,
    metavar="PATH",
    help="Journal file the demo writes (created if missing; earlier sagas are kept). The demo's "
    "booking system goes next to it, in PATH.booking.db.",
)
@click.option(
    "--real-model",
    is_flag=True,
    help="Drive the agent with a real OpenAI model (needs OPENAI_API_KEY; SAGACITY_DEMO_MODEL "
    "picks the model) instead of the deterministic scripted one.",
)
def demo(db: str, real_model: bool) -> None:
    """Run a trip booking whose last step fails, and show what the saga did about it.

    The agent books a flight, then a hotel, then charges a card that is declined. The demo shows
    that the Agents SDK hid the failure from the run (the model was told "an error occurred" and
    still said the trip was booked), that the saga journaled it and undid the hotel and then the
    flight, that the booking system ends with nothing booked and nothing charged, the journal
    itself, and its hash chain verified. Offline and deterministic unless --real-model.
    """
    if is_postgres_uri(db):
        raise UsageFailure(
            "the demo runs on an embedded SQLite file (--db PATH); for PostgreSQL see "
            "examples/multi_worker"
        )
    from ..demo import main as run_demo  # the demo imports the Agents SDK's testing helpers

    try:
        run_demo(db, real_model, console=make_console())
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc
    except (JournalError, sqlite3.Error) as exc:
        raise click.ClickException(f"demo failed: {exc}") from exc


# --- journal --------------------------------------------------------------------------------
@cli.group(context_settings=CONTEXT_SETTINGS, short_help="List, show, verify and anchor saga journals.")
def journal() -> None:
    """Read and verify saga journals (read-only; a missing file is an error, never created).

    A journal holds one hash chain per saga: every entry's hash covers its content and the
    previous entry's hash, so an edited, inserted or reordered entry, or one removed from the
    middle, is detected by `verify`. Removing a saga's last entries, or rewriting its tail
    consistently, is only detected against heads exported earlier (`heads`, then
    `verify --heads`). SAGA_ID arguments accept any unique prefix of the id.
    """


@journal.command("list")
@db_option()
def journal_list(db: str) -> None:
    """List the sagas in the journal, oldest first.

    For each saga: its id, how many entries it has, when its first and last entries were
    recorded (UTC), and its status: the final status from SAGA_CLOSED (COMPLETED, COMPENSATED,
    COMPENSATION_FAILED, IN_DOUBT...), or OPEN with the last phase recorded.
    """

    async def load(j: Journal) -> list[tuple[str, list[JournalEntry]]]:
        return [(sid, await j.entries(sid)) for sid in await j.saga_ids()]

    sagas = with_journal(db, load)
    console = make_console()
    if not sagas:
        console.print(f"no sagas in {redacted_uri(db)}")
        return
    table = Table(title=f"{len(sagas)} saga(s) in {redacted_uri(db)}", title_justify="left", header_style="bold")
    table.add_column("saga id", no_wrap=True)
    table.add_column("entries", justify="right")
    table.add_column("first recorded (UTC)", no_wrap=True)
    table.add_column("last recorded (UTC)", no_wrap=True)
    table.add_column("status")
    for sid, entries in sagas:
        first = entries[0].recorded_at.replace("T", " ").rstrip("Z") if entries else ""
        last = entries[-1].recorded_at.replace("T", " ").rstrip("Z") if entries else ""
        table.add_row(data_text(sid), str(len(entries)), data_text(first), data_text(last),
                      status_text(saga_status(entries)))
    console.print(table)


@journal.command("show")
@click.argument("saga_id")
@db_option()
@click.option("--full", is_flag=True, help="Show whole payloads (as JSON) and whole hashes.")
def journal_show(saga_id: str, db: str, full: bool) -> None:
    """Show one saga's journal entries as a table.

    Columns: sequence number, phase (INTENT yellow, EXECUTED green, FAILED red, REFUSED magenta,
    COMPENSATING / COMPENSATED cyan / blue, COMPENSATION_FAILED bold red, saga-level entries
    dim), tool, the model's call id, when it was recorded (UTC), a summary of its payload, and
    the start of its hash. SAGA_ID may be any unique prefix of the id.
    """

    async def load(j: Journal) -> tuple[str, list[JournalEntry]]:
        sid = await _resolve_saga(j, saga_id)
        return sid, await j.entries(sid)

    sid, entries = with_journal(db, load)
    console = make_console()
    title = Text.assemble(
        ("saga ", "bold"), printable(sid), "  ", status_text(saga_status(entries)),
        f"  ({len(entries)} entries)",
    )
    console.print(title)
    console.print(journal_table(entries, full=full, width=console.width))


@journal.command("verify", short_help="Re-verify hash chains; exit 1 if one is broken.")
@click.argument("saga_id", required=False)
@db_option()
@click.option(
    "--heads",
    "heads_file",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="Also check each saga against the head `sagacity journal heads` exported to FILE: it "
    "must still have an entry at that seq with exactly that hash (else truncated, head "
    "mismatch or missing saga).",
)
@click.option("--checkpoints", "checkpoints", envvar=CHECKPOINTS_ENVVAR, show_envvar=True, metavar="DIR|URI",
              default=None,
              help="Also check each saga against its newest signed checkpoint in DIR or the "
              "postgresql:// URI's checkpoint table (needs --keyring).")
@click.option("--keyring", "keyring", envvar=KEYRING_ENVVAR, show_envvar=True, metavar="DIR",
              type=click.Path(file_okay=False), default=None,
              help="Verify checkpoint and decision signatures with the KEY_ID.pub files in DIR; "
              "every APPROVED entry must then carry a valid decision signature.")
@click.option("--decision-keys", "decision_keys", envvar=DECISION_KEYS_ENVVAR, show_envvar=True,
              metavar="ID,ID", default=None,
              help="Only these key ids may sign decisions (with --keyring).")
def journal_verify(saga_id: str | None, db: str, heads_file: str | None, checkpoints: str | None,
                   keyring: str | None, decision_keys: str | None) -> None:
    """Re-verify the hash chain of one saga, or of every saga in the journal.

    Re-hashes every entry's stored bytes, checks each link to the previous entry, the sequence
    numbers, and that the indexed columns match the hashed content. Prints one `verify: ok` line
    per intact saga; for a broken chain, prints the saga, the first bad sequence number, the
    fault and its detail, and exits with status 1.

    The chain alone cannot show that a saga's last entries (or all of them) were removed, or
    that its tail was rewritten consistently. With --heads FILE, every saga listed in FILE must
    still hold an entry at the listed seq with exactly the listed hash; a saga missing from the
    journal, a missing seq (truncated) or another hash (rewritten) exits with status 1. Sagas
    newer than FILE are verified without an anchor.

    With --checkpoints and --keyring (docs/threat-model.md), each saga is also checked against
    its newest signed checkpoint (a truncated tail, a deleted close, a re-sealed rewrite, a
    deleted saga) and every APPROVED entry must carry a valid decision signature.
    """
    heads = _load_heads(heads_file) if heads_file is not None else None
    evidence = None
    if checkpoints or keyring:
        try:
            evidence = evidence_from(checkpoints, keyring, decision_keys=decision_keys)
        except ConfigurationError as exc:
            raise UsageFailure(str(exc)) from exc

    async def check(j: Journal) -> list[VerifyResult]:
        sid = await _resolve_saga(j, saga_id, also=list(heads or ())) if saga_id is not None else None
        if sid is not None and heads is not None and sid not in heads:
            raise UsageFailure(f"{heads_file} lists no head for saga {printable(sid)}")
        return await verify_sagas(j, sid, heads=heads, evidence=evidence)

    results = with_journal(db, check, closing=[evidence.checkpoints] if evidence else [])
    console = make_console(highlight=False)
    if not results:
        console.print(f"verify: no sagas in {redacted_uri(db)}")
        return
    for result in results:
        console.print(verify_text(result))
    broken = [r for r in results if not r.ok]
    if heads is not None:
        anchored = sum(1 for r in results if r.anchor is not None)
        console.print(f"checked {anchored} saga(s) against the heads in {heads_file}")
    if broken:
        console.print(Text(f"{len(broken)} of {len(results)} saga chain(s) BROKEN", style="bold red"))
        raise SystemExit(1)


@journal.command("heads", short_help="Export each chain's head (seq and hash) as JSON.")
@click.argument("saga_id", required=False)
@db_option()
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, writable=True),
    metavar="FILE",
    help="Write the JSON to FILE instead of standard output.",
)
def journal_heads(saga_id: str | None, db: str, out: str | None) -> None:
    """Export the head of each saga's chain (or of SAGA_ID's) as JSON: an anchor.

    Output: {"SAGA_ID": {"seq": N, "hash": H}, ...}, the last entry of every chain. Keep it
    where the journal's writers cannot change it (a WORM bucket, a ticket, a signed commit);
    later, `sagacity journal verify --heads FILE` detects what the chain alone cannot: removed
    last entries, a removed saga, a consistently rewritten tail. The chains are verified first;
    if one is broken nothing is exported and the status is 1.
    """

    async def check(j: Journal) -> list[VerifyResult]:
        sid = await _resolve_saga(j, saga_id) if saga_id is not None else None
        return await verify_journal(j, sid)

    results = with_journal(db, check)
    broken = [r for r in results if not r.ok]
    if broken:
        console = make_console(highlight=False, stderr=True)
        for result in broken:
            console.print(verify_text(result))
        console.print(Text(f"{len(broken)} saga chain(s) BROKEN: no heads exported", style="bold red"))
        raise SystemExit(1)
    heads = heads_of(results)
    document = json.dumps(heads_to_json(heads), indent=2, ensure_ascii=True) + "\n"
    if out is None:
        click.echo(document, nl=False)
        return
    try:
        Path(out).write_text(document, "utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc}") from exc
    make_console(highlight=False).print(f"wrote the heads of {len(heads)} saga(s) to {out}")


# --- db -------------------------------------------------------------------------------------
@cli.group(context_settings=CONTEXT_SETTINGS, short_help="Create or upgrade a PostgreSQL schema.")
def db() -> None:
    """Manage the PostgreSQL schema (SQLite files create their tables when opened)."""


@db.command(short_help="Apply the schema migrations a PostgreSQL database is missing.")
@db_option()
@click.option("--checkpoints", "checkpoints", envvar=CHECKPOINTS_ENVVAR, show_envvar=True,
              metavar="URI", default=None,
              help="Also migrate the signed-checkpoint schema at this postgresql:// URI "
              "(its own schema, default sagacity_checkpoints; a directory needs nothing).")
@click.option("--checkpoints-only", is_flag=True,
              help="Migrate the checkpoint schema only (e.g. as its own owner), not the journal.")
def migrate(db: str, checkpoints: str | None, checkpoints_only: bool) -> None:
    """Apply the versioned schema migrations the PostgreSQL database at --db is missing, and
    those of the signed-checkpoint schema at --checkpoints when it is a postgresql:// URI.

    Idempotent, and safe when several processes run it at once (an advisory lock serializes
    them). Run it with a role that may create tables; the application itself may then run with
    a role that can only SELECT and INSERT journal rows and checkpoints (see docs/postgres.md).
    """
    from ..backends.postgres.checkpoints import PostgresCheckpointStore
    from ..backends.postgres.setup import migrate as apply_migrations

    pg_checkpoints = checkpoints is not None and is_postgres_uri(checkpoints)
    if checkpoints_only and not pg_checkpoints:
        raise UsageFailure("--checkpoints-only needs --checkpoints postgresql://... (or $SAGACITY_CHECKPOINTS)")
    journal = not checkpoints_only and (is_postgres_uri(db) or not pg_checkpoints)
    if journal and not is_postgres_uri(db):
        raise UsageFailure(
            f"--db {db} is not a postgresql:// URI: SQLite files create their tables when opened"
        )
    console = make_console(highlight=False)
    try:
        if journal:
            applied = asyncio.run(apply_migrations(db))
            console.print(f"applied migration(s) {', '.join(map(str, applied))}: schema is current"
                          if applied else "schema is current: nothing to apply")
        if pg_checkpoints:
            assert checkpoints is not None
            store = PostgresCheckpointStore(checkpoints)
            applied = asyncio.run(apply_migrations(store.database.conninfo, migration_set=store.migration_set))
            done = f"applied migration(s) {', '.join(map(str, applied))}" if applied else "nothing to apply"
            console.print(f"checkpoint schema {store.schema} is current: {done}")
    except (JournalError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``sagacity`` script."""
    # The audit, approvals and saga groups are registered by the package (cli/__init__.py),
    # which Python imports before this module.
    cli.main(args=list(argv) if argv is not None else None, prog_name="sagacity")


if __name__ == "__main__":  # pragma: no cover
    main()
