"""Which sagas a :class:`~.journal.PostgresJournal` may append to without the saga's lock: the
sole writer's bookkeeping (see the journal module's notes, "A sole writer does not wait for the
lock", and "Fencing")."""

from __future__ import annotations

import threading

from ...core.entries import JournalEntry, Phase
from ...core.journal import FENCE_KEY, LATE_KEY, Tail

__all__ = ["LOCKED_AFTER_A_LOST_RACE", "TAILS_KEPT", "SoleWriter"]

LOCKED_AFTER_A_LOST_RACE = 32
"""Appends to a saga that go the locked way after a sole writer's insert found its seq taken
(another writer is active on it)."""
TAILS_KEPT = 4096
"""Sagas whose tail a journal remembers (and sagas it keeps on the locked way after a lost race);
past that it forgets them all (they then take the locked way once, or try alone again)."""
def _lease_at(entry: JournalEntry) -> int | None:
    """The saga's lease when ``entry`` was its last entry, as far as ``entry`` alone tells:
    a RUN_STARTED's own seq, the fence of an entry whose fence was checked, else ``None``."""
    if entry.phase is Phase.RUN_STARTED:
        return entry.seq
    payload = getattr(entry, "payload", None)
    if isinstance(payload, dict) and not payload.get(LATE_KEY):
        fence = payload.get(FENCE_KEY)
        if isinstance(fence, int) and not isinstance(fence, bool):
            return fence
    return None


class SoleWriter:
    """Which sagas this journal may append to without the lock: per saga, the tail it stored
    last (``(seq, hash, phase)``), its appends in flight, and how many appends still go the
    locked way after a lost race. Thread-safe (sync tools append from their own threads); a
    wrong answer only costs a round trip, never an entry (UNIQUE (saga_id, seq) decides)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tails: dict[str, Tail] = {}
        self._leases: dict[str, int] = {}
        self._in_flight: dict[str, int] = {}
        self._locked_for: dict[str, int] = {}

    def begin(self, saga_id: str, *, alone: bool = True, fence: int | None = None) -> Tail | None:
        """Count an append to ``saga_id`` in flight; return the tail to seal it on without the
        lock (``alone``), or ``None``: take the lock (unknown tail, another append of ours in
        flight, or a recent lost race; for an append fenced by ``fence``, also when the lease
        at that tail is not known to be ``fence``: the function checks it under the lock).

        The lease at the remembered tail is read from the tail entry alone: a RUN_STARTED is
        its own lease, an entry whose fence was checked was written under the lease it names,
        and the plain INSERT lands only while that entry is still the saga's last (UNIQUE
        (saga_id, seq)), so no RUN_STARTED can have come after it. Any other tail (unfenced,
        late) leaves the lease unknown."""
        with self._lock:
            busy = self._in_flight.get(saga_id, 0)
            self._in_flight[saga_id] = busy + 1
            locked_for = self._locked_for.pop(saga_id, 0)
            if locked_for > 1:
                self._locked_for[saga_id] = locked_for - 1
            if busy or locked_for or not alone:
                return None
            if fence is not None and self._leases.get(saga_id) != fence:
                return None
            return self._tails.get(saga_id)

    def end(self, saga_id: str, last: JournalEntry | None) -> None:
        """The append is over; ``last``: the saga's entry it stored or found (``None``: it
        raised)."""
        with self._lock:
            busy = self._in_flight.pop(saga_id) - 1
            if busy:
                self._in_flight[saga_id] = busy
            known = self._tails.get(saga_id)
            if last is not None and (known is None or last.seq > known[0]):
                if known is None and len(self._tails) >= TAILS_KEPT:
                    self._tails.clear()
                    self._leases.clear()
                phase = last.phase.value if isinstance(last.phase, Phase) else last.phase
                self._tails[saga_id] = (last.seq, last.hash, phase)
                lease = _lease_at(last)
                if lease is None:
                    self._leases.pop(saga_id, None)
                else:
                    self._leases[saga_id] = lease

    def lost_race(self, saga_id: str) -> None:
        """Another writer appended to ``saga_id``: forget its tail, lock for a while."""
        with self._lock:
            self._tails.pop(saga_id, None)
            self._leases.pop(saga_id, None)
            if saga_id not in self._locked_for and len(self._locked_for) >= TAILS_KEPT:
                self._locked_for.clear()  # sagas that lost a race and were not appended to since
            self._locked_for[saga_id] = LOCKED_AFTER_A_LOST_RACE
