"""The trip-booking demo: the card charge fails, the saga undoes hotel then flight."""

from __future__ import annotations

import io
import sqlite3

import pytest
from agents import OutputGuardrailTripwireTriggered
from rich.console import Console

from sagacity_agents import SagaStatus
from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.demo import BookingSystem, CardDeclined, render, run_trip
from sagacity_agents.demo.run import booking_path_for
from sagacity_agents.demo.trip import FINAL_MESSAGE


async def test_card_declined_is_compensated_hotel_then_flight(tmp_path):
    """The demo as shipped (H-01: output guardrail attached, FailurePolicy.CONTINUE)."""
    db = tmp_path / "demo.db"
    outcome = await run_trip(db)
    result = outcome.result

    assert result.status is SagaStatus.COMPENSATED
    assert [i.tool for i in result.report.undone] == ["book_hotel", "book_flight"]
    assert result.report.clean and not result.report.still_dirty
    assert [f.tool for f in result.failures] == ["charge_card"]
    assert isinstance(result.failures[0].exception, CardDeclined)

    # The SDK hid the failure: the model got a generic message and answered "booked!"...
    assert len(outcome.told_model) == 1
    assert "CardDeclined" not in outcome.told_model[0]
    assert "error" in outcome.told_model[0].lower()
    assert outcome.withheld_output == FINAL_MESSAGE
    # ...and the saga's output guardrail withheld that false success (H-01).
    assert result.final_output is None and result.output_withheld
    assert isinstance(result.exception, OutputGuardrailTripwireTriggered)
    assert result.withheld_reason == (
        "withheld by 'sagacity_saga_output': charge_card (call call_charge) failed: "
        "CardDeclined: card ending 0002 was declined by the issuer (740 EUR); "
        "undone: book_hotel (call call_hotel), book_flight (call call_flight)"
    )

    # The booking system ends with nothing booked and nothing charged.
    counts = outcome.counts
    assert counts.empty
    assert (counts.flights_booked, counts.hotels_booked, counts.charges_captured) == (0, 0, 0)
    assert (counts.flights_cancelled, counts.hotels_cancelled, counts.charges_declined) == (1, 1, 1)
    assert BookingSystem(outcome.booking_path).counts() == counts
    assert outcome.booking_path == booking_path_for(db)

    assert outcome.verify.ok and outcome.verify.entries == len(outcome.entries)


async def test_journal_records_the_whole_story(tmp_path):
    outcome = await run_trip(tmp_path / "demo.db")
    tool_entries = [(e.phase, e.tool) for e in outcome.entries if e.tool is not None]
    assert tool_entries == [
        (Phase.INTENT, "book_flight"),
        (Phase.EXECUTED, "book_flight"),
        (Phase.INTENT, "book_hotel"),
        (Phase.EXECUTED, "book_hotel"),
        (Phase.INTENT, "charge_card"),
        (Phase.FAILED, "charge_card"),
        (Phase.COMPENSATING, "book_hotel"),
        (Phase.COMPENSATED, "book_hotel"),
        (Phase.COMPENSATING, "book_flight"),
        (Phase.COMPENSATED, "book_flight"),
    ]
    assert outcome.entries[-1].phase is Phase.SAGA_CLOSED
    assert outcome.entries[-1].payload["status"] == "COMPENSATED"

    # The journaled undo data reached the undos, and their idempotency keys reached the system.
    executed = {e.tool: e.payload for e in outcome.entries if e.phase is Phase.EXECUTED}
    assert executed["book_flight"]["undo_data"] == {"flight_id": "FL-0001"}
    assert executed["book_hotel"]["undo_data"] == {"hotel_id": "HT-0001"}
    keys = {e.tool: e.payload["idempotency_key"] for e in outcome.entries if e.phase is Phase.COMPENSATING}
    with sqlite3.connect(outcome.booking_path) as db:
        assert db.execute("SELECT cancel_key FROM flights").fetchone()[0] == keys["book_flight"]
        assert db.execute("SELECT cancel_key FROM hotels").fetchone()[0] == keys["book_hotel"]
    db.close()


async def test_rerun_appends_a_new_saga_and_resets_the_booking_system(tmp_path):
    db = tmp_path / "demo.db"
    first = await run_trip(db)
    second = await run_trip(db)
    assert first.result.saga_id != second.result.saga_id
    assert second.counts.flights_cancelled == 1  # the booking system starts empty every run
    journal = SqliteJournal(db)
    try:
        assert await journal.saga_ids() == [first.result.saga_id, second.result.saga_id]
    finally:
        await journal.close()


async def test_render_tells_the_seven_steps(tmp_path):
    outcome = await run_trip(tmp_path / "demo.db")
    out = io.StringIO()
    render(outcome, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    for step in (
        "1. The Agents SDK hid the failure",
        "2. The saga caught it",
        "3. Undone in reverse order",
        "4. The booking system agrees",
        "5. The journal",
        "6. The hash chain",
        "7. Inspect it yourself",
    ):
        assert step in text
    assert FINAL_MESSAGE in text
    flat = " ".join(text.split())
    assert "output guardrail withheld that false success: final_output is None" in flat
    assert outcome.result.withheld_reason in flat
    assert "COMPENSATED" in text
    assert text.index("1. book_hotel") < text.index("2. book_flight")
    assert "nothing booked, nothing charged" in text
    assert "verify: ok" in text
    assert f"sagacity journal show {outcome.result.saga_id} --db {outcome.journal_path}" in text
    assert f"sagacity journal verify --db {outcome.journal_path}" in text


async def test_render_fits_a_narrow_terminal(tmp_path):
    outcome = await run_trip(tmp_path / "demo.db")
    out = io.StringIO()
    render(outcome, Console(file=out, width=80, color_system=None))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("COMPENSATION" in line or "COMPENSATED" in line for line in lines)


def test_booking_system_refund_and_cancel_are_idempotent(tmp_path):
    booking = BookingSystem(tmp_path / "b.db")
    charge_id = booking.charge("4242 4242 4242 4242", 100)
    flight_id = booking.book_flight("Lisbon", "2025-06-12")
    assert booking.counts().charges_captured == 1
    for _ in range(2):
        booking.refund(charge_id, key="k1")
        booking.cancel_flight(flight_id, key="k2")
    counts = booking.counts()
    assert (counts.charges_refunded, counts.flights_cancelled, counts.empty) == (1, 1, True)


def test_examples_entry_point_runs_the_demo(tmp_path, capsys):
    from examples.trip_booking.run_demo import run

    assert run(["--db", str(tmp_path / "ex.db")]) == 0
    assert "verify: ok" in capsys.readouterr().out


def test_examples_entry_point_real_model_needs_a_key(tmp_path, monkeypatch, capsys):
    from examples.trip_booking.run_demo import run

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert run(["--db", str(tmp_path / "ex.db"), "--real-model"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_demo_refuses_a_postgresql_uri_clearly(tmp_path):
    """The demo writes its own SQLite file; a PostgreSQL URI is a usage error naming where to go
    (it used to fail with SQLite's "unable to open database file")."""
    from click.testing import CliRunner

    from sagacity_agents.cli import cli

    result = CliRunner().invoke(cli, ["demo", "--db", "postgresql://postgres@127.0.0.1:5432/test"])
    assert result.exit_code == 2
    assert "embedded SQLite file" in result.output and "examples/multi_worker" in result.output


def demo_process(tmp_path, **env: str):
    """``sagacity demo --real-model`` in a child process, with ``env`` over a copy of ours from
    which every OpenAI setting is removed (tracing off: nothing may reach the network)."""
    import os
    import subprocess
    import sys

    child = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    child.update(OPENAI_AGENTS_DISABLE_TRACING="1", **env)
    return subprocess.run(
        [sys.executable, "-m", "sagacity_agents", "demo", "--real-model", "--db", str(tmp_path / "d.db")],
        capture_output=True, text=True, timeout=120, env=child, cwd=tmp_path, check=False,
    )


@pytest.mark.case("R-04i")
def test_real_model_with_the_api_unreachable_exits_non_zero(tmp_path):
    """R-04 i (issue 18): with the model's API unreachable (a base URL nothing listens on) the
    demo says the run failed and why, never "try again", and exits 1."""
    proc = demo_process(tmp_path, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "try again" not in proc.stdout
    assert "The run failed before any tool call: APIConnectionError" in proc.stdout
    assert "demo failed: the run raised APIConnectionError" in proc.stderr


@pytest.mark.case("R-04i")
def test_real_model_without_a_key_exits_non_zero(tmp_path):
    """R-04 i: without OPENAI_API_KEY the demo refuses before running (usage error, exit 2)."""
    proc = demo_process(tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--real-model needs OPENAI_API_KEY" in proc.stderr
