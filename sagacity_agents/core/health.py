"""How many sagas need a human, read from the journal on demand (the still-dirty and in-doubt
gauges of ``sagacity_agents.otel``, docs/observability.md).

One :meth:`~sagacity_agents.core.journal.Journal.saga_summaries` pass: the journal's
``(saga_id, seq)`` index to list the sagas, then the first and last entry of each, never a
whole chain. A saga's state is its last entry's: a SAGA_CLOSED carries the final status and the
compensation report, a RUN_ENDED the status the run left the saga in. A saga whose last entry is
a late outcome may be REOPENED (that outcome followed its SAGA_CLOSED): that saga alone is read
whole (``core.ledger.reopened_by``; rare: a stalled holder's outcome). Unverified, like every
summary: a count to alert on, not evidence (``sagacity journal verify`` is).
Cost on a 200 k-entry journal: ``bench/observe_gauges.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .entries import Phase
from .journal import LATE_KEY, Journal
from .ledger import reopened_by

__all__ = ["SagaHealth", "saga_health"]


@dataclass(frozen=True, slots=True)
class SagaHealth:
    """Counts of sagas by what they need."""

    sagas: int
    """Sagas in the journal."""
    still_dirty: int
    """Sagas with an effect still in the world that should not be: closed COMPENSATED with a
    report that is not clean (a failed undo, an effect without undo, a call in doubt), left
    open COMPENSATION_FAILED, or REOPENED by a late outcome. Kept irreversible effects
    (approved on purpose) do not count."""
    in_doubt: int
    """Sagas left open IN_DOUBT: a call or an undo has no known outcome; a human checks the far
    side and answers with ``sagacity saga resolve``."""
    awaiting_approval: int
    """Sagas whose last run paused for a human decision."""
    reopened: int = 0
    """Sagas REOPENED by a late outcome after their SAGA_CLOSED (``SagaStatus.REOPENED``): the
    effect may be in the world while the saga said closed; ``recover --all`` undoes it. Also
    counted in :attr:`still_dirty`."""


def _state(last: Any) -> str | None:
    """The status a saga's last entry records (SAGA_CLOSED or RUN_ENDED), else ``None``."""
    if last.phase in (Phase.SAGA_CLOSED, Phase.RUN_ENDED) and isinstance(last.payload, dict):
        status = last.payload.get("status")
        return status if isinstance(status, str) else None
    return None


def _late(last: Any) -> bool:
    return isinstance(last.payload, dict) and last.payload.get(LATE_KEY) is True


def _dirty_report(report: Any) -> bool:
    return isinstance(report, dict) and any(report.get(k) for k in ("failed", "no_undo", "in_doubt"))


async def saga_health(journal: Journal) -> SagaHealth:
    """Count the journal's sagas by what they need (see :class:`SagaHealth`).

    Raises:
        JournalError: the journal could not be read.
    """
    sagas = dirty = doubt = waiting = reopened = 0
    # One call, not pages: each page would pass over the whole index again.
    for summary in await journal.saga_summaries():
        sagas += 1
        status = _state(summary.last)
        if status == "IN_DOUBT":
            doubt += 1
        elif status == "COMPENSATION_FAILED":
            dirty += 1
        elif status == "AWAITING_APPROVAL":
            waiting += 1
        elif status == "COMPENSATED" and summary.last.phase is Phase.SAGA_CLOSED:
            dirty += _dirty_report(summary.last.payload.get("report"))
        elif _late(summary.last) and reopened_by(await journal.entries(summary.saga_id)):
            reopened += 1
            dirty += 1
    return SagaHealth(sagas, dirty, doubt, waiting, reopened)
