"""The ``sagacity`` command line's group, :func:`cli`, and what its command modules share.

Layout: one click group, :func:`cli`, declared here with the options and helpers its commands
share; one module per area hangs its subgroup on it (:mod:`.journal`, :mod:`.saga`,
:mod:`.approvals`, :mod:`.audit`, :mod:`.db`, :mod:`.demo`), and the package's ``__init__``
imports each of them so every group is registered. To add an area, write a module that imports
:func:`cli` from here, declares ``@cli.group()`` and hangs commands under it, then import it in
``cli/__init__.py``; use :func:`db_option` for the journal location and :func:`with_journal`
to run async journal code from a sync command (it opens the journal, runs the coroutine, and
closes the journal). Strings read from a journal are untrusted: render them with
:func:`~sagacity_agents.render.data_text` / :func:`~sagacity_agents.render.printable`.

Exit statuses: 0 success; 1 a chain failed verification (or the journal could not be read);
2 usage errors, including a journal file or saga id that does not exist.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from .. import __version__
from ..core.journal import Journal
from ..errors import ApprovalError, ConfigurationError, JournalError, SagacityError, describe_error
from ..render import printable
from ..settings import DB_ENVVAR, DEFAULT_JOURNAL_PATH
from ..stores import is_postgres_uri
from ..stores import open_journal as open_journal_at

__all__ = ["DB_ENVVAR", "UsageFailure", "cli", "db_option", "open_journal", "with_journal"]

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


def check_journal_file(db: str) -> None:
    """Refuse, as a usage error, a ``--db`` that names no journal: a missing file, a directory,
    a file that is not SQLite or a SQLite file without the journal table (a PostgreSQL URI is
    checked by the server when first used, naming ``sagacity db migrate``).

    Raises:
        UsageFailure: exit status 2, with the reason.
    """
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
    check_journal_file(db)
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


async def resolve_saga(journal: Journal, saga_id: str, also: Sequence[str] = ()) -> str:
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


def otel_if_installed() -> None:
    """Instrument with OpenTelemetry when the ``otel`` extra is installed (its global providers,
    set by the application or ``opentelemetry-instrument``; ``SAGACITY_OTEL=0``: never)."""
    if os.environ.get("SAGACITY_OTEL") == "0":
        return
    try:
        from ..otel import instrument_from_env  # noqa: PLC0415
    except ImportError:  # no otel extra: nothing imported, nothing instrumented
        return
    instrument_from_env()


def print_whole(console: Any, table: Any) -> None:
    """Print a rich table at its natural width, even past the terminal's (which then folds the
    lines): rich would otherwise shrink its columns and cut the ids in them with an ellipsis, and
    an id is typed next (``saga show ID``, ``approvals approve ID``)."""
    from rich.measure import Measurement

    console.width = max(console.width, Measurement.get(console, console.options.update_width(10_000), table).maximum)
    console.print(table)


_EXPORT = {"checked": False, "removed": False}


def keyless_export_off() -> None:
    """Take the Agents SDK's default trace processor out when it has no API key to export with.

    The SDK's default exporter sends traces to OpenAI's backend; without a key (no
    ``OPENAI_API_KEY``, no ``set_tracing_export_api_key``) it can export nothing and prints
    "OPENAI_API_KEY is not set, skipping trace export" on stderr for every trace, which a
    ``recover`` or ``resolve`` opens. Called before the application is loaded (``--app``): the
    processors it registers are kept, and :func:`keyless_export_back` puts the default one back
    if the application set a key. With a key nothing changes.
    """
    if _EXPORT["checked"]:
        return
    _EXPORT["checked"] = True
    from agents.tracing import set_trace_processors
    from agents.tracing.processors import default_exporter

    if not default_exporter().api_key:
        set_trace_processors([])  # only the SDK's default processor is registered so far
        _EXPORT["removed"] = True


def keyless_export_back() -> None:
    """After the application is loaded: the default processor back if it set an export key."""
    from agents.tracing import add_trace_processor
    from agents.tracing.processors import default_exporter, default_processor

    if _EXPORT["removed"] and default_exporter().api_key:
        add_trace_processor(default_processor())
        _EXPORT["removed"] = False


# Here, not in .saga: `approvals approve|reject` decide through the facade as well.
def with_sagacity(db: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(Sagacity(db))`` (journal and approval store in the same file) and close it."""
    check_journal_file(db)
    from ..sdk.facade import Sagacity  # imports the Agents SDK: only for commands that need it

    keyless_export_off()

    otel_if_installed()  # recover, resolve, approve, reject: spans joined to the run's trace

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
      sagacity saga show SAGA_ID         the saga as a timeline
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
