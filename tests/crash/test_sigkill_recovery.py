"""SIGKILL crash tests (issue 8, "What it must show"): a real child process runs the trip saga
of ``tests/crash/app.py`` on a SQLite journal and is killed with SIGKILL at every phase boundary;
then the saga is recovered twice in a row, or by two processes at once.

What must hold at every boundary, read from the far side (a separate SQLite file counting each
application per booking / undo idempotency key / transfer) and from the journal:

* every key applied at most once by the far side (no booking, undo or transfer twice);
* nothing in doubt undone blindly: an INTENT (or COMPENSATING) with no outcome is reported in
  doubt and its effect left alone;
* everything known undone: every EXECUTED compensatable call's undo applied exactly once;
* an approved call killed after CONSUMED, before INTENT, never runs and is named in the report.

Children are forked from a forkserver that has already imported the app and the Agents SDK, so
the matrix stays fast; each is still a separate process killed by the kernel. A killed process
stamps its entries an hour back (``app.killed_journal``): its short lease has expired when the
test recovers, with no sleeping for it.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from sagacity_agents.core.lease import Lease, lease_of
from sagacity_agents.stores import open_journal

from tests import forked

from . import app

pytestmark = pytest.mark.multiprocess


@dataclass(frozen=True)
class Expected:
    booked: frozenset[str]
    """Far-side bookings made before the kill (book-<kind>)."""
    cancelled: frozenset[str]
    """Bookings whose undo reached the far side, by the child or a recovery (exactly once)."""
    status: str
    """Status of the first recovery."""
    in_doubt: tuple[str, ...] = ()
    """Tools recovery reports in doubt (never acted on)."""


def _e(booked: str, cancelled: str, status: str, *in_doubt: str) -> Expected:
    return Expected(frozenset(booked.split()), frozenset(cancelled.split()), status, in_doubt)


EXPECTED = {
    # The car's INTENT never written: it never ran; the hotel is undone.
    "before-intent": _e("hotel", "hotel", "COMPENSATED"),
    # INTENT durable, body never started: in doubt all the same (recovery cannot know); not undone.
    "after-intent": _e("hotel", "hotel", "IN_DOUBT", "book_car"),
    # The car exists at the far side, EXECUTED never written: in doubt, NOT cancelled blindly.
    "after-effect-before-executed": _e("hotel car", "hotel", "IN_DOUBT", "book_car"),
    "after-executed": _e("hotel car", "hotel car", "COMPENSATED"),
    # The car's cancellation reached the far side, COMPENSATED did not: in doubt, not applied again.
    "during-first-undo": _e("hotel car", "hotel car", "IN_DOUBT", "book_car"),
    "after-saga-failed": _e("hotel car", "hotel car", "COMPENSATED"),
    "between-undos": _e("hotel car", "hotel car", "COMPENSATED"),
    "during-second-undo": _e("hotel car", "hotel car", "IN_DOUBT", "book_hotel"),
    # The approved transfer never started: not run by recovery, named in the report.
    "after-consumed-before-intent": _e("hotel", "hotel", "COMPENSATED"),
    # The run completed and journaled it; only SAGA_CLOSED was lost: closed, nothing undone.
    "after-run-ended-before-close": _e("hotel car", "", "COMPLETED"),
}
assert set(EXPECTED) == set(app.BOUNDARIES)


@pytest.fixture(scope="module")
def ctx():
    return forked.context()


_CRASHED: dict[str, Path] = {}


def _crash(ctx, boundary: str, db: str, far: str) -> None:
    child = ctx.Process(target=app.crash, args=(boundary, db, far))
    child.start()
    child.join(60)
    assert child.exitcode == -9, f"the child was not killed at {boundary} (exit {child.exitcode})"


def _crashed(ctx, boundary: str, factory: pytest.TempPathFactory, into: Path) -> tuple[str, str]:
    """The files a child killed at ``boundary`` left (journal with its -wal/-shm, far side),
    copied into ``into``. One kill per boundary serves both tests: each recovers its own copy,
    as a restarted host would find the files."""
    if boundary not in _CRASHED:
        folder = factory.mktemp(f"killed-{boundary}")
        _crash(ctx, boundary, str(folder / "journal.db"), str(folder / "far.db"))
        _wait_for_expiry(str(folder / "journal.db"))
        _CRASHED[boundary] = folder
    for file in _CRASHED[boundary].iterdir():
        shutil.copy2(file, into / file.name)
    return str(into / "journal.db"), str(into / "far.db")


def _wait_for_expiry(db: str) -> None:
    """Check that the killed run's lease has expired: recovery may take it over. No sleeping: the
    killed process stamped its entries ``app.STAMPED_AGO`` back (``app.killed_journal``)."""
    async def lease() -> Lease | None:
        journal = open_journal(db)
        try:
            return lease_of(await journal.entries(app.SAGA_ID))
        finally:
            await journal.close()

    found = asyncio.run(lease())
    assert found is not None and not found.held()


def _recover_in_processes(ctx, db: str, far: str, n: int) -> list[dict]:
    out = ctx.Queue()
    children = [ctx.Process(target=app.recover_into, args=(db, far, out)) for _ in range(n)]
    for child in children:
        child.start()
    answers = [out.get(timeout=60) for _ in children]
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    return answers


def _journal_phases(db: str) -> list[str]:
    async def read() -> list[str]:
        journal = open_journal(db)
        try:
            return [e.phase.value for e in await journal.entries(app.SAGA_ID)]
        finally:
            await journal.close()

    return asyncio.run(read())


def _check_far_side(far: str, expected: Expected) -> None:
    applied = app.applications(far)
    twice = {key: n for key, n in applied.items() if n != 1}
    assert not twice, f"applied more than once: {twice}"
    kinds = [kind for kind, _ in applied]
    assert {k.removeprefix("book-") for k in kinds if k.startswith("book-")} == expected.booked
    cancels = [k.removeprefix("cancel-") for k in kinds if k.startswith("cancel-")]
    assert sorted(cancels) == sorted(expected.cancelled)  # each exactly once, in-doubt left alone
    assert "wire" not in kinds  # the approved transfer never ran, before or after recovery


def _check_answer(answer: dict, expected: Expected, boundary: str) -> None:
    assert "error" not in answer, answer
    assert answer["status"] == expected.status
    assert answer["in_doubt"] == list(expected.in_doubt)
    if boundary == "after-consumed-before-intent":
        assert answer["approved_not_run"] == ["wire_deposit"]


def _check_later_answer(answer: dict, expected: Expected, boundary: str) -> None:
    """A recovery after (or beside) the first: refused (saga closed, or held by the other
    recovery), the same verdict again, or LEASE_LOST: it took the lease, stalled past the short
    lease on a loaded machine and lost it to the other, and stopped (core.fence)."""
    if "refused" in answer:
        assert "closed" in answer["refused"] or "lease" in answer["refused"], answer
    elif answer.get("status") == "LEASE_LOST":
        assert "error" not in answer, answer
    else:
        _check_answer(answer, expected, boundary)


@pytest.mark.parametrize("boundary", list(app.BOUNDARIES))
def test_killed_then_recovered_twice(ctx, tmp_path_factory, tmp_path: Path, boundary: str) -> None:
    db, far = _crashed(ctx, boundary, tmp_path_factory, tmp_path)
    expected = EXPECTED[boundary]
    first, second = _recover_in_processes(ctx, db, far, 1) + _recover_in_processes(ctx, db, far, 1)
    _check_answer(first, expected, boundary)
    _check_later_answer(second, expected, boundary)
    if expected.status in ("COMPENSATED", "COMPLETED"):
        assert "refused" in second and _journal_phases(db)[-1] == "SAGA_CLOSED"
    else:
        assert "SAGA_CLOSED" not in _journal_phases(db)  # open for a human and a later recovery
    _check_far_side(far, expected)


@pytest.mark.parametrize("boundary", list(app.BOUNDARIES))
def test_killed_then_two_concurrent_recoveries(ctx, tmp_path_factory, tmp_path: Path, boundary: str) -> None:
    db, far = _crashed(ctx, boundary, tmp_path_factory, tmp_path)
    expected = EXPECTED[boundary]
    answers = _recover_in_processes(ctx, db, far, 2)
    recovered = [a for a in answers if "refused" not in a]
    assert recovered, answers  # one of them took the lease (the other may go after it)
    for answer in answers:
        _check_later_answer(answer, expected, boundary)
    _check_far_side(far, expected)


@pytest.mark.parametrize("boundary", ["after-effect-before-executed", "during-first-undo",
                                      "between-undos"])
def test_postgres_killed_then_two_concurrent_recoveries(
    ctx, pg_uri: str, tmp_path: Path, boundary: str
) -> None:
    """The same on a PostgreSQL journal (its own append lock and conditional append), for the
    boundaries that leave an effect in doubt, an undo in doubt, and half the undos done."""
    far = str(tmp_path / "far.db")
    expected = EXPECTED[boundary]
    _crash(ctx, boundary, pg_uri, far)
    _wait_for_expiry(pg_uri)
    answers = _recover_in_processes(ctx, pg_uri, far, 2)
    assert [a for a in answers if "refused" not in a], answers
    for answer in answers:
        _check_later_answer(answer, expected, boundary)
    _check_far_side(far, expected)


def test_a_recovery_killed_in_its_undo_is_taken_over_without_a_second_undo(
    ctx, tmp_path_factory, tmp_path: Path
) -> None:
    """The recovering process dies too (in the car's undo, after the far side cancelled it):
    the next recoveries take its expired lease over, leave the car's undo in doubt (never
    applied twice) and undo the hotel."""
    db, far = _crashed(ctx, "after-executed", tmp_path_factory, tmp_path)
    unused = ctx.Queue()  # kept referenced until the child has read it
    killed = ctx.Process(target=app.recover_into, args=(db, far, unused, "undo_car"))
    killed.start()
    killed.join(60)
    assert killed.exitcode == -9
    _wait_for_expiry(db)
    expected = _e("hotel car", "hotel car", "IN_DOUBT", "book_car")
    first, second = _recover_in_processes(ctx, db, far, 1) + _recover_in_processes(ctx, db, far, 1)
    _check_answer(first, expected, "recovery-killed")
    _check_answer(second, expected, "recovery-killed")
    _check_far_side(far, expected)


@pytest.mark.parametrize("boundary, ran, cancelled", [
    ("after-effect-before-executed", True, "hotel car"),  # the car exists: undone, once
    ("after-intent", False, "hotel"),                     # the car was never booked: dropped
    ("during-first-undo", True, "hotel car"),             # the cancel happened: not applied again
])
def test_in_doubt_answered_by_a_human_then_recovered(
    ctx, tmp_path_factory, tmp_path: Path, boundary: str, ran: bool, cancelled: str
) -> None:
    """In doubt until a human answers (`saga resolve`); then recovery acts on the answer, still
    applies no key twice (two recoveries at once again), and the saga closes COMPENSATED."""
    from sagacity_agents import Sagacity

    db, far = _crashed(ctx, boundary, tmp_path_factory, tmp_path)
    [first] = _recover_in_processes(ctx, db, far, 1)
    assert first["status"] == "IN_DOUBT" and first["in_doubt_seqs"], first

    async def answer() -> None:
        sagacity = Sagacity(db, lease_seconds=app.LEASE_SECONDS)
        try:
            for seq in first["in_doubt_seqs"]:
                await sagacity.resolve(app.SAGA_ID, seq, ran=ran, resolver="ops",
                                       reason="checked the rental company", force=True)
        finally:
            await sagacity.aclose()

    asyncio.run(answer())
    answers = _recover_in_processes(ctx, db, far, 2)
    # One recovery closes the saga COMPENSATED; the other is refused (the lease, the close) or,
    # stalled past the short lease on a loaded machine, lost the lease to it and stopped
    # (LEASE_LOST, core.fence): never a second COMPENSATED of its own.
    statuses = [a.get("status") for a in answers if "refused" not in a]
    assert statuses.count("COMPENSATED") == 1, answers
    assert set(statuses) <= {"COMPENSATED", "LEASE_LOST"}, answers
    assert _journal_phases(db)[-1] == "SAGA_CLOSED"
    _check_far_side(far, _e(" ".join(sorted(EXPECTED[boundary].booked)), cancelled, "COMPENSATED"))


def test_cli_recover_closes_a_completed_saga_killed_before_its_close(
    ctx, tmp_path_factory, tmp_path: Path
) -> None:
    """`sagacity saga recover` on it: COMPLETED, exit 0, nothing undone (not a saga for a human)."""
    from click.testing import CliRunner

    from sagacity_agents.cli import cli

    db, far = _crashed(ctx, "after-run-ended-before-close", tmp_path_factory, tmp_path)
    out = CliRunner().invoke(cli, ["saga", "recover", app.SAGA_ID, "--app", "tests.crash.app:agent",
                                   "--db", db])
    assert out.exit_code == 0, out.output
    assert "COMPLETED" in out.output
    assert _journal_phases(db)[-2:] == ["RUN_ENDED", "SAGA_CLOSED"]
    _check_far_side(far, EXPECTED["after-run-ended-before-close"])


def test_cli_recover_all_closes_a_completed_saga_killed_before_its_close(
    ctx, tmp_path_factory, tmp_path: Path
) -> None:
    """`sagacity saga recover --all` finds it too (RUN_ENDED COMPLETED, no SAGA_CLOSED), closes it
    COMPLETED with exit 0 and undoes nothing."""
    from click.testing import CliRunner

    from sagacity_agents.cli import cli

    db, far = _crashed(ctx, "after-run-ended-before-close", tmp_path_factory, tmp_path)
    out = CliRunner().invoke(cli, ["saga", "recover", "--all", "--app", "tests.crash.app:agent",
                                   "--db", db])
    assert out.exit_code == 0, out.output
    assert "COMPLETED" in out.output
    assert _journal_phases(db)[-1] == "SAGA_CLOSED"
    _check_far_side(far, EXPECTED["after-run-ended-before-close"])
