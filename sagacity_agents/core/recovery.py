"""Recovery as a service: finish a saga its process left behind, pick the sagas that need it,
answer an in-doubt entry, close a saga kept open. No agent framework here: an adapter hands
:meth:`Recovery.recover` a ``bind`` callable that registers its tools' declarations (the undos)
on the saga, and may give the service a ``scope`` each recovery runs in (its own trace).

Every operation reads the saga's entries once and verifies them once
(``Evidence.checked_entries``); its trace step, the state checks, the run lease
(``Saga.begin_run(verified=...)``) and compensation all work on that verified ledger. A
recovery reads the saga again only where the journal may have changed under it: the lease was
contended, a call is named in doubt at the close, or the close signs a checkpoint (which never
vouches for entries it did not verify itself).

A saga needs recovery (:func:`recovery_reason`, ``sagacity saga recover --all``) when its
process stopped mid-run, i.e. its latest run lease expired without a RUN_ENDED
(``core.lease``), or when its last run ended IN_DOUBT or COMPENSATION_FAILED (it was left open
for recovery and a human's answer), or when its last run ended COMPLETED and only its
SAGA_CLOSED is missing (recovery closes it, undoing nothing), or when it is REOPENED: a late
outcome landed after its SAGA_CLOSED (``core.ledger.reopened_by``; recovery undoes it and closes
the saga again), or when it holds only its SAGA_OPENED, a lease period old
(:func:`never_started`: killed before its first run). Never: a closed saga, a saga a live run
holds, an idle saga kept open between runs (``close=False``: RUN_ENDED OPEN), a saga
waiting for a human decision (RUN_ENDED AWAITING_APPROVAL), or a saga with no run lease at all
(written by hand or by a version without leases: nothing tells a crash from an idle saga).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import JournalError, LeaseLostError, SagacityError, SagaStateError, describe_error
from .approval import ApprovalStore
from .authenticity import ADOPTION_SAGA, signing_view
from .identity import RESERVED_PREFIX
from .chain import VerifyResult
from .checks import check_in_doubt
from .compensation import CompensationItem, CompensationReport
from .data_keys import DataKeys, SagaSecrets
from .entries import JournalEntry, Phase
from .erasure import Erasure, erase
from .evidence import CHAIN_ONLY, Evidence, refusal
from .grants import requests_void
from .journal import Clock, Journal, View, utc_now
from .lease import DEFAULT_LEASE_SECONDS, completed_unclosed, lease_of
from .ledger import is_closed, reopened_by
from .observe import begin, linked_attrs
from .protection import default_data_keys, protected_view
from .resolution import resolve_in_doubt
from .saga import FailurePolicy, Saga, SagaStatus

__all__ = ["Recovered", "Recovery", "SagaRecovered", "recovery_reason"]

_LEFT_FOR_RECOVERY = ("IN_DOUBT", "COMPENSATION_FAILED")


def recovery_reason(entries: Sequence[JournalEntry], now: dt.datetime | None = None) -> str | None:
    """Why the saga needs recovery, or ``None`` when it does not (see the module notes).

    Args:
        entries: the saga's entries in ``seq`` order.
        now: the time to judge the lease at (aware UTC; default: the clock).
    """
    if not entries or is_closed(entries):
        return None
    lease = lease_of(entries)
    reopened = reopened_by(entries)
    if reopened is not None:
        if lease is not None and lease.started_seq > reopened[0] and lease.held(now):
            return None  # a recovery of it is running
        return (f"REOPENED: a late outcome (seq {reopened[1]}) landed after SAGA_CLOSED at seq "
                f"{reopened[0]}: recovery undoes it and closes the saga again")
    if lease is None:
        return never_started(entries, now)
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


def never_started(entries: Sequence[JournalEntry], now: dt.datetime | None = None,
                  grace: float = DEFAULT_LEASE_SECONDS) -> str | None:
    """Why a saga whose only entry is SAGA_OPENED needs recovery: its process stopped between
    opening it (a saga given its id is opened alone, before its first RUN_STARTED) and taking its
    first run lease, ``grace`` seconds or more ago; nothing ran. ``None`` for any other saga, or
    one opened less than ``grace`` ago (its first run may be about to start; if it starts after
    the recovery closed the saga, it is refused: closed is terminal).

    Args:
        entries: the saga's entries in ``seq`` order.
        now: the time to judge at (aware UTC; default: the clock).
        grace: seconds after SAGA_OPENED (default: the default run lease).
    """
    if len(entries) != 1 or entries[0].phase is not Phase.SAGA_OPENED:
        return None
    try:
        opened = dt.datetime.fromisoformat(entries[0].recorded_at)
    except (TypeError, ValueError):
        return None
    now = now or dt.datetime.now(dt.timezone.utc)
    if (now - opened).total_seconds() < grace:
        return None
    return ("opened without a run: its process stopped before RUN_STARTED (nothing ran); "
            "recovery closes it")


class SagaRecovered(SagacityError):
    """Recorded as the reason when a recovery finishes a saga left behind."""


@dataclass(frozen=True, slots=True)
class Recovered:
    """How one recovery ended."""

    saga_id: str
    """The saga recovered."""
    status: SagaStatus
    """COMPENSATED or COMPLETED (closed), IN_DOUBT or COMPENSATION_FAILED (left open for a human
    and a later recovery), or LEASE_LOST (another recovery took the saga over)."""
    report: CompensationReport | None = None
    """What was undone and what is still dirty; ``None`` when nothing was compensated."""
    in_doubt: tuple[CompensationItem, ...] = ()
    """The calls whose outcome is unknown."""
    exception: BaseException | None = None
    """The :class:`~sagacity_agents.errors.LeaseLostError` when the lease was lost."""


Bind = Callable[[Saga], None]
"""Registers the declarations of the tools the saga's calls ran (their undos) on the saga. One
with a ``for_entries(entries) -> Bind`` method is asked first for the binder of each saga, given
its verified entries (an adapter picks the agent of the scope its calls journal)."""

Scope = Callable[[str], "contextlib.AbstractContextManager[Any]"]
"""The context one saga's recovery runs in, by saga id (an adapter's trace, for instance)."""


class Recovery:
    """Recover, select, resolve and close sagas on one journal.

    Args:
        journal: the sagas' journal: a writer's view (``Sagacity.journal``), or a backend, then
            written through ``evidence``'s keyring (``core.authenticity.signing_view``).
        approvals: their approval store (a recovery consumes the requests still pending).
        evidence: how a saga is verified before anything acts on it (default: the chain alone).
        policy: the failure policy of the sagas it opens.
        lease_seconds: the run lease each of its operations takes.
        scope: the context each recovery runs in, by saga id (an adapter's trace, for instance).
        clock: the resolver's clock (aware UTC; default: the system clock): whether a call's
            deadline has passed (:meth:`resolve`).
        data_keys: the application's data keys (``Sagacity.data_keys``); ``None``: the
            process's keys for ``SAGACITY_DATA_KEY`` (``core.protection.default_data_keys``).
    """

    def __init__(
        self, journal: Journal, approvals: ApprovalStore, *, evidence: Evidence | None = None,
        policy: FailurePolicy = FailurePolicy.STOP, lease_seconds: float = DEFAULT_LEASE_SECONDS,
        scope: Scope | None = None, clock: Clock = utc_now, data_keys: DataKeys | None = None,
    ) -> None:
        self.clock = clock
        self.data_keys = data_keys if data_keys is not None else default_data_keys()
        """The application's data keys: every saga this service opens, and every answer it
        journals, commits and seals sensitive values with them (``core.protection``)."""
        self.evidence = evidence or CHAIN_ONLY
        # A bare backend is written through the keyring's signing view (a view: as it signs).
        keyring = self.evidence.keyring
        self.journal = journal if keyring is None or isinstance(journal, View) \
            else signing_view(journal, keyring)
        self.approvals = approvals
        self.policy = policy
        self.lease_seconds = lease_seconds
        self.scope = scope

    def _saga(self, saga_id: str, **options: Any) -> Saga:
        return Saga(self.journal, saga_id, policy=self.policy, evidence=self.evidence,
                    lease_seconds=self.lease_seconds, data_keys=self.data_keys, **options)

    async def secrets(self, saga_id: str, *, create: bool = False) -> SagaSecrets:
        """``saga_id``'s secrets under this service's keys (``DataKeys.for_saga``), to open its
        values (``SagaSecrets.reveal``, ``core.protection.opened``) or protect an append
        (:func:`~.protection.protected_view`).

        Args:
            create: make (and store) a data key when the saga has none usable (a writer);
                default ``False``: a reader.

        Raises:
            DataKeyError: the stored key was wrapped by a master key this process lacks.
            JournalError: the data-key store could not be read.
        """
        return await self.data_keys.for_saga(self.journal, saga_id, create=create)

    async def recover(
        self, saga_id: str, bind: Bind, *, verified: list[JournalEntry] | None = None,
    ) -> Recovered:
        """Finish a saga its process left behind (a crash, a kill), or one left open IN_DOUBT or
        COMPENSATION_FAILED (whose late outcomes may have landed since): compensate from the
        journal.

        Takes the saga's run lease first (a run still holding it refuses the recovery; an expired
        one, whose holder died, is taken over). A saga whose last run ended COMPLETED and whose
        process died before SAGA_CLOSED is closed COMPLETED, nothing undone. Otherwise approvals
        still open are voided (consumed in the store, so no resume can run them later, and
        journaled REQUEST_VOIDED) and the saga is compensated
        from the journal alone: EXECUTED compensatable calls not yet COMPENSATED are undone in
        reverse order (a failed undo is retried with the same idempotency key); an INTENT or
        COMPENSATING with no outcome is reported in doubt, never acted on. The saga is closed
        when that leaves it COMPENSATED; IN_DOUBT and COMPENSATION_FAILED keep it open.

        Args:
            saga_id: the saga to recover (must not be closed).
            bind: registers the declarations holding the undos on the saga.
            verified: the saga's entries, verified just now (``recover --all`` selected it on
                them); ``None``: read and verified here.

        Raises:
            SagaStateError: the saga is unknown or closed, or another run holds its lease.
            EvidenceError: the saga's journal does not verify (first bad seq named); nothing
                was undone or written.
        """
        with self.scope(saga_id) if self.scope is not None else contextlib.nullcontext():
            return await self._recover_step(saga_id, bind, verified)

    async def _recover_step(
        self, saga_id: str, bind: Bind, verified: list[JournalEntry] | None,
    ) -> Recovered:
        """:meth:`recover` as one observed step (``core.observe``), joined to the trace the
        saga's journal last names."""
        verdict, entries = (None, verified) if verified is not None else await self._checked(saga_id)
        step = begin("recover", **{"sagacity.saga.id": saga_id, **linked_attrs(entries)})
        try:
            if verdict is not None and not verdict.ok:
                raise refusal(verdict)
            result = await self._recover(saga_id, bind, entries)
        except BaseException as exc:
            if step is not None:
                step.end(describe_error(exc), **{"sagacity.saga.status": "REFUSED"})
            raise
        if step is not None:
            dirty = result.report.still_dirty if result.report is not None else ()
            bad = result.status not in (SagaStatus.COMPENSATED, SagaStatus.COMPLETED)
            step.end(f"saga {result.status.value}" if bad else None, **{
                "sagacity.saga.status": result.status.value,
                "sagacity.still_dirty.count": len(dirty),
                "sagacity.in_doubt.count": len(result.in_doubt or ()),
            })
        return result

    async def _recover(self, saga_id: str, bind: Bind, entries: list[JournalEntry]) -> Recovered:
        if not entries:
            raise SagaStateError(f"no saga {saga_id} in the journal")
        saga = self._saga(saga_id, in_flight_timeout=0)
        for_entries = getattr(bind, "for_entries", None)
        (for_entries(entries) if callable(for_entries) else bind)(saga)
        await saga.begin_run("recover", recovering=True, verified=entries)  # refused while held
        if completed_unclosed(entries):
            # Its run completed (RUN_ENDED COMPLETED) and only SAGA_CLOSED was lost (killed
            # in between, or the write failed): finish the close; never undo a completed saga.
            status = await saga.finish(error=None, close=True)
            return Recovered(saga_id, status, saga.report, saga.in_doubt)
        await self._void_requests(saga)
        try:
            if await check_in_doubt(saga, entries):
                saga.core.verified = None  # the verdicts just journaled: compensation reads them
        except LeaseLostError:
            pass  # the saga noted it: finish() ends the recovery LEASE_LOST, undoing nothing
        try:
            status = await saga.finish(error=SagaRecovered(f"saga {saga_id} recovered"), close=True)
        except asyncio.CancelledError as exc:
            if saga.lifecycle.stalled_error(exc) is None:
                raise
            status = SagaStatus.LEASE_LOST  # its keeper stopped it for want of progress
        # LEASE_LOST: another recovery took the saga over meanwhile
        return Recovered(saga_id, status, saga.report, saga.in_doubt, saga.lease_lost_error())

    async def _void_requests(self, saga: Saga) -> None:
        """Void the saga's approval requests still open (pending, or decided and never consumed
        by a resume): consumed in the store (no resume can run them later), then each journaled
        REQUEST_VOIDED under the recovery's lease (``core.approval_rule``: nothing runs on a
        voided request). A REQUEST_VOIDED that cannot be written is reported (the saga stays
        open, IN_DOUBT): the store already refuses the request, so nothing can run on it."""
        open_ = [r for r in await self.approvals.list(saga.saga_id) if r.consumed_at is None]
        if not open_:
            return
        await self.approvals.consume([r.request_id for r in open_], dt.datetime.now(dt.timezone.utc))
        for request in open_:
            payload: dict[str, Any] = {"request_id": request.request_id, "reason": "saga recovered"}
            if request.decision is not None:
                payload["decision"] = request.decision
            try:
                await saga.core.journal.append(
                    saga.saga_id, Phase.REQUEST_VOIDED, write_key=f"voided:{request.request_id}",
                    tool=request.tool, call_id=request.call_id, payload=payload)
            except JournalError as exc:
                saga.journal_errors.append(
                    f"REQUEST_VOIDED of {request.request_id} not journaled: {describe_error(exc)}")

    async def needing_recovery(
        self,
    ) -> AsyncGenerator[tuple[str, str, list[JournalEntry] | SagacityError], None]:
        """The sagas that need recovery (:func:`recovery_reason`), oldest first: ``(saga_id, why,
        its verified entries)``, or ``(saga_id, why a human checks it, the refusal)``.

        Sagas are selected from *verified* entries only: one that does not verify is yielded
        with its :class:`~sagacity_agents.errors.EvidenceError` (first bad seq named), never
        skipped on the word of an entry nobody authenticated (a forged SAGA_CLOSED or
        RUN_ENDED); so is one whose rows cannot be read as a saga's. A saga waiting for a human
        decision is not selected (it is resumed, not recovered).

        Raises:
            JournalError: the journal could not be read.
        """
        for saga_id in await self.journal.saga_ids():
            if saga_id == ADOPTION_SAGA or saga_id.startswith(RESERVED_PREFIX):
                continue  # the library's own (keyring markers): no runs; verify reports them
            try:
                verdict, entries = await self._checked(saga_id)
                # killed before its first run: judged against this service's own lease period
                why = (recovery_reason(entries) or never_started(entries, grace=self.lease_seconds)) \
                    if verdict.ok else None
                # a saga waiting for a human decision is resumed, not recovered
                waiting = why is not None and any(
                    r.consumed_at is None for r in await self.approvals.list(saga_id))
            except JournalError:
                raise
            except Exception as exc:  # noqa: BLE001 - one saga's rows must not stop the others
                yield (saga_id, "its entries cannot be read as a saga's: a human checks it",
                       SagacityError(f"saga {saga_id}: {describe_error(exc)}"))
                continue
            if not verdict.ok:
                yield saga_id, "its journal does not verify: a human checks it", refusal(verdict)
            elif why is not None and not waiting:
                yield saga_id, why, entries

    async def recover_all(self, bind: Bind) -> list[tuple[str, str, Recovered | SagacityError]]:
        """Recover every saga that needs it (:meth:`needing_recovery`), each on the entries it
        was selected on. A saga that does not verify, cannot be read, is refused (a run took it
        meanwhile) or whose recovery fails unexpectedly is reported, and the others go on.

        Args:
            bind: as :meth:`recover`.

        Returns:
            ``(saga_id, why it needed recovery, Recovered or the refusal)`` per saga, oldest saga
            first. Anything not COMPENSATED (or COMPLETED) needs a human.

        Raises:
            JournalError: the journal could not be read.
        """
        done: list[tuple[str, str, Recovered | SagacityError]] = []
        async with contextlib.aclosing(self.needing_recovery()) as selected:
            async for saga_id, why, found in selected:
                if isinstance(found, SagacityError):
                    done.append((saga_id, why, found))
                    continue
                try:
                    done.append((saga_id, why, await self.recover(saga_id, bind, verified=found)))
                except SagacityError as exc:
                    done.append((saga_id, why, exc))
                except Exception as exc:  # noqa: BLE001 - reported; the other sagas are recovered
                    done.append((saga_id, why, SagacityError(f"saga {saga_id}: recovery failed: "
                                                             f"{describe_error(exc)}")))
        return done

    async def resolve(
        self, saga_id: str, seq: int, *, ran: bool, resolver: str, reason: str,
        undo_data: Any = None, force: bool = False,
    ) -> JournalEntry:
        """Journal a human's answer to an in-doubt entry (RESOLVED): see
        ``core.resolution.resolve_in_doubt`` for the arguments (``undo_data``: what the call's
        undo gets; ``force``: answer before the holder is known to be gone), the answer's
        effect and the errors; judged at this service's ``clock``. Then :meth:`recover` acts
        on it."""
        verdict, entries = await self._checked(saga_id)
        step = begin("resolve", **{"sagacity.saga.id": saga_id, "sagacity.call.seq": seq,
                                   "sagacity.resolution.ran": ran, **linked_attrs(entries)})
        try:
            # A saga that does not verify is read and refused there, after the argument checks.
            # The answer's undo data is the saga's: committed and sealed like its calls' own.
            journal = protected_view(self.journal, saga_id, await self.secrets(saga_id, create=True))
            entry = await resolve_in_doubt(journal, saga_id, seq, ran=ran, resolver=resolver,
                                           reason=reason, evidence=self.evidence,
                                           verified=entries if verdict.ok else None,
                                           undo_data=undo_data, force=force, now=self.clock())
        except BaseException as exc:
            if step is not None:
                step.end(describe_error(exc))
            raise
        if step is not None:
            step.end(**{"sagacity.resolution.seq": entry.seq})
        return entry

    async def close(self, saga_id: str) -> SagaStatus:
        """Close a saga kept open with ``close=False``: COMPLETED unless calls are in doubt
        (then it stays open, IN_DOUBT, for :meth:`recover`).

        Raises:
            SagaStateError: the saga is already closed, failed, waiting for approval, or held
                by another run's lease.
            EvidenceError: the saga's journal does not verify; it was not closed.
        """
        verdict, entries = await self._checked(saga_id)
        await self.refuse_if_waiting(saga_id, "close it", entries)
        if not verdict.ok:
            raise refusal(verdict)
        saga = self._saga(saga_id)
        await saga.begin_run("close", verified=entries)  # refused while another run holds it
        return await saga.finish(error=None, close=True)

    async def erase(self, saga_id: str, *, by: str, reason: str, force: bool = False) -> Erasure:
        """Destroy ``saga_id``'s data key (its sensitive values become unrecoverable; the chain
        and tags still verify), judged at this service's clock and verified with its evidence;
        the DATA_ERASED access-log entry is written through its journal (tagged by its keyring)
        and this service's copy of the keys is forgotten: ``core.erasure.erase`` for the
        arguments, the refusal rules and the errors."""
        return await erase(self.journal, self.data_keys, saga_id, by=by, reason=reason,
                           force=force, now=self.clock(), evidence=self.evidence)

    async def refuse_if_waiting(
        self, saga_id: str, what: str, entries: Sequence[JournalEntry] | None = None,
    ) -> None:
        """Refuse to ``what`` on a saga waiting for approval (a request still pending and
        usable); ``entries``: the saga's entries when the caller has them.

        Raises:
            SagaStateError: it waits; the message names the requests.
        """
        pending = [r.request_id for r in await self.approvals.list(saga_id) if r.consumed_at is None]
        if not pending:
            return
        if requests_void(entries if entries is not None else await self.journal.entries(saga_id)) is None:
            raise SagaStateError(
                f"saga {saga_id} is waiting for approval ({', '.join(pending)}): decide and "
                f"resume it, or recover it, rather than {what}"
            )

    async def _checked(self, saga_id: str) -> tuple[VerifyResult, list[JournalEntry]]:
        return await self.evidence.checked_entries(self.journal, saga_id)
