"""``sagacity demo``: run the trip agent under a saga and tell the story of what happened.

The agent books a flight, books a hotel, then charges the card, which is declined. The demo runs
with :attr:`FailurePolicy.CONTINUE` so that the model gets to react to the failure: the Agents
SDK turns the exception into a generic error message, and the (scripted) model answers "Your trip
is booked!". The saga, meanwhile, journaled the failure; the agent's output guardrail
(``saga_output_guardrail``) withholds that false success, and when the run ended the saga undid
the hotel and then the flight. (With the default policy, STOP, the run would end right after the
failed call and the model would never get to answer.)
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import OutputGuardrailTripwireTriggered, RunConfig, set_tracing_disabled
from agents.testing import ScriptedModel
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.chain import VerifyResult
from ..core.entries import JournalEntry
from ..core.saga import FailurePolicy
from ..core.sensitive import DEFAULT_SENSITIVITY, redact_text
from ..backends.sqlite.journal import SqliteJournal
from ..errors import ConfigurationError, describe_error
from ..render import journal_table, make_console, status_text, verify_text
from ..sdk.facade import Sagacity
from ..sdk.results import SagaResult
from .booking import BookingCounts, BookingSystem
from .trip import TRIP_REQUEST, build_agent

__all__ = ["DEFAULT_DEMO_DB", "TripOutcome", "booking_path_for", "main", "render", "run_trip"]

DEFAULT_DEMO_DB = "sagacity-demo.db"
"""Journal file the demo writes when no path is given."""


@dataclass(frozen=True)
class TripOutcome:
    """Everything the demo observed."""

    journal_path: str
    """The saga journal (SQLite)."""
    booking_path: str
    """The booking system's own database."""
    result: SagaResult
    """What ``Sagacity.run`` returned."""
    told_model: tuple[str, ...]
    """The tool outputs the model received for the failed call(s): what the SDK told it."""
    counts: BookingCounts
    """The booking system's state after the run."""
    entries: tuple[JournalEntry, ...]
    """The saga's journal entries."""
    verify: VerifyResult
    """The chain verification of the saga."""
    real_model: bool
    """Whether a real OpenAI model drove the agent."""
    withheld_output: str | None = None
    """The model's final answer the saga's output guardrail withheld (``None``: none withheld)."""

    @property
    def run_error(self) -> BaseException | None:
        """What the run raised when it could not run as the demo means it to (the model
        unreachable, a rejected API key...): ``None`` when it ran, including when the saga's
        output guardrail withheld the model's answer, which is the demo's point."""
        error = self.result.exception
        return None if isinstance(error, OutputGuardrailTripwireTriggered) else error


def booking_path_for(journal_path: str | Path) -> str:
    """The booking system's database next to the journal: ``<journal>.booking.db``."""
    return f"{journal_path}.booking.db"


def _outputs_for(items: Any, call_ids: set[str | None]) -> tuple[str, ...]:
    return tuple(
        str(item.get("output"))
        for item in items or []
        if isinstance(item, dict)
        and item.get("type") == "function_call_output"
        and item.get("call_id") in call_ids
    )


async def run_trip(
    journal_path: str | Path = DEFAULT_DEMO_DB,
    *,
    booking_path: str | Path | None = None,
    real_model: bool = False,
) -> TripOutcome:
    """Run the trip agent once under a saga (policy CONTINUE) and collect what happened.

    Args:
        journal_path: SQLite journal file (created if missing; earlier sagas are kept).
        booking_path: the booking system's file; ``<journal_path>.booking.db`` if ``None``.
            It is emptied first, so the demo always starts from a clean system.
        real_model: drive the agent with the SDK's default OpenAI model (needs
            ``OPENAI_API_KEY``) instead of the scripted one.

    Raises:
        ConfigurationError: ``real_model`` without ``OPENAI_API_KEY``.
    """
    if real_model and not os.environ.get("OPENAI_API_KEY"):
        raise ConfigurationError("--real-model needs OPENAI_API_KEY in the environment")
    if not real_model:
        set_tracing_disabled(True)  # the scripted demo never talks to the network
    booking_file = str(booking_path) if booking_path is not None else booking_path_for(journal_path)
    booking = BookingSystem(booking_file, reset=True)
    agent = build_agent(booking, real_model=real_model)
    sagacity = Sagacity(SqliteJournal(journal_path), policy=FailurePolicy.CONTINUE)
    try:
        # The request and charge_card's arguments hold the card number: the SDK's own spans
        # would record them in clear (docs/sensitive-data.md, "Outside the guarantee").
        result = await sagacity.run(agent, TRIP_REQUEST, max_turns=12,
                                    run_config=RunConfig(trace_include_sensitive_data=False))
        failed_ids = {f.call_id for f in result.failures}
        if isinstance(agent.model, ScriptedModel) and agent.model.calls:
            told = _outputs_for(agent.model.calls[-1].input, failed_ids)
        elif result.run_result is not None:
            told = _outputs_for(result.run_result.to_input_list(), failed_ids)
        else:
            told = ()
        withheld = None
        if result.output_withheld and isinstance(result.exception, OutputGuardrailTripwireTriggered):
            withheld = str(result.exception.guardrail_result.agent_output)
        entries = tuple(await sagacity.journal.entries(result.saga_id))
        (verified,) = await sagacity.verify(result.saga_id)
    finally:
        await sagacity.aclose()
    return TripOutcome(
        journal_path=str(journal_path),
        booking_path=booking_file,
        result=result,
        told_model=told,
        counts=booking.counts(),
        entries=entries,
        verify=verified,
        real_model=real_model,
        withheld_output=withheld,
    )


def _step(console: Console, number: int, title: str) -> None:
    console.print()
    console.rule(Text(f"{number}. {title}", style="bold"), align="left")


def _quote(text: str) -> Text:
    return Text(f"“{text}”", style="italic")


def _counts_table(counts: BookingCounts) -> Table:
    table = Table(header_style="bold", title_justify="left")
    table.add_column("table")
    table.add_column("live", justify="right")
    table.add_column("undone / not taken", justify="right")
    live = "bold red" if not counts.empty else "green"
    table.add_row("flights", Text(f"{counts.flights_booked} booked", live),
                  f"{counts.flights_cancelled} cancelled")
    table.add_row("hotels", Text(f"{counts.hotels_booked} booked", live),
                  f"{counts.hotels_cancelled} cancelled")
    table.add_row("charges", Text(f"{counts.charges_captured} captured", live),
                  f"{counts.charges_declined} declined, {counts.charges_refunded} refunded")
    return table


def _intro(outcome: TripOutcome, console: Console) -> None:
    model = "a real OpenAI model" if outcome.real_model else "scripted (deterministic, offline)"
    console.print(
        Panel.fit(
            Text.assemble(
                ("sagacity demo: a trip booking whose last step fails\n\n", "bold"),
                "The agent books a flight, then a hotel, then charges the card. The card is declined.\n",
                f"Model: {model}. Failure policy: CONTINUE, so the model gets to react to the failure\n",
                "(the default, STOP, ends the run right after the failed call).\n",
                "Output guardrail: saga_output_guardrail(), which withholds an answer the saga "
                "contradicts.",
            ),
            border_style="cyan",
        )
    )
    # The request quotes the traveller's card number: printed with it masked, as the journal
    # holds it (core.sensitive: card numbers are found inside free text too).
    shown = redact_text(TRIP_REQUEST, DEFAULT_SENSITIVITY) or TRIP_REQUEST
    console.print(Text.assemble(("Request: ", "bold"), _quote(shown)))


def _story(outcome: TripOutcome, console: Console) -> None:
    """Steps 1-3: the SDK hid the failure, the saga caught it, the undo in reverse order."""
    result = outcome.result
    _step(console, 1, "The Agents SDK hid the failure")
    console.print(f"{result.failures[0].tool} raised an exception. What the model was told instead:")
    for output in outcome.told_model or ("(no tool output found)",):
        console.print(Text.assemble("  ", _quote(output)))
    if result.final_output is not None:
        console.print("The run returned normally. Its final output:")
        console.print(Text.assemble("  ", _quote(str(result.final_output))))
    elif outcome.withheld_output is not None:
        console.print("Then the model answered:")
        console.print(Text.assemble("  ", _quote(outcome.withheld_output)))
    elif result.exception is not None:
        console.print(f"The run raised: {describe_error(result.exception)}")
    console.print(
        Text(
            "Without a saga, that would be the end of it: a flight and a hotel booked, "
            "nothing paid, and an agent telling the traveller all is well.",
            style="yellow",
        )
    )
    if outcome.withheld_output is not None:
        console.print(Text(
            "With one, the saga's output guardrail withheld that false success: final_output "
            "is None, and the result says why:", style="bold green"))
        console.print(Text.assemble("  ", (result.withheld_reason or "", "green")))

    _step(console, 2, "The saga caught it")
    console.print(Text.assemble(("saga:   ", "bold"), result.saga_id))
    console.print(Text.assemble(("status: ", "bold"), status_text(result.status.value)))
    for failure in result.failures:
        detail = f"{failure.tool} (call {failure.call_id}, journal seq {failure.seq}): {failure.error}"
        console.print(Text.assemble(("failed: ", "bold"), (detail, "red")))

    _step(console, 3, "Undone in reverse order")
    report = result.report
    for n, item in enumerate(report.undone if report else (), start=1):
        console.print(
            Text.assemble(f"  {n}. ", (item.tool or "?", "cyan"),
                          f" (EXECUTED at seq {item.seq}, call {item.call_id}) undone")
        )
    if report is None or not report.undone:
        console.print("nothing was undone")
    for item in report.still_dirty if report else ():
        console.print(Text(f"  still dirty: {item.tool} (seq {item.seq}) {item.detail}", style="bold red"))
    if report is not None and not report.still_dirty:
        console.print(Text("nothing is left dirty", style="green"))


def _evidence(outcome: TripOutcome, console: Console) -> None:
    """Steps 4-7: the booking system's state, the journal, its verification, what to run next."""
    saga_id = outcome.result.saga_id
    _step(console, 4, "The booking system agrees")
    console.print(f"Queried {outcome.booking_path}:")
    console.print(_counts_table(outcome.counts))
    if outcome.counts.empty:
        console.print(Text("nothing booked, nothing charged", style="bold green"))
    else:
        console.print(Text("something is still booked or charged!", style="bold red"))

    _step(console, 5, "The journal")
    console.print(journal_table(outcome.entries, title=f"saga {saga_id}", width=console.width))

    _step(console, 6, "The hash chain")
    console.print(verify_text(outcome.verify))

    _step(console, 7, "Inspect it yourself")
    db = outcome.journal_path
    for command in (f"journal show {saga_id}", f"saga show {saga_id}", "journal verify",
                    "journal list"):
        console.print(f"  sagacity {command} --db {db}", style="bold", highlight=False)
    console.print()


def render(outcome: TripOutcome, console: Console) -> None:
    """Print the demo's story: the hidden failure, the saga's catch, the undo, the evidence."""
    result = outcome.result
    _intro(outcome, console)
    if result.failures:
        _story(outcome, console)
    elif outcome.run_error is not None:
        # The run never got going (e.g. the API is unreachable): an error, not a variation.
        where = " (OPENAI_BASE_URL, the network)" if outcome.real_model else ""
        console.print(Text(f"\nThe run failed before any tool call: {describe_error(outcome.run_error)}\n"
                           f"Check OPENAI_API_KEY and that the model's API can be reached{where}.",
                           style="red"))
    else:
        # Only a real model can get here (e.g. it stopped to ask a question instead of paying).
        console.print(Text(f"\nNo tool call failed this time (status {result.status.value}); "
                           "nothing was compensated. Real models vary: try again.", style="yellow"))
        if result.final_output is not None:
            console.print(Text.assemble("The model said: ", _quote(str(result.final_output))))
    _evidence(outcome, console)


def main(
    db_path: str | Path = DEFAULT_DEMO_DB, real_model: bool = False, console: Console | None = None
) -> TripOutcome:
    """Run the demo and print its story; returns what it observed (``run_error`` says whether the
    run raised something other than the guardrail's withholding: ``sagacity demo`` then exits 1).

    Raises:
        ConfigurationError: ``real_model`` without ``OPENAI_API_KEY``.
    """
    outcome = asyncio.run(run_trip(db_path, real_model=real_model))
    render(outcome, console or make_console())
    return outcome
