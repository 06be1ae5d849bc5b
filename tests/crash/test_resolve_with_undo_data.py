"""kill -9 mid-call, then ``saga resolve ... --ran --undo-data JSON``, then ``saga recover``: the
car booked at the far side is cancelled with the undo data the human gave, the undo gets the
forward call's idempotency key and its INTENT's seq, and the saga closes COMPENSATED. Without
undo data, an undo that declares ``undo_needs`` is not called: the report names --undo-data.

Real processes on SQLite and PostgreSQL: the booking child is killed by SIGKILL, the CLI runs as
a subprocess with the commands an operator types (no --force: the child stamped its entries an
hour back, so its lease and the call's deadline have passed, and recovery takes the lease over).
"""

from __future__ import annotations

import os
import subprocess

import pytest


from tests.forked import python_command

from . import undo_data_app as app

pytestmark = pytest.mark.multiprocess

APP = "tests.crash.undo_data_app:agent"


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> str:
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "j.db")


def _cli(far: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UNDO_DATA_FAR_DB": far, "COLUMNS": "400"}
    return subprocess.run(python_command("-m", "sagacity_agents", "saga", *args), env=env,
                          capture_output=True, text=True, timeout=240)


def _crashed(db: str, far: str) -> int:
    """Run the booking child until SIGKILL; recover once: the car's INTENT is in doubt."""
    child = subprocess.run(python_command("-m", "tests.crash.undo_data_app", "crash", db, far),
                           capture_output=True, text=True, timeout=240)
    assert child.returncode == -9, child.stderr
    assert [kind for kind, _ in app.events(far)] == ["book-car"]
    first = _cli(far, "recover", app.SAGA_ID, "--app", APP, "--db", db)
    assert first.returncode == 1 and "in doubt: seq 3" in first.stdout, first.stdout + first.stderr
    return 3


def test_a_crashed_call_answered_ran_with_undo_data_is_undone_with_it(db, tmp_path):
    far = str(tmp_path / "far.db")
    seq = _crashed(db, far)
    answer = _cli(far, "resolve", app.SAGA_ID, str(seq), "--ran", "--undo-data",
                  '{"booking_id": "B-Lyon"}', "--as", "ops", "--reason", "booking B-Lyon seen",
                  "--db", db)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert 'undo data: {"booking_id": "B-Lyon"}' in answer.stdout
    last = _cli(far, "recover", app.SAGA_ID, "--app", APP, "--db", db)
    assert last.returncode == 0 and "COMPENSATED" in last.stdout, last.stdout + last.stderr
    answer_seq = int(answer.stdout.split("(RESOLVED seq ")[1].split(")")[0])
    # Shown before the undo runs, then on the report's line.
    assert last.stdout.splitlines()[0] == (f'  undo of seq {answer_seq} book_car (call c1) gets the '
                                           'undo data ops gave: {"booking_id": "B-Lyon"}')
    assert (f'undone: seq {answer_seq} book_car (call c1) with undo data from RESOLVED seq '
            f'{answer_seq} (ops): {{"booking_id":"B-Lyon"}}') in last.stdout
    cancels = [body for kind, body in app.events(far) if kind == "cancel-car"]
    assert cancels == [{"booking_id": "B-Lyon", "intent_seq": seq,
                        # the key the forward call sent (bound to this journal and saga)
                        "call_key": next(b for k, b in app.events(far) if k == "book-car")["call_key"],
                        "undo_key": cancels[0]["undo_key"]}]
    assert cancels[0]["undo_key"] != cancels[0]["call_key"]


def test_an_undo_that_needs_undo_data_is_not_called_without_it(db, tmp_path):
    far = str(tmp_path / "far.db")
    seq = _crashed(db, far)
    answer = _cli(far, "resolve", app.SAGA_ID, str(seq), "--ran", "--as", "ops",
                  "--reason", "a car is booked", "--db", db)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    again = _cli(far, "recover", app.SAGA_ID, "--app", APP, "--db", db)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "needs undo data booking_id" in again.stdout and "--undo-data" in again.stdout
    assert [kind for kind, _ in app.events(far)] == ["book-car"]  # the undo was never called
    # The same answer completed with its undo data: the next recovery undoes the car.
    given = _cli(far, "resolve", app.SAGA_ID, str(seq), "--ran", "--undo-data",
                 '{"booking_id": "B-Lyon"}', "--as", "ops", "--reason", "booking id found",
                 "--db", db)
    assert given.returncode == 0, given.stdout + given.stderr
    last = _cli(far, "recover", app.SAGA_ID, "--app", APP, "--db", db)
    assert last.returncode == 0 and "COMPENSATED" in last.stdout, last.stdout + last.stderr
    assert [body["booking_id"] for kind, body in app.events(far) if kind == "cancel-car"] == ["B-Lyon"]


@pytest.mark.parametrize("text, why", [
    ('{"booking_id": NaN}', "not canonical JSON"),
    ('{"a": 1, "a": 2}', "not canonical JSON"),
    ('{"booking_id": 9007199254740993}', "must be plain JSON"),
    ('{"other": "x"}', "needs undo data booking_id"),
    ('not json', "not canonical JSON"),
])
def test_undo_data_without_a_canonical_encoding_is_refused(tmp_path, text, why):
    """Refused before anything is journaled (exit 2, usage error naming why)."""
    import asyncio

    from click.testing import CliRunner

    from sagacity_agents.backends import Phase, SqliteJournal
    from sagacity_agents.cli import cli

    db = str(tmp_path / "j.db")

    async def in_doubt() -> None:
        journal = SqliteJournal(db)
        try:
            await journal.append("s", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
            await journal.append("s", Phase.INTENT, write_key="c1:intent", tool="book_car", call_id="c1",
                                 payload={"args": {"city": "Lyon"}, "reversibility": "compensatable",
                                          "declaration": _declaration_id()})
        finally:
            await journal.close()

    asyncio.run(in_doubt())
    refused = CliRunner().invoke(cli, ["saga", "resolve", "s", "2", "--ran", "--force", "--undo-data",
                                       text, "--as", "ops", "--reason", "x", "--db", db])
    assert refused.exit_code == 2 and why in refused.output, refused.output

    async def untouched() -> int:
        journal = SqliteJournal(db)
        try:
            return len(await journal.entries("s"))
        finally:
            await journal.close()

    assert asyncio.run(untouched()) == 2


def _declaration_id() -> str:
    from sagacity_agents.sdk.tools import declaration_of

    return declaration_of(app.TOOLS[0]).declaration_id
