"""Issue 22, item 3, on SQLite: who writes an append (``backends/sqlite/writer.py``).

A sync tool's worker thread writes its own appends (no thread hop); the event loop writes a lazy
append itself when nobody else is writing, one that waits for the disk only when no other work of
the loop is waiting (issue 37), and never waits for another connection's write lock; the lease a fenced append checks is remembered only while
nobody else appended (another writer's takeover is seen at once). Ordering and answers are the
same whoever writes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest

from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.errors import JournalError, LeaseLostError
from sagacity_agents.backends.sqlite import journal as sqlite_journal
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.journal import AppendRequest


def _record_writers(journal: SqliteJournal) -> list[tuple[str, str]]:
    """(phase of the group's first append, name of the thread that wrote it) per group."""
    seen: list[tuple[str, str]] = []
    real = journal._write_group

    def recording(group, wait=True):
        seen.append((group[0].requests[0].phase.value, threading.current_thread().name))
        return real(group, wait)

    journal._writer._write_group = recording
    return seen


async def test_each_append_is_written_by_the_thread_the_rule_names(tmp_path):
    journal = SqliteJournal(tmp_path / "j.db")
    seen = _record_writers(journal)
    loop_thread = threading.current_thread().name
    try:
        await journal.append("s", Phase.INTENT, write_key="i1", tool="t", call_id="c1", payload={})
        await journal.append("s", Phase.EXECUTED, write_key="o1", tool="t", call_id="c1",
                             payload={"intent_seq": 1})

        def sync_tool() -> str:
            journal.append_sync("s", Phase.INTENT, write_key="i2", tool="t", call_id="c2", payload={})
            journal.append_sync("s", Phase.EXECUTED, write_key="o2", tool="t", call_id="c2",
                                payload={"intent_seq": 3})
            return threading.current_thread().name

        worker = await asyncio.to_thread(sync_tool)
        assert worker not in (loop_thread, "") and not worker.startswith("sagacity-sqlite")
        assert seen[0] == ("INTENT", loop_thread)  # durable, but nothing else waits on the loop
        assert seen[1] == ("EXECUTED", loop_thread)  # lazy, nobody writing: the loop itself
        assert seen[2:] == [("INTENT", worker), ("EXECUTED", worker)]  # no hop at all
        entries = await journal.entries("s")
        assert [e.seq for e in entries] == [1, 2, 3, 4]
        assert verify_entries("s", entries).ok
    finally:
        await journal.close()


async def test_a_durable_append_keeps_its_thread_while_other_work_of_the_loop_waits(tmp_path):
    """An INTENT waits for the disk: with a callback ready on the loop, a timer about to fire, or
    another thread's wake-up, it is written on the journal's thread (the loop never makes other
    work wait for a flush); a lazy outcome is still the loop's."""
    journal = SqliteJournal(tmp_path / "j.db")
    seen = _record_writers(journal)
    loop = asyncio.get_running_loop()
    loop_thread = threading.current_thread().name
    try:
        loop.call_soon(lambda: None)  # ready work
        await journal.append("s", Phase.INTENT, write_key="i1", tool="t", call_id="c1", payload={})
        loop.call_soon(lambda: None)
        await journal.append("s", Phase.EXECUTED, write_key="o1", tool="t", call_id="c1",
                             payload={"intent_seq": 1})
        loop.call_later(0.001, lambda: None)  # a timer due within the slack
        await journal.append("s", Phase.INTENT, write_key="i2", tool="t", call_id="c2", payload={})
        assert [phase for phase, _ in seen] == ["INTENT", "EXECUTED", "INTENT"]
        assert seen[0][1].startswith("sagacity-sqlite") and seen[2][1].startswith("sagacity-sqlite")
        assert seen[1][1] == loop_thread
        assert [e.seq for e in await journal.entries("s")] == [1, 2, 3]
    finally:
        await journal.close()


async def test_loop_idle_sees_ready_callbacks_timers_and_descriptors():
    from sagacity_agents.backends.sqlite.writer import IDLE_SLACK, loop_idle

    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)
    assert loop_idle(loop)
    handle = loop.call_soon(lambda: None)
    assert not loop_idle(loop)
    await asyncio.sleep(0)  # it ran
    timer = loop.call_later(IDLE_SLACK / 5, lambda: None)
    assert not loop_idle(loop)
    timer.cancel()
    await asyncio.sleep(0)
    far = loop.call_later(60, lambda: None)  # a timer far off is no waiting work
    assert loop_idle(loop)
    waker = threading.Thread(target=loop.call_soon_threadsafe, args=(lambda: None,))
    waker.start()
    waker.join()  # its wake-up is written: the loop's selector has it ready
    assert not loop_idle(loop)
    far.cancel()
    await asyncio.sleep(0)
    assert handle.cancelled() is False


async def test_the_loop_does_not_wait_for_another_connections_write_lock(tmp_path):
    """Another process holds the file's write lock: the loop's lazy append is queued for the
    journal's thread (which waits for the lock) and the loop goes on running meanwhile."""
    path = tmp_path / "j.db"
    journal = SqliteJournal(path)
    seen = _record_writers(journal)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await journal.append("s", Phase.INTENT, write_key="i", tool="t", call_id="c", payload={})
        other.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticking = asyncio.ensure_future(ticker())
        outcome = asyncio.ensure_future(journal.append(
            "s", Phase.EXECUTED, write_key="o", tool="t", call_id="c", payload={"intent_seq": 1}))
        # However slowly a loaded machine ticks: 20 ticks of the loop while the append still
        # waits for the lock (a loop blocked by it would tick only after it gave up)...
        while ticks < 20:
            await asyncio.sleep(0.01)
        assert not outcome.done()  # ...waiting on the journal's thread: the loop kept running
        other.execute("ROLLBACK")
        entry = await asyncio.wait_for(outcome, 60)
        ticking.cancel()
        assert entry.seq == 2
        # The loop's own attempt found the lock taken and wrote nothing; the journal's thread
        # waited for the lock and wrote it.
        # (The INTENT before it was the loop's own: nothing else was waiting then.)
        assert [(phase, who.startswith("sagacity-sqlite")) for phase, who in seen] == [
            ("INTENT", False), ("EXECUTED", False), ("EXECUTED", True)]
        assert [e.seq for e in await journal.entries("s")] == [1, 2]
    finally:
        other.close()
        await journal.close()


async def test_a_takeover_by_another_writer_is_seen_by_the_next_fenced_append(tmp_path):
    """The remembered lease is used only while the stored tail is the one this connection wrote:
    another journal object (another process) that took the saga over is seen at once."""
    first = SqliteJournal(tmp_path / "j.db")
    second = SqliteJournal(tmp_path / "j.db")
    try:
        run = await first.append("s", Phase.RUN_STARTED, write_key="r1", payload={"holder": "a"})
        await first.append("s", Phase.INTENT, write_key="i1", tool="t", call_id="c1", payload={},
                           fence=run.seq)
        taken = await second.append("s", Phase.RUN_STARTED, write_key="r2", payload={"holder": "b"})
        with pytest.raises(LeaseLostError):
            await first.append("s", Phase.INTENT, write_key="i2", tool="t", call_id="c2",
                               payload={}, fence=run.seq)
        with pytest.raises(LeaseLostError):
            await asyncio.to_thread(first.append_sync, "s", Phase.EXECUTED, write_key="o1",
                                    tool="t", call_id="c1", payload={"intent_seq": 2},
                                    fence=run.seq)
        # The new holder appends under its own fence; the old one's late outcome is recorded.
        await second.append("s", Phase.INTENT, write_key="i3", tool="t", call_id="c3",
                            payload={}, fence=taken.seq)
        late = await first.append("s", Phase.EXECUTED, write_key="o1", tool="t", call_id="c1",
                                  payload={"intent_seq": 2}, fence=run.seq, late=True)
        assert late.seq == 5
        # And the first writer, seeing the new tail, checks the lease again (refused again).
        with pytest.raises(LeaseLostError):
            await first.append("s", Phase.INTENT, write_key="i4", tool="t", call_id="c4",
                               payload={}, fence=run.seq)
        entries = await first.entries("s")
        assert [e.phase for e in entries] == [Phase.RUN_STARTED, Phase.INTENT, Phase.RUN_STARTED,
                                              Phase.INTENT, Phase.EXECUTED]
        assert verify_entries("s", entries).ok
    finally:
        await first.close()
        await second.close()


async def test_threads_and_the_loop_writing_at_once_keep_one_gap_free_chain(tmp_path):
    """Worker threads writing their own appends, loop appends and reads interleaved on one
    connection: every saga's chain is gap-free and verifies, and every read saw a committed
    prefix (never an entry of another thread's open transaction)."""
    journal = SqliteJournal(tmp_path / "j.db")
    run = await journal.append("shared", Phase.RUN_STARTED, write_key="r", payload={"holder": "h"})
    reads: list[list[int]] = []
    try:
        def worker(n: int) -> None:
            for i in range(25):
                journal.append_sync(f"w{n}", Phase.INTENT, write_key=f"i{i}", tool="t",
                                    call_id=f"c{i}", payload={"i": i})
                journal.append_sync("shared", Phase.EXECUTED, write_key=f"w{n}-{i}", tool="t",
                                    call_id=f"w{n}", payload={"i": i}, fence=run.seq)

        async def loop_writer() -> None:
            for i in range(25):
                await journal.append("shared", Phase.INTENT, write_key=f"loop-{i}", tool="t",
                                     call_id="loop", payload={"i": i}, fence=run.seq)
                reads.append([e.seq for e in await journal.entries("shared")])

        await asyncio.gather(loop_writer(), *(asyncio.to_thread(worker, n) for n in range(4)))
        shared = await journal.entries("shared")
        assert [e.seq for e in shared] == list(range(1, 2 + 25 + 4 * 25))
        assert verify_entries("shared", shared).ok
        for n in range(4):
            own = await journal.entries(f"w{n}")
            assert [e.seq for e in own] == list(range(1, 26)) and verify_entries(f"w{n}", own).ok
        for seqs in reads:
            assert seqs == list(range(1, len(seqs) + 1))
    finally:
        await journal.close()


def test_closing_while_a_worker_thread_writes_answers_every_queued_caller(tmp_path):
    """A sync tool's thread is writing (it holds the writer) while another thread's append is
    queued behind it and the journal is closed: the writer gets its committed entry, the queued
    caller gets an error at once (the journal is closed); nobody is left waiting forever, even
    when the writer hands the queue over only after the journal's thread has stopped."""
    journal = SqliteJournal(tmp_path / "j.db")
    inside, go = threading.Event(), threading.Event()
    closed = threading.Event()

    class Holding:
        """Holds the first append inside its write (under the connection's lock)."""

        def tag_entry(self, entry):
            if not inside.is_set():
                inside.set()
                go.wait(5)
            return entry

    holding = Holding()
    real_release = journal._writer._release

    def release_late() -> None:
        closed.wait(5)  # the writer's thread is descheduled until the close is over
        real_release()

    journal._writer._release = release_late
    results: dict[str, object] = {}

    def append(name: str) -> None:
        try:
            results[name] = journal.append_sync(AppendRequest.build(
                "s", Phase.INTENT, write_key=name, tool="t", call_id=name, payload={}, tagger=holding))
        except BaseException as exc:  # noqa: BLE001 - recorded for the asserts
            results[name] = exc

    def close() -> None:
        asyncio.run(journal.close())
        closed.set()

    writer = threading.Thread(target=append, args=("a",), daemon=True)
    writer.start()
    assert inside.wait(5)
    queued = threading.Thread(target=append, args=("b",), daemon=True)
    queued.start()
    while not journal._writer._queue:
        threading.Event().wait(0.001)
    closer = threading.Thread(target=close, daemon=True)
    closer.start()
    threading.Event().wait(0.05)  # close() is waiting for the connection's lock
    go.set()
    for thread in (writer, closer, queued):
        thread.join(5)
    assert not queued.is_alive(), "the queued caller was never answered"
    assert getattr(results["a"], "seq", None) == 1, results["a"]
    assert isinstance(results["b"], JournalError), results["b"]
    check = sqlite3.connect(tmp_path / "j.db")
    assert check.execute("SELECT write_key FROM sagacity_journal").fetchall() == [("a",)]
    check.close()


async def test_the_first_commit_after_the_journals_checkpoint_is_not_the_loops(tmp_path, monkeypatch):
    """A checkpoint that copied the whole WAL makes the next commit restart the WAL, and SQLite
    syncs the new WAL header in that commit (``synchronous=NORMAL`` too): an fdatasync. The loop
    must not be the one making it (strace showed the loop's thread calling fdatasync once per
    checkpoint, i.e. every 125 calls): that commit goes to the journal's thread; the next lazy
    one is the loop's again. (Other work keeps the loop busy here: an idle loop may make a sync
    itself, it delays nobody; a busy one never does.)"""
    monkeypatch.setattr(sqlite_journal, "_CHECKPOINT_EVERY", 4)
    journal = SqliteJournal(tmp_path / "j.db")
    seen = _record_writers(journal)
    loop_thread = threading.current_thread().name

    async def busy() -> None:
        while True:
            await asyncio.sleep(0)

    other_work = asyncio.ensure_future(busy())
    try:
        for i in range(4):
            await journal.append("s", Phase.INTENT, write_key=f"i{i}", tool="t", call_id=f"c{i}",
                                 payload={})
            while journal._writer._draining:  # the journal's thread ends its drain after answering
                await asyncio.sleep(0.001)
            await journal.append("s", Phase.EXECUTED, write_key=f"o{i}", tool="t",
                                 call_id=f"c{i}", payload={"intent_seq": 2 * i + 1})
        # Commits 1..4, then the third INTENT (commit 5) checkpoints after its sync.
        outcomes = [who == loop_thread for phase, who in seen if phase == "EXECUTED"]
        assert outcomes == [True, True, False, True]
        assert not any(who == loop_thread for phase, who in seen if phase == "INTENT")
        assert [e.seq for e in await journal.entries("s")] == list(range(1, 9))
    finally:
        other_work.cancel()
        await journal.close()


async def test_a_checkpoint_due_after_the_loops_durable_commit_runs_on_the_journals_thread(tmp_path, monkeypatch):
    """The idle loop writes and syncs an INTENT itself; the checkpoint that commit makes due (it
    syncs the database file) is handed to the journal's thread, never run on the loop."""
    monkeypatch.setattr(sqlite_journal, "_CHECKPOINT_EVERY", 2)
    journal = SqliteJournal(tmp_path / "j.db")
    seen = _record_writers(journal)
    ran_on: list[str] = []
    real = journal._checkpoint

    def recording() -> None:
        ran_on.append(threading.current_thread().name)
        real()

    journal._checkpoint = recording
    loop_thread = threading.current_thread().name
    try:
        for i in range(4):
            await journal.append("s", Phase.INTENT, write_key=f"i{i}", tool="t", call_id=f"c{i}", payload={})
            await asyncio.wrap_future(journal._executor.submit(lambda: None))  # a handed-over checkpoint done
        assert [who for _, who in seen] == [loop_thread] * 4
        assert ran_on and all(who.startswith("sagacity-sqlite") for who in ran_on)
        assert [e.seq for e in await journal.entries("s")] == [1, 2, 3, 4]
    finally:
        await journal.close()
