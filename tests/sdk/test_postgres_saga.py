"""Sagas on PostgreSQL through the facade: the least-privilege role, C-10 (b) a small pool and
many slow tools, an INTENT that cannot get a connection, run_sync across event loops."""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path

import psycopg
import pytest
from agents import function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase, PostgresJournal
from sagacity_agents.errors import JournalError
from sagacity_agents.evidence import verify_journal
from sagacity_agents.backends.postgres.roles import grant_statements
from sagacity_agents.core.journal import append_each
from tests.pg import SERVER, admin_connect, with_search_path

from . import wire_app
from .helpers import agent, phases, scripted
from .test_recovery import crashed_saga, tools

WIRE = ("transfer", '{"amount": 5, "to": "acct-9"}', "w1")


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.txt"
    monkeypatch.setattr(wire_app, "LEDGER", path)
    return path


def schema_of(uri: str) -> str:
    match = re.search(r"search_path%3D(\w+)", uri)
    assert match, uri
    return match.group(1)


@pytest.fixture
def app_role_uri(pg_uri):
    """A login role holding only the GRANTs docs/postgres.md shows; yields its URI."""
    role = f"sagacity_app_{secrets.token_hex(4)}"
    with admin_connect(pg_uri) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        for statement in grant_statements(role, schema_of(pg_uri)):  # sql/app_role.sql's GRANTs
            conn.execute(statement)
    try:
        yield with_search_path(SERVER.replace("//postgres@", f"//{role}@"), schema_of(pg_uri))
    finally:
        with admin_connect(pg_uri) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


async def test_least_privilege_role_runs_a_saga_an_approval_and_a_recovery(app_role_uri, pg_uri):
    """Under a role that may only SELECT and INSERT journal rows: a paused saga is approved and
    resumed (the transfer runs once), a crashed saga is recovered, every chain verifies, and the
    role cannot UPDATE or DELETE a journal row."""
    s = Sagacity(app_role_uri)
    try:
        result = await s.run(wire_app.paused_agent(WIRE), "go")
        assert result.status is SagaStatus.AWAITING_APPROVAL
        (request,) = result.approvals
        await s.approve(request.request_id, approver="alice", reason="ok")
        done = await s.resume(result.saga_id, wire_app.resumed_agent())
        assert done.status is SagaStatus.COMPLETED
        assert wire_app.executions() == ["5 USD -> acct-9"]

        log: list = []
        sid = await crashed_saga(s.journal)
        recovered = await s.recover(sid, agent(scripted(), tools(log)))
        assert recovered.status is SagaStatus.IN_DOUBT and [e[1] for e in log] == [2, 1]
        assert all(r.ok for r in await verify_journal(s.journal))
    finally:
        await s.aclose()
    async with await psycopg.AsyncConnection.connect(app_role_uri, autocommit=True) as conn:
        for statement in ("UPDATE sagacity_journal SET tool = 'x'", "DELETE FROM sagacity_journal"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)


@pytest.mark.case("C-10b")
async def test_pool_of_two_twenty_parallel_two_second_tools(pg_uri):
    """C-10 (b): a pool of 2 connections with a 1 s timeout and 20 parallel tools that each take
    2 s: connections are held for journal writes only, never across a body, so all 20 calls
    complete and are journaled."""
    running = 0
    peak = 0

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def slow(n: int) -> int:
        """Take two seconds."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(2)
        running -= 1
        return n

    calls = [("slow", f'{{"n": {n}}}', f"c{n}") for n in range(20)]
    journal = PostgresJournal(pg_uri, min_size=2, max_size=2, pool_timeout=1.0)
    s = Sagacity(journal)
    try:
        result = await s.run(agent(scripted(calls, "done"), slow), "go")
        assert result.status is SagaStatus.COMPLETED, result.exception
        entries = await journal.entries(result.saga_id)
        assert phases(entries, tool="slow").count("EXECUTED") == 20
        assert phases(entries, tool="slow").count("INTENT") == 20
        assert peak == 20  # every body ran at once while two connections served the journal
    finally:
        await s.aclose()


@pytest.mark.case("C-10b")
async def test_intent_that_cannot_get_a_connection_means_the_body_does_not_run(pg_uri):
    """C-10 (b): the pool's only connection is taken elsewhere while the model answers, and held
    past ``pool_timeout``: the INTENT raises JournalWriteError and the tool body does not run."""
    ran: list[int] = []

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def charge(n: int) -> int:
        """Charge."""
        ran.append(n)
        return n

    journal = PostgresJournal(pg_uri, min_size=1, max_size=1, pool_timeout=0.5)
    held: list = []

    class GrabbingModel(ScriptedModel):
        async def get_response(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if not held:  # the saga's opening entries are written; its INTENT is next
                held.append(await (await journal.database.pool()).getconn())
            return await super().get_response(*args, **kwargs)

    model = GrabbingModel()
    model.enqueue([function_call("charge", '{"n": 1}', call_id="c1")])
    model.enqueue([assistant_message("done")])
    s = Sagacity(journal)
    try:
        # The journal cannot be reached from here on: the run fails (raised or reported), and
        # either way with the journal error, never after running the body.
        try:
            result = await s.run(agent(model, charge), "go")
            assert result.status is not SagaStatus.COMPLETED
            errors = _chain(result.exception) + [f.exception for f in result.failures]
        except JournalError as exc:
            errors = _chain(exc)
        assert any(isinstance(e, JournalError) for e in errors), errors
        assert ran == []
    finally:
        pool = await journal.database.pool()
        for conn in held:
            await pool.putconn(conn)
    try:
        for sid in await journal.saga_ids():
            entries = await journal.entries(sid)
            assert [e for e in entries if e.tool == "charge"] == []
    finally:
        await s.aclose()


def _chain(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def test_run_sync_twice_uses_a_pool_per_event_loop(pg_uri):
    """``run_sync`` starts a new event loop per call; each gets its own pool, closed with it."""

    @function_tool
    @compensable(undo=lambda ctx: None)
    def step(n: int) -> int:
        """A step."""
        return n

    s = Sagacity(pg_uri)
    results = [
        s.run_sync(agent(scripted([("step", f'{{"n": {n}}}', "c1")], "ok"), step), "go")
        for n in (1, 2)
    ]
    assert [r.status for r in results] == [SagaStatus.COMPLETED] * 2
    asyncio.run(s.aclose())
    with admin_connect(pg_uri) as conn:
        count = conn.execute("SELECT count(DISTINCT saga_id) FROM sagacity_journal").fetchone()
    assert count == (2,)


async def test_least_privilege_role_runs_a_batch_and_contended_appends(app_role_uri):
    """The app role's GRANTs cover what 0002 adds: a batch mixing lazy and durable appends
    (fast_outcomes: an EXECUTED + SAGA_CLOSED), and appends queued on one saga's lock (the second,
    flushing statement, pg_logical_emit_message, runs under the role); the chain verifies."""
    journal = PostgresJournal(app_role_uri, fast_outcomes=True, min_size=8, max_size=8)
    try:
        await append_each(journal, "s", [
            {"phase": Phase.SAGA_OPENED, "write_key": "saga:open", "payload": {}},
            {"phase": Phase.RUN_STARTED, "write_key": "run:a", "expected_seq": 1},
        ])
        go = asyncio.Event()

        async def one(i: int) -> None:
            await go.wait()
            await journal.append("s", Phase.INTENT, write_key=f"i{i}", tool="t", call_id=f"c{i}")

        tasks = [asyncio.create_task(one(i)) for i in range(16)]
        await asyncio.sleep(0.05)
        go.set()
        await asyncio.gather(*tasks)
        await append_each(journal, "s", [
            {"phase": Phase.EXECUTED, "write_key": "o0", "tool": "t", "call_id": "c0"},
            {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {}},
        ])
        entries = await journal.entries("s")
        assert [e.seq for e in entries] == list(range(1, 21))
        assert all(r.ok for r in await verify_journal(journal))
    finally:
        await journal.close()


def _functions_the_docs_name() -> list[str]:
    """The schema's functions docs/postgres.md tells a database revoking EXECUTE from PUBLIC to
    grant (its "Least privilege" section)."""
    docs = (Path(__file__).parents[2] / "docs" / "postgres.md").read_text("utf-8")
    section = docs.split("## Least privilege", 1)[1].split("\n## ", 1)[0]
    return sorted(set(re.findall(r"`(sagacity_\w+)`", section)))


async def test_least_privilege_role_without_public_execute_runs_with_the_functions_the_docs_name(
    app_role_uri, pg_uri
):
    """A database that revokes EXECUTE from PUBLIC, where the role is granted the functions
    docs/postgres.md names: single appends and a batch still run."""
    schema = schema_of(pg_uri)
    role = re.search(r"//(\w+)@", app_role_uri).group(1)  # type: ignore[union-attr]
    with admin_connect(pg_uri) as conn:
        conn.execute(f"REVOKE EXECUTE ON ALL ROUTINES IN SCHEMA {schema} FROM PUBLIC")
        for name in _functions_the_docs_name():
            conn.execute(f"GRANT EXECUTE ON ROUTINE {schema}.{name} TO {role}")
    journal = PostgresJournal(app_role_uri, fast_outcomes=True)
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={})
        await append_each(journal, "s", [
            {"phase": Phase.EXECUTED, "write_key": "c0:outcome", "tool": "t", "call_id": "c0"},
            {"phase": Phase.INTENT, "write_key": "c1:intent", "tool": "t", "call_id": "c1"},
        ])
        assert [e.seq for e in await journal.entries("s")] == [1, 2, 3]
    finally:
        await journal.close()
        with admin_connect(pg_uri) as conn:
            conn.execute(f"GRANT EXECUTE ON ALL ROUTINES IN SCHEMA {schema} TO PUBLIC")


def test_migrate_as_the_app_role_on_a_current_schema_applies_nothing(app_role_uri, monkeypatch):
    """A deploy step that always runs `sagacity db migrate` as the application's role: on a
    current schema it only reads (no lock, no CREATE), so it succeeds and applies nothing; the
    role still cannot create anything there."""
    from click.testing import CliRunner

    from sagacity_agents.cli import cli
    from sagacity_agents.backends.postgres.migrations import migrate

    assert asyncio.run(migrate(app_role_uri)) == []
    monkeypatch.delenv("SAGACITY_DB", raising=False)
    done = CliRunner().invoke(cli, ["db", "migrate", "--db", app_role_uri])
    assert done.exit_code == 0, done.output
    assert "nothing to apply" in done.output
    with psycopg.connect(app_role_uri, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE sagacity_intruder (x int)")
