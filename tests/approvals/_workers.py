"""Child-process bodies for the multi-process approval tests (imported by ``spawn`` children).

Kept apart from the test module so a child imports only what it needs. A child loads the core
without running ``sagacity_agents/__init__.py`` (which pulls in the Agents SDK, ~2 s per process)
and checks that the SDK stayed unimported: the core must not depend on it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import importlib.util
import sys
import types
from typing import Any


def _open_store(location: str) -> Any:
    """The approval store at ``location`` (a SQLite path or a postgresql:// URI), imported
    without the package's ``__init__``."""
    if location.startswith("postgresql://"):
        module = _core_module("sagacity_agents.backends.postgres.approvals")
        return module.PostgresApprovalStore(location)
    return _core_module("sagacity_agents.backends.sqlite.approvals").SqliteApprovalStore(location)


def _core_approval() -> types.ModuleType:
    """Import ``sagacity_agents.backends.sqlite.approvals`` without the package's ``__init__``."""
    return _core_module("sagacity_agents.backends.sqlite.approvals")


def _core_module(name: str) -> types.ModuleType:
    """Import the core module ``name`` without the package's ``__init__``."""
    if "sagacity_agents" not in sys.modules:
        spec = importlib.util.find_spec("sagacity_agents")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("sagacity_agents")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["sagacity_agents"] = package
    module = importlib.import_module(name)
    assert "agents" not in sys.modules, "the core imported the Agents SDK"
    return module


def decide_later(path: str, request_id: str, delay: float, approver: str) -> None:
    """Open the store on ``path``, sleep ``delay`` seconds, approve ``request_id``."""
    async def main() -> None:
        store = _open_store(path)
        try:
            await asyncio.sleep(delay)
            now = dt.datetime.now(dt.timezone.utc)
            await store.decide(request_id, "approved", approver, "from another process", now)
        finally:
            await store.close()

    asyncio.run(main())


def race_consume(path: str, request_id: str, barrier: Any, results: Any) -> None:
    """Open the store, meet the other racer at ``barrier``, then try to consume ``request_id``.

    Puts ``("ok", None)`` or ``("refused", message)`` (or ``("error", repr)``) on ``results``.
    """
    approval = _core_approval()
    ApprovalError = approval.ApprovalError  # noqa: N806 - the class, from the same module tree

    async def main() -> tuple[str, str | None]:
        store = _open_store(path)
        try:
            barrier.wait(timeout=30)
            try:
                await store.consume([request_id], dt.datetime.now(dt.timezone.utc))
            except ApprovalError as exc:
                return "refused", str(exc)
            return "ok", None
        finally:
            await store.close()

    try:
        outcome = asyncio.run(main())
    except BaseException as exc:  # report, never hang the parent
        outcome = ("error", repr(exc))
    results.put(outcome)
