"""Child-process side of the multi-process SQLite tests (imported by spawned processes)."""

from __future__ import annotations

import asyncio
from typing import Any


def append_many(
    path: str, saga_id: str, writer: str, count: int, barrier: Any, synchronous: str = "FULL"
) -> None:
    """Open the journal after every writer is ready (racing on schema setup too), then append
    ``count`` entries with write keys ``{writer}:{i}``."""
    from sagacity_agents.core.entries import Phase
    from sagacity_agents.core.sqlite_journal import SqliteJournal

    barrier.wait(timeout=60)

    async def main() -> None:
        journal = SqliteJournal(path, synchronous=synchronous)
        try:
            for i in range(count):
                await journal.append(
                    saga_id, Phase.EXECUTED, write_key=f"{writer}:{i}", tool="t",
                    call_id=f"{writer}-{i}", payload={"writer": writer, "i": i},
                )
        finally:
            await journal.close()

    asyncio.run(main())
