"""Child-process side of the multi-process SQLite tests (imported by spawned processes)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import types
from typing import Any


def _import_core_only() -> None:
    """Make ``sagacity_agents`` importable without running its ``__init__`` (which imports the
    Agents SDK, ~2 s per process); the core must not need the SDK, and the child checks that."""
    if "sagacity_agents" in sys.modules:
        return
    spec = importlib.util.find_spec("sagacity_agents")
    assert spec is not None and spec.submodule_search_locations is not None
    package = types.ModuleType("sagacity_agents")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["sagacity_agents"] = package


def append_many(
    path: str, saga_id: str, writer: str, count: int, barrier: Any, synchronous: str = "FULL"
) -> None:
    """Open the journal after every writer is ready (racing on schema setup too), then append
    ``count`` entries with write keys ``{writer}:{i}``."""
    _import_core_only()
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
    assert "agents" not in sys.modules, "the journal core imported the Agents SDK"
