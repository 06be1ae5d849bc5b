"""``sagacity demo``: run the trip booking whose card charge fails, and show the saga undo it."""

from __future__ import annotations

import sqlite3

import click

from ..errors import ConfigurationError, JournalError, describe_error
from ..render import make_console
from ..stores import is_postgres_uri
from .base import UsageFailure, cli

__all__ = ["demo"]


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

    Exits 1 when the run raised (with --real-model: the API unreachable, a rejected key), 2
    without OPENAI_API_KEY.
    """
    if is_postgres_uri(db):
        raise UsageFailure(
            "the demo runs on an embedded SQLite file (--db PATH); for PostgreSQL see "
            "examples/multi_worker"
        )
    from ..demo import main as run_demo  # the demo imports the Agents SDK's testing helpers

    try:
        outcome = run_demo(db, real_model, console=make_console())
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc
    except (JournalError, sqlite3.Error) as exc:
        raise click.ClickException(f"demo failed: {exc}") from exc
    if outcome.run_error is not None:  # e.g. the model's API unreachable: never "try again", exit 0
        raise click.ClickException(f"demo failed: the run raised {describe_error(outcome.run_error)}")
