"""One durable commit per call (issue 22, item 1), its process-crash half: a call's outcome is
committed without waiting for the disk, and a process killed (SIGKILL) right after that append
returned, before the next INTENT, loses nothing: the entry is in the file, the chain verifies,
the call is not in doubt. (The power-loss half, where the outcome may be lost and the call is
then in doubt, cannot be produced by a test: docs/architecture.md, "One durable commit per
call".)"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap

import pytest

from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.core.evidence import verify_sagas
from sagacity_agents.core.ledger import SagaLedger

pytestmark = pytest.mark.multiprocess

_CHILD = textwrap.dedent('''
    import asyncio, os, signal, sys
    from sagacity_agents.backends import Phase, SqliteJournal

    async def main(path):
        j = SqliteJournal(path)
        await j.append("s", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        run = await j.append("s", Phase.RUN_STARTED, write_key="run", expected_seq=1,
                             payload={"agent": "a", "holder": "h", "lease_seconds": 30.0,
                                      "took_over": None})
        intent = await j.append("s", Phase.INTENT, write_key="c1:intent", tool="t", call_id="c1",
                                payload={"args": {"n": 1}, "reversibility": "compensatable"},
                                fence=run.seq)
        await j.append("s", Phase.EXECUTED, write_key="c1:outcome", tool="t", call_id="c1",
                       payload={"intent_seq": intent.seq, "result": "done"}, fence=run.seq)
        # The outcome's commit did not wait for the disk (what this test is about).
        print("lazy" if not j._durable_now else "durable", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # before the next INTENT, nothing closed

    asyncio.run(main(sys.argv[1]))
''')


def test_sigkill_after_a_lazy_outcome_returned_loses_nothing(tmp_path):
    path = tmp_path / "journal.db"
    child = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.strip() == "lazy", child.stdout + child.stderr

    async def read():
        journal = SqliteJournal(path)
        try:
            return await journal.entries("s"), await verify_sagas(journal)
        finally:
            await journal.close()

    entries, results = asyncio.run(read())
    assert [e.phase for e in entries] == [Phase.SAGA_OPENED, Phase.RUN_STARTED, Phase.INTENT,
                                          Phase.EXECUTED]
    assert [r.ok for r in results] == [True], results
    assert SagaLedger(entries).in_doubt() == []  # the call's outcome is known: not in doubt
