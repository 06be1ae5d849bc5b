"""Which sagas need recovery: the rule behind ``sagacity saga recover --all``.

A saga needs recovery when its process stopped mid-run, i.e. its latest run lease expired
without a RUN_ENDED (``core.lease``), or when its last run ended IN_DOUBT or
COMPENSATION_FAILED (it was left open for recovery and a human's answer), or when its last run
ended COMPLETED and only its SAGA_CLOSED is missing (recovery closes it, undoing nothing). Never: a closed saga,
a saga a live run holds, an idle saga kept open between runs (``close=False``: RUN_ENDED OPEN), a
saga waiting for a human decision (RUN_ENDED AWAITING_APPROVAL), or a saga with no run lease at
all (written by hand or by a version without leases: nothing tells a crash from an idle saga).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from .entries import JournalEntry, Phase
from .lease import completed_unclosed, lease_of

__all__ = ["recovery_reason"]

_LEFT_FOR_RECOVERY = ("IN_DOUBT", "COMPENSATION_FAILED")


def recovery_reason(entries: Sequence[JournalEntry], now: dt.datetime | None = None) -> str | None:
    """Why the saga needs recovery, or ``None`` when it does not (see the module rule).

    Args:
        entries: the saga's entries in ``seq`` order.
        now: the time to judge the lease at (aware UTC; default: the clock).
    """
    if not entries or any(e.phase is Phase.SAGA_CLOSED for e in entries):
        return None
    lease = lease_of(entries)
    if lease is None:
        return None
    if not lease.ended:
        if lease.held(now):
            return None
        return (f"run lease of {lease.holder} (RUN_STARTED seq {lease.started_seq}) expired at "
                f"{lease.expires_at.isoformat().replace('+00:00', 'Z')} without RUN_ENDED")
    ended = [e for e in entries if e.phase is Phase.RUN_ENDED]
    status = ended[-1].payload.get("status") if ended and isinstance(ended[-1].payload, dict) else None
    if status in _LEFT_FOR_RECOVERY:
        return f"last run ended {status}: left open for recovery"
    if completed_unclosed(entries):
        # Killed (or its close write failed) between RUN_ENDED COMPLETED and SAGA_CLOSED:
        # recovery only writes the close, it undoes nothing.
        return "last run ended COMPLETED without SAGA_CLOSED: recovery closes it"
    return None
