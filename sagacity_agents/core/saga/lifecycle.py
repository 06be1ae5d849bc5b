"""A saga's runs and its run lease: opening the saga (once per saga id), taking the lease for one
run (RUN_STARTED, renewed while the run lasts), and releasing it (RUN_ENDED).

Rules: design.md, "Runs, leases and the end of a saga"; the lease itself is ``core.lease``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ...errors import (
    JournalConflictError, JournalError, JournalWriteError, LeaseLostError, RunStalledError, SagaStateError,
)
from ...errors import describe_error as _describe
from ..entries import JournalEntry, Phase
from ..evidence import verified_entries
from ..identity import derivation_of, journal_id_of, opening_payload
from ..journal import append_each
from ..lease import LeaseKeeper, acquire_lease, new_holder_id
from ..ledger import SagaLedger, reopened_by
from ..protection import secure
from ..undo import StopSignal
from .state import SagaCore
from .status import SagaStatus

__all__ = ["RunLifecycle"]


class RunLifecycle:
    """Opening a saga and holding its run lease (a part of :class:`~.saga.Saga`).

    Args:
        core: the saga's shared state.
        metadata: JSON-able data journaled with SAGA_OPENED.
        lease_seconds: the run lease's duration (checked by the caller).
    """

    def __init__(self, core: SagaCore, metadata: dict[str, Any], lease_seconds: float) -> None:
        self.core = core
        self.metadata = metadata
        self.lease_seconds = lease_seconds
        self.holder = new_holder_id()
        """This object's run-lease holder id (``host:pid:random``)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the saga was opened on (sync bodies' journal writes hop to it)."""
        self.compensation_stop = StopSignal()
        """Set when the run's caller is cancelled while the saga compensates: the walk stops at
        its next step boundary (``core.compensation.compensate``)."""
        self._opened = False
        self._recovering = False
        self._keeper: LeaseKeeper | None = None
        self._journal_id: str | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self.idle_periods: int | None = None
        """Lease periods without progress before the keeper stops the run (``None``: ``max(3,
        ceil(longest deadline or model timeout in flight / lease_seconds))``, ``core.lease``)."""
        self.keeper: LeaseKeeper | None = None
        """The latest run's lease keeper (kept after the run ends: why it stopped,
        :attr:`LeaseKeeper.stopped_by`)."""

    async def open(self, *, recovering: bool = False, verified: list[JournalEntry] | None = None) -> None:
        """Journal SAGA_OPENED (once per saga id; a retry or a later process is harmless) and
        bind the saga to the running event loop.

        Args:
            recovering: allow a saga that failed (it ended COMPENSATION_FAILED or IN_DOUBT, or
                its process stopped while compensating): recovery finishes it.
            verified: the saga's entries, verified by the caller just now (not read again).

        Raises:
            SagaStateError: the saga is closed in the journal (closed is terminal), or it failed
                (a failed saga takes no more runs: recover it).
            EvidenceError: the saga's journal does not verify (nothing is written).
            JournalError: the journal cannot be written.
        """
        self.loop = asyncio.get_running_loop()
        if self._opened:
            return
        if self.core.fresh_id:
            await self._bind([])
            opened = await self.core.journal.append(
                self.core.saga_id, Phase.SAGA_OPENED, write_key="saga:open", payload=self._opening()
            )
            self._derive([opened])
            self._opened = True
            return
        existing = verified if verified is not None else await verified_entries(
            self.core.journal, self.core.saga_id, self.core.evidence)
        self._refuse_state(existing, recovering)
        self._recovering = recovering
        await self._bind(existing)
        if not existing:
            try:
                existing = [await self.core.journal.append(
                    self.core.saga_id, Phase.SAGA_OPENED, write_key="saga:open",
                    payload=self._opening(), expected_seq=0,
                )]
            except JournalWriteError:
                # Opened meanwhile by another writer (two first runs of one saga id at once):
                # the lease decides which of them runs.
                existing = await self.core.journal.entries(self.core.saga_id)
                if not any(e.phase is Phase.SAGA_OPENED for e in existing):
                    raise
                self.core.journal.seals.pop(self.core.saga_id, None)
                await self._bind(existing)
        self._derive(existing)
        self._opened = True

    async def _bind(self, entries: list[JournalEntry]) -> None:
        """Learn the journal's id, and let the saga's view know what its tags bind."""
        self._journal_id = await journal_id_of(self.core.journal)
        await self.core.journal.bind(self.core.saga_id, entries)

    def _opening(self) -> dict[str, Any]:
        """The SAGA_OPENED payload of a saga this object opens (``core.identity``)."""
        return opening_payload(self.metadata, self._journal_id)

    def _derive(self, entries: list[JournalEntry]) -> None:
        """Set the saga's key derivation from its first entries (its SAGA_OPENED first)."""
        self.core.derivation = derivation_of(entries, self._journal_id)

    def _refuse_state(self, existing: list[JournalEntry], recovering: bool) -> None:
        closes = [e for e in existing if e.phase is Phase.SAGA_CLOSED]
        reopened = reopened_by(existing)
        if reopened is not None and recovering:
            # A late outcome after the close reopened it: recovery undoes it and closes again.
            self.core.close_key = f"saga:closed:after:{reopened[0]}"
        elif reopened is not None:
            raise SagaStateError(
                f"saga {self.core.saga_id} was reopened: a late outcome (seq {reopened[1]}) "
                f"landed after its SAGA_CLOSED (seq {reopened[0]}); it takes no more runs: "
                "recover it (Sagacity.recover or `sagacity saga recover`)")
        elif closes:
            last = closes[-1].payload if isinstance(closes[-1].payload, dict) else {}
            raise SagaStateError(
                f"saga {self.core.saga_id} is closed ({last.get('status')}); a closed saga is "
                "terminal: open a new saga"
            )
        if not recovering and any(e.phase is Phase.SAGA_FAILED for e in existing):
            raise SagaStateError(
                f"saga {self.core.saga_id} failed and is not closed (it ended COMPENSATION_FAILED or "
                "IN_DOUBT, or its process stopped while compensating); it takes no more runs: "
                "recover it (Sagacity.recover or `sagacity saga recover`)"
            )

    async def begin_run(self, agent_name: str, *, recovering: bool = False,
                        verified: list[JournalEntry] | None = None) -> None:
        """:meth:`open` then :meth:`start_run`. For a saga this object created, SAGA_OPENED and
        RUN_STARTED go to the journal together (one round trip where it batches appends,
        ``core.journal.append_each``). ``verified``: the saga's entries, verified by the caller
        just now: neither step reads them again.

        Raises:
            As :meth:`open` and :meth:`start_run`.
        """
        if self.core.fresh_id and not self._opened:
            self.loop = asyncio.get_running_loop()
            await self._bind([])
            await self.start_run(agent_name, opening={
                "phase": Phase.SAGA_OPENED, "write_key": "saga:open", "payload": self._opening(),
            })
            opened = self.core.journal.opened_entry()
            self._derive([opened] if opened is not None
                         else (await self.core.journal.entries(self.core.saga_id))[:1])
            self._opened = True
            return
        await self.open(recovering=recovering, verified=verified)
        await self.start_run(agent_name, verified=verified or None)

    async def start_run(self, agent_name: str, *, opening: dict[str, Any] | None = None,
                        verified: list[JournalEntry] | None = None) -> None:
        """Take the saga's run lease: journal RUN_STARTED for one run (segment), resume,
        recovery or close of the saga, and keep the lease renewed until :meth:`end_run`.
        ``opening``: the SAGA_OPENED append of a saga this object created, written in the same
        batch (:meth:`begin_run`). ``verified``: the saga's entries, verified by the caller just
        now: the lease is decided on them, and when RUN_STARTED follows them directly and no
        outcome may still land late (``SagaLedger.awaits_outcome``) both are kept in
        :attr:`verified` for compensation and the close.

        Raises:
            SagaStateError: another run holds the saga's lease and it has not expired, or the
                saga is closed or failed (see :meth:`open`); nothing was written.
            JournalError: the journal cannot be read or written.
        """
        self.loop = asyncio.get_running_loop()
        recovering = self._recovering
        if not self.core.fresh_id and self.core.data_keys.master is not None:
            # A master key that cannot open the saga's stored data key refuses the run here,
            # before RUN_STARTED holds a lease nobody keeps.
            await self.core.data_keys.for_saga(self.core.journal, self.core.saga_id, create=False)
        started = await acquire_lease(
            self.core.journal, self.core.saga_id, holder=self.holder, seconds=self.lease_seconds,
            agent=agent_name,
            check=None if self.core.fresh_id else (lambda entries: self._refuse_state(entries, recovering)),
            opening=opening, known_entries=verified,
        )
        # Kept only while nothing can land after RUN_STARTED that compensation or the close
        # must see: a stalled holder writes the outcome of its call (or undo) late, unfenced.
        self.core.verified = ([*verified, started] if verified and started.seq == verified[-1].seq + 1
                              and not SagaLedger(verified).awaits_outcome() else None)
        # Every entry of this run carries the lease's token from now on (core.fence); kept after
        # RUN_ENDED, so that nothing this object writes later passes for another run's.
        self.core.fence = started.seq
        # Only now, the lease held: a refused run makes (and stores) no data key.
        await self.secure()
        self.core.lease_lost = None
        self.compensation_stop = StopSignal()  # a stop asked of an earlier run is not this run's
        if self._keeper is not None:  # a run started again without its end: one keeper at a time
            await self._keeper.stop()
        self.core.last_journaled = time.monotonic()
        self.core.progress.note()
        self._run_task = asyncio.current_task()
        self._keeper = self.keeper = LeaseKeeper(
            self.core.journal, self.core.saga_id, self.holder, self.lease_seconds, lambda: self.core.last_journaled,
            fence=started.seq, on_lost=self._lost, progress=self.core.progress,
            idle_periods=self.idle_periods,
        )
        self._keeper.start()

    async def secure(self) -> None:
        """Give the saga its secrets (``core.protection.secure``): from now on every append of
        it through its fenced view commits and seals its sensitive values. Called once a run
        holds the lease (:meth:`start_run`), or by ``Saga.open`` used without a run.

        Raises:
            DataKeyError: the saga's stored key was wrapped by a master key this process lacks.
            JournalError: the data-key store could not be read or written.
        """
        self.core.secrets = await secure(self.core.journal, self.core.data_keys,
                                         self.core.saga_id, journal_id=self._journal_id_text())

    def _journal_id_text(self) -> str | None:
        """The journal's id as read when the saga was bound (``""``: it has none), or ``None``
        when it was not bound here (read by ``core.protection.secure``)."""
        return (self._journal_id or "") if self._opened or self._journal_id is not None else None

    def _lost(self, lost: LeaseLostError) -> None:
        """The keeper saw the lease lost, or stopped renewing it for want of progress: a stalled
        run is stopped (its task cancelled; :meth:`stalled_error` turns that cancellation into
        the :class:`RunStalledError` its caller gets), for the lease to expire and a recovery
        to take the saga."""
        self.core.lose_lease(lost)
        task = self._run_task
        if isinstance(lost, RunStalledError) and task is not None and not task.done():
            task.cancel(str(lost))

    def stalled_error(self, exc: BaseException | None) -> RunStalledError | None:
        """The stall that ended the run, when ``exc`` (what the run raised) is the cancellation
        the keeper caused (the cancellation is then withdrawn from the task: the caller gets
        the error instead); else ``None``."""
        stalled = self.keeper.stalled if self.keeper is not None else None
        if stalled is None or not isinstance(exc, asyncio.CancelledError):
            return None
        task = asyncio.current_task()
        if task is not None and task is self._run_task and task.cancelling():
            task.uncancel()
        return stalled

    @property
    def running(self) -> bool:
        """True between :meth:`start_run` and :meth:`end_run` (this object holds the lease)."""
        return self._keeper is not None

    async def end_run(self, status: SagaStatus) -> None:
        """Release the run lease: journal RUN_ENDED with the saga's status. Idempotent; a failed
        write is recorded in :attr:`journal_errors` (the lease then simply expires)."""
        await self.release_lease(status)

    async def release_lease(self, status: SagaStatus, closing: dict[str, Any] | None = None, *,
                            after: int | None = None) -> bool:
        """Stop renewing the lease and journal RUN_ENDED; with ``closing`` (the SAGA_CLOSED
        append), both in one batch where the journal batches (``core.journal.append_each``).

        With ``after`` (the last seq compensation read: ``CompensationReport.read_seq``) the
        write is conditional: RUN_ENDED is appended only while nothing but this saga's own
        entries followed ``after`` (``FencedJournal.own_tail``, then ``expected_seq``), so a
        saga is never closed over an entry its compensation did not see (a stalled run's late
        outcome that landed meanwhile).

        Returns:
            Whether ``closing`` was stored here. ``False`` too when this object held no lease
            (nothing written) or the batch raised (RUN_ENDED is then written alone, under the
            same write key and condition, and the caller writes ``closing``). A failed
            RUN_ENDED is recorded in :attr:`journal_errors` (the lease then simply expires).

        Raises:
            JournalConflictError: ``after`` is set and another writer appended after it;
                nothing was written and the lease is still held (renewed again): compensate
                again, then release.
        """
        keeper, self._keeper = self._keeper, None
        if keeper is None:
            return False
        await keeper.stop()
        if self.core.lease_lost is not None:
            return False  # another run holds the saga: nothing of ours to release or close
        ended: dict[str, Any] = {
            "phase": Phase.RUN_ENDED, "write_key": f"run-end:{self.holder}:{uuid.uuid4().hex[:8]}",
            "payload": {"holder": self.holder, "status": status.value},
        }
        conditional = after is not None
        try:
            if after is not None:
                ended["expected_seq"] = self._own_tail(after)
            if closing is not None:
                try:
                    await append_each(self.core.journal, self.core.saga_id, [ended, closing])
                    return True
                except LeaseLostError:
                    return False  # taken over meanwhile: lease_lost is set, the caller closes nothing
                except JournalError as exc:
                    if conditional and isinstance(exc, JournalConflictError):
                        raise
                    # one by one: RUN_ENDED here, SAGA_CLOSED by the caller
            await self.core.journal.append(self.core.saga_id, **ended)
        except LeaseLostError:
            pass  # taken over meanwhile: lease_lost is set, the caller writes nothing more
        except JournalError as exc:
            if conditional and isinstance(exc, JournalConflictError):
                self._keeper = keeper  # still ours: renewed while the caller compensates again
                keeper.start()
                raise
            self.core.journal_errors.append(f"RUN_ENDED not journaled: {_describe(exc)}")
        return False

    def _own_tail(self, after: int) -> int:
        """The tail a conditional release expects (``FencedJournal.own_tail``).

        Raises:
            JournalConflictError: another writer appended after ``after``.
        """
        tail = self.core.journal.own_tail(after)
        if tail is None:
            raise JournalConflictError(
                f"saga {self.core.saga_id}: another writer appended after seq {after}, which "
                "compensation read (a stalled run's late outcome?): not closed on that read")
        return tail
