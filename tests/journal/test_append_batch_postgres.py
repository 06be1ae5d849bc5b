"""PostgreSQL batches (``append_many``, reached through ``core.journal.append_each``): what a
pipelined batch promises beyond the journal contract. A batch is sent in one round trip and the
server runs it as one transaction (an implicit one, up to the pipeline's Sync): a durable append
in it must still be durable when the batch returns, whatever the lazy appends before it set; a
batch that raises leaves the appends after the failing one unwritten; a connection killed inside
the batch's commit leaves it stored once or not at all. Also: the synchronous_commit every entry
of a whole saga run commits with, as docs/postgres.md states it, and a worker of the previous
release appending through 0001's procedure in the same chain (rolling upgrade)."""

from __future__ import annotations

import psycopg
import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.journal import AppendRequest, append_each, utc_stamp
from sagacity_agents.backends.postgres.journal import PostgresJournal, byte_pieces
from sagacity_agents.errors import JournalWriteError
from tests.pg import admin_connect, at_commit_trigger

from .journal_contract import assert_chain, verify_one
from .test_journal_postgres import kill_at_commit  # noqa: F401 - a fixture

# A deferred trigger runs inside COMMIT, before the commit record: it sees the
# synchronous_commit the commit itself uses (set_config(..., true) lasts to the end of the
# transaction).
_COMMIT_SETTING = (
    "CREATE TABLE sagacity_test_commits (phase text, txid bigint, sync text);"
    + at_commit_trigger("sagacity_test_commit_setting", """
    INSERT INTO sagacity_test_commits
        VALUES (NEW.phase, txid_current(), current_setting('synchronous_commit'));""")
)


@pytest.fixture
def commit_settings(pg_uri):
    """Record, per inserted row, its transaction and the synchronous_commit its COMMIT ran with;
    returns a function that reads them as ``{phase: (txid, setting)}``."""
    with admin_connect(pg_uri) as conn:
        conn.execute(_COMMIT_SETTING)

    def read() -> dict[str, tuple[int, str]]:
        with admin_connect(pg_uri) as conn:
            rows = conn.execute("SELECT phase, txid, sync FROM sagacity_test_commits").fetchall()
        return {phase: (txid, sync) for phase, txid, sync in rows}

    yield read
    with admin_connect(pg_uri) as conn:
        conn.execute("DROP TRIGGER IF EXISTS sagacity_test_commit_setting ON sagacity_journal")
        conn.execute("DROP FUNCTION IF EXISTS sagacity_test_commit_setting()")
        conn.execute("DROP TABLE IF EXISTS sagacity_test_commits")


@pytest.mark.parametrize("order", ["lazy-then-durable", "durable-then-lazy"])
async def test_durable_append_in_a_batch_with_a_lazy_one_commits_synchronously(
    pg_uri, commit_settings, order
):
    """fast_outcomes: a batch holding a lazy outcome (EXECUTED) and a durable entry (SAGA_CLOSED).
    The pipeline makes them one transaction, so the outcome's synchronous_commit = off would also
    cover SAGA_CLOSED's commit: the batch would return before SAGA_CLOSED is flushed. The commit
    that stores a durable entry must wait for the flush (the lock was free: no flush after it)."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True)
    try:
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c")
        batch = [
            {"phase": Phase.EXECUTED, "write_key": "o", "tool": "t", "call_id": "c"},
            {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {"status": "COMPLETED"}},
        ]
        if order == "durable-then-lazy":
            batch = [{"phase": Phase.INTENT, "write_key": "i2", "tool": "t", "call_id": "c2"},
                     {"phase": Phase.EXECUTED, "write_key": "o2", "tool": "t", "call_id": "c2"}]
        await append_each(journal, "s", batch)
        commits = commit_settings()
        assert commits["INTENT"][1] == "on"
        durable = "SAGA_CLOSED" if order == "lazy-then-durable" else "INTENT"
        last = await journal.entries("s")
        assert len({commits[e.phase.value][0] for e in last[1:]}) == 1  # one transaction
        assert commits[durable][1] == "on", commits
        assert_chain(await journal.entries("s"), 3)
    finally:
        await journal.close()


async def test_lazy_batch_commits_without_waiting_and_durable_batch_waits(pg_uri, commit_settings):
    """The other halves: SAGA_OPENED + RUN_STARTED (both lazy) commit with synchronous_commit
    off; RUN_ENDED + SAGA_CLOSED without fast_outcomes (both durable) commit synchronously."""
    journal = PostgresJournal(pg_uri)
    try:
        await append_each(journal, "s", [
            {"phase": Phase.SAGA_OPENED, "write_key": "saga:open", "payload": {}},
            {"phase": Phase.RUN_STARTED, "write_key": "run:a", "expected_seq": 1},
        ])
        await append_each(journal, "s", [
            {"phase": Phase.RUN_ENDED, "write_key": "run-end:a", "payload": {}},
            {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {}},
        ])
        commits = commit_settings()
        assert commits["SAGA_OPENED"][1] == commits["RUN_STARTED"][1] == "off", commits
        assert commits["RUN_ENDED"][1] == commits["SAGA_CLOSED"][1] == "on", commits
        assert (await verify_one(journal, "s")).ok
    finally:
        await journal.close()


async def test_append_each_that_raises_on_a_reused_write_key_writes_nothing_after_it(pg_uri):
    """journal.append_each: "an append that raises leaves the earlier ones written and the later
    ones not". The first append of the batch reuses a stored write key for a different entry
    (JournalWriteError): the second must not be written (as one by one, memory and SQLite)."""
    journal = PostgresJournal(pg_uri)
    try:
        await journal.append("s", Phase.RUN_ENDED, write_key="run-end:a", payload={"status": "A"})
        with pytest.raises(JournalWriteError, match="already used"):
            await append_each(journal, "s", [
                {"phase": Phase.RUN_ENDED, "write_key": "run-end:a", "payload": {"status": "B"}},
                {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed", "payload": {}},
            ])
        assert [e.write_key for e in await journal.entries("s")] == ["run-end:a"]
    finally:
        await journal.close()


@pytest.mark.case("C-10a")
async def test_connection_killed_in_a_batch_commit_stores_the_batch_once(pg_uri, kill_at_commit):
    """C-10 (a) for a batch: the backend is killed inside the commit of [INTENT, EXECUTED]; the
    retry under the same write keys stores both once, in order: no duplicate, no gap."""
    journal = PostgresJournal(pg_uri, fast_outcomes=True)
    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="saga:open", payload={})
        kill_at_commit(1)
        batch = [{"phase": Phase.INTENT, "write_key": "c1:intent", "tool": "t", "call_id": "c1"},
                 {"phase": Phase.EXECUTED, "write_key": "c1:outcome", "tool": "t", "call_id": "c1",
                  "payload": {"result": 1}}]
        intent, executed = await append_each(journal, "s", batch)
        assert (intent.seq, executed.seq, executed.prev_hash) == (2, 3, intent.hash)
        assert await journal.entries("s") == [(await journal.entries("s"))[0], intent, executed]
        assert (await verify_one(journal, "s")).ok
    finally:
        await journal.close()


async def test_a_worker_of_the_previous_release_appends_through_0001s_procedure_in_one_chain(pg_uri):
    """Rolling upgrade: after `db migrate` to 0002, a worker still running the previous release
    appends with 0001's `CALL sagacity_append(...)` while upgraded ones use the new function, on
    one saga. Both take the same advisory lock: one chain, 1..N, that verifies."""
    journal = PostgresJournal(pg_uri)

    def old_worker_append(phase: Phase, key: str) -> None:
        request = AppendRequest.build("s", phase, write_key=key, tool="t", call_id=key,
                                      payload={"from": "0001"})
        now = utc_stamp()
        head, middle, tail = byte_pieces(request, now)
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            status = conn.execute(
                "CALL sagacity_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                ("s", phase.value, "t", key, key, now, "0" * 64, head, middle, tail, True, None,
                 ["SAGA_CLOSED"]),
            ).fetchone()[0]
        assert status == "inserted"

    try:
        await journal.append("s", Phase.SAGA_OPENED, write_key="open", payload={})
        old_worker_append(Phase.INTENT, "old-1")
        await journal.append("s", Phase.INTENT, write_key="new-1", tool="t", call_id="new-1")
        old_worker_append(Phase.EXECUTED, "old-2")
        await journal.append("s", Phase.EXECUTED, write_key="new-2", tool="t", call_id="new-2")
        entries = await journal.entries("s")
        assert [e.write_key for e in entries] == ["open", "old-1", "new-1", "old-2", "new-2"]
        assert_chain(entries, 5)
        assert (await verify_one(journal, "s")).ok
    finally:
        await journal.close()


@pytest.mark.parametrize("options", [{"durable_outcomes": True}, {}, {"fast_outcomes": True}],
                         ids=["durable", "default", "fast_outcomes"])
async def test_each_entry_of_a_saga_commits_as_the_docs_say(pg_uri, commit_settings, options):
    """docs/postgres.md, "Which appends wait for the flush": every INTENT and SAGA_CLOSED commits
    synchronously; SAGA_OPENED and RUN_STARTED never wait; outcomes wait only with
    durable_outcomes (issue 22: one durable commit per call by default; the run's last outcome
    is flushed by the RUN_ENDED + SAGA_CLOSED commit before the run returns).
    Read from the synchronous_commit each row's COMMIT actually ran with, for a whole saga run."""
    @function_tool
    @compensable(undo=lambda ctx: None)
    async def reserve(item: str) -> str:
        """Reserve."""
        return f"reserved {item}"

    model = ScriptedModel()
    model.enqueue([function_call("reserve", {"item": "a"}, call_id="c1")])
    model.enqueue([function_call("reserve", {"item": "b"}, call_id="c2")])
    model.enqueue([assistant_message("done")])
    sagacity = Sagacity(PostgresJournal(pg_uri, **options))
    try:
        result = await sagacity.run(Agent(name="a", model=model, tools=[reserve]), "go")
        assert result.status is SagaStatus.COMPLETED
    finally:
        await sagacity.aclose()
    with admin_connect(pg_uri) as conn:
        rows = conn.execute("SELECT phase, sync FROM sagacity_test_commits").fetchall()
    outcome = "on" if options.get("durable_outcomes") else "off"
    assert sorted(rows) == sorted([
        ("SAGA_OPENED", "off"), ("RUN_STARTED", "off"),
        ("INTENT", "on"), ("EXECUTED", outcome), ("INTENT", "on"), ("EXECUTED", outcome),
        # RUN_ENDED and SAGA_CLOSED are one batch, one transaction: its commit waits.
        ("RUN_ENDED", "on"), ("SAGA_CLOSED", "on"),
    ])
