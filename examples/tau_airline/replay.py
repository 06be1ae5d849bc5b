"""Direct replay of recorded tool calls against a store (no model, no saga).

Used by the cross-check (compare outputs with the recordings) and by the undo
check (execute a prefix, then compensate it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .recordings import RecordedCall
from .store import AirlineStore
from .tools import COMPENSATIONS, IRREVERSIBLE, MUTATING, call_tool, is_refusal

__all__ = ["ExecutedCall", "execute_calls", "touched_by"]


@dataclass
class ExecutedCall:
    """A recorded call as executed by our implementation.

    Attributes:
        call: The recorded call.
        output: Our tool's output.
        undo_data: What a mutating tool passed to ``record`` (``None`` for a
            read-only tool or a refusal).
    """

    call: RecordedCall
    output: str
    undo_data: dict[str, Any] | None = None

    @property
    def changed_database(self) -> bool:
        """``True`` for a successful (not refused) database-changing call."""
        return self.call.name in MUTATING and not is_refusal(self.output)

    @property
    def compensatable(self) -> bool:
        """``True`` if the call changed the database and has an undo."""
        return self.changed_database and self.call.name in COMPENSATIONS

    @property
    def irreversible(self) -> bool:
        """``True`` if the call changed the database and cannot be undone."""
        return self.changed_database and self.call.name in IRREVERSIBLE


def execute_calls(store: AirlineStore, calls: Iterable[RecordedCall]) -> list[ExecutedCall]:
    """Execute calls in order, capturing each mutating call's undo data.

    Args:
        store: The store to act on.
        calls: Recorded calls, in conversation order.

    Returns:
        One :class:`ExecutedCall` per call.
    """
    executed = []
    for call in calls:
        captured: list[dict[str, Any]] = []
        output = call_tool(store, call.name, call.arguments, record=captured.append)
        executed.append(ExecutedCall(call, output, captured[0] if captured else None))
    return executed


def touched_by(executed: ExecutedCall) -> tuple[set[str], set[str]]:
    """Reservations and users an executed irreversible call touched.

    ``cancel_reservation`` touches its reservation and that reservation's
    user; ``send_certificate`` touches its user.

    Args:
        executed: An executed call.

    Returns:
        ``(reservation_ids, user_ids)``; empty sets for any other call.
    """
    if not executed.irreversible or executed.undo_data is None:
        return set(), set()
    data = executed.undo_data
    reservations = {data["reservation_id"]} if "reservation_id" in data else set()
    return reservations, {data["user_id"]}
