"""The fence: a saga's view of its journal that carries the run lease's token on every append.

Rules (design.md, "Fencing"; the journal side is ``core.journal``):

* While a run holds the saga's lease, every entry it writes carries the lease's token, the seq of
  its RUN_STARTED, and the journal writes it only while that RUN_STARTED is still the saga's
  newest: in the same transaction or statement as the insert, on every backend and every append
  path (one append, a batch, PostgreSQL's sole writer). A run whose lease another run took over
  (it stalled past the expiry: a blocked event loop, a suspended VM) writes nothing more, so it
  cannot start a tool body (no INTENT), undo anything (no COMPENSATING) or close the saga.
* One exception, because an effect that happened is a fact: the outcome of a call or an undo
  this run started before the loss (an append of :data:`~.journal.LATE_PHASES` that answers its
  own INTENT or COMPENSATING) is written *late*: unchecked, under the lost lease's token, marked
  ``late``, durable at once. Recovery pairs it with its INTENT like any outcome: the next
  recovery undoes it (or reports it), so the final report is true.
* Holders are compared, never clocks: the journal's check reads the entries, not the time. The
  lease's expiry (``core.lease``) only decides when another run may take it over.

:class:`FencedJournal` applies this for one saga; ``core.saga`` gives every live saga one, so no
append path of the saga (calls, outcomes written behind, compensation, approvals' CONSUMED, the
close) can forget the token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import JournalError, LeaseLostError, describe_error
from .entries import JournalEntry, Phase
from .journal import LATE_PHASES, Capabilities, Journal, SagaSummary, capabilities_of

__all__ = ["FencedJournal"]


def _answers_own_start(phase: Phase, payload: Any) -> bool:
    """Whether an append is the outcome of a call (its INTENT's seq in ``intent_seq``) or of an
    undo (``compensating_seq``) that the writer started: what may be written late."""
    if phase not in LATE_PHASES or not isinstance(payload, Mapping):
        return False
    start = payload.get("compensating_seq" if phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED)
                        else "intent_seq")
    return isinstance(start, int) and not isinstance(start, bool)


class FencedJournal:
    """One saga's view of a :class:`~.journal.Journal`: appends to that saga carry the fence
    of the lease the saga holds; everything else passes through unchanged.

    Args:
        journal: the journal (any backend that takes ``fence`` and ``late``).
        saga_id: the saga whose appends are fenced (appends to another saga are not).
        fence: returns the seq of the RUN_STARTED whose lease the saga holds now (``None``:
            it holds none: the append is unfenced, e.g. before its first run).
        on_lost: called once per refusal with the journal's :class:`LeaseLostError` (the saga
            stops its run at its next step).
        on_unjournaled: called with a text naming a late outcome the journal refused too (the
            saga was closed meanwhile: the effect exists and is in no entry), before the
            refusal is raised.

    RUN_STARTED is never fenced: it is how a lease is taken (conditionally, ``core.lease``).
    An append that passes ``fence`` itself is left as it is.
    """

    def __init__(
        self, journal: Journal, saga_id: str, fence: Callable[[], int | None],
        on_lost: Callable[[LeaseLostError], None],
        on_unjournaled: Callable[[str], None] | None = None,
    ) -> None:
        self.inner = journal
        """The journal underneath (what the saga was given)."""
        self.saga_id = saga_id
        self._fence = fence
        self._on_lost = on_lost
        self._on_unjournaled = on_unjournaled
        self.capabilities: Capabilities = capabilities_of(journal)
        """What the journal underneath offers (read once)."""
        if self.capabilities.batch_append:
            self.append_many = self._append_many
        if self.capabilities.sync_append:
            self.append_sync = self._append_sync

    def __getattr__(self, name: str) -> Any:
        # The backend's own attributes (writes_outcomes_behind, database, ...) read through;
        # not its append_sync, which would write unfenced (set in __init__ when it may be used).
        if name == "append_sync":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"FencedJournal({self.inner!r}, saga {self.saga_id!r})"

    def _fenced(self, saga_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        if saga_id != self.saga_id or "fence" in spec or spec.get("phase") is Phase.RUN_STARTED:
            return spec
        fence = self._fence()
        return spec if fence is None else {**spec, "fence": fence}

    async def append(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """:meth:`Journal.append`, fenced (see the class notes); a refused outcome of the
        writer's own call or undo is written late.

        Raises:
            LeaseLostError: the saga's lease is another run's now; nothing written (after
                ``on_lost``).
            The other errors of :meth:`Journal.append`.
        """
        spec = self._fenced(saga_id, {"phase": phase, **fields})
        try:
            return await self.inner.append(saga_id, **spec)
        except LeaseLostError as lost:
            self._on_lost(lost)
            if not _answers_own_start(phase, spec.get("payload")) or spec.get("late"):
                raise
            # The effect (or the undo) happened under our lease: journal it, marked late.
            try:
                return await self.inner.append(saga_id, **{**spec, "late": True})
            except JournalError as refused:  # closed meanwhile: say so wherever we can
                self._unjournaled(phase, spec, refused)
                raise

    def _append_sync(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """:meth:`append` through the backend's blocking ``append_sync`` (a sync tool's worker
        thread writes without a hop to the event loop), fenced and written late the same way.

        Raises:
            The errors of :meth:`append`.
        """
        spec = self._fenced(saga_id, {"phase": phase, **fields})
        try:
            return self.inner.append_sync(saga_id, **spec)  # type: ignore[attr-defined, no-any-return]
        except LeaseLostError as lost:
            self._on_lost(lost)
            if not _answers_own_start(phase, spec.get("payload")) or spec.get("late"):
                raise
            try:
                return self.inner.append_sync(saga_id, **{**spec, "late": True})  # type: ignore[attr-defined, no-any-return]
            except JournalError as refused:
                self._unjournaled(phase, spec, refused)
                raise

    def _unjournaled(self, phase: Phase, spec: Mapping[str, Any], refused: JournalError) -> None:
        """Say wherever we can that a late outcome could not be journaled (closed meanwhile)."""
        if self._on_unjournaled is not None:
            self._on_unjournaled(
                f"{phase.value} of {spec.get('tool')} (call {spec.get('call_id')}) could "
                f"not be journaled, even late: {describe_error(refused)}")

    async def _append_many(
        self, saga_id: str, appends: Sequence[Mapping[str, Any]]
    ) -> list[JournalEntry]:
        """The backend's ``append_many``, each append fenced (``core.journal.append_each``).

        Raises:
            LeaseLostError: as :meth:`append` (the appends before the refused one are written).
        """
        specs = [self._fenced(saga_id, dict(spec)) for spec in appends]
        try:
            return list(await self.inner.append_many(saga_id, specs))  # type: ignore[attr-defined]
        except LeaseLostError as lost:
            self._on_lost(lost)
            raise

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """:meth:`Journal.entries`, unchanged."""
        return await self.inner.entries(saga_id)

    async def saga_ids(self) -> list[str]:
        """:meth:`Journal.saga_ids`, unchanged."""
        return await self.inner.saga_ids()

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """:meth:`Journal.saga_summaries`, unchanged."""
        return await self.inner.saga_summaries(offset=offset, limit=limit)

    async def close(self) -> None:
        """:meth:`Journal.close` of the journal underneath."""
        await self.inner.close()
