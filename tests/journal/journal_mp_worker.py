"""Child-process side of the multi-process SQLite tests (imported by spawned processes)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any


def append_many(
    path: str,
    saga_id: str,
    writer: str,
    count: int,
    barrier: Any,
    synchronous: str = "FULL",
    pause: float = 0.0,
) -> None:
    """Open the journal after every writer is ready (racing on schema setup too), then append
    ``count`` entries with write keys ``{writer}:{i}``, sleeping ``pause`` seconds between appends
    (without it, SQLite's backing-off busy handler lets one writer run all its appends while the
    other sleeps, so the two barely interleave)."""
    from sagacity_agents.core.entries import Phase
    from sagacity_agents.backends.sqlite.journal import SqliteJournal

    barrier.wait(timeout=60)

    async def main() -> None:
        journal = SqliteJournal(path, synchronous=synchronous)
        try:
            for i in range(count):
                await journal.append(
                    saga_id, Phase.EXECUTED, write_key=f"{writer}:{i}", tool="t",
                    call_id=f"{writer}-{i}", payload={"writer": writer, "i": i},
                )
                if pause:
                    await asyncio.sleep(pause)
        finally:
            await journal.close()

    asyncio.run(main())
    # The package imports the SDK lazily: a process using only the journal never loads it.
    assert "agents" not in sys.modules, "the journal core imported the Agents SDK"
