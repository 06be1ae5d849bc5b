"""Erasing a saga's sensitive values for good: its data key destroyed (crypto-shredding).

A saga's sensitive values are sealed under its data key (``core.data_keys``), which is stored
only wrapped by the master key. :func:`erase` destroys every wrapped generation of it
(``DataKeyStore.erase_data_keys``: on SQLite under ``secure_delete`` with the ``-wal`` truncated;
on PostgreSQL by the eraser role), so no key, the master key included, opens those values again.
The hashed bytes hold only commitments and masks, so the chain, the tags and the stand-alone
verifier still pass; ``reveal`` raises ``DataErasedError``.

**When** (:func:`erasure_refusal`, the guard). An undo or a human's repair may need the data,
and a holder stalled rather than dead may still write a call's outcome, so an erasure is refused
(``SagaStateError``, ``code`` below) unless forced with a reason:

* ``OPEN``: the saga is not closed (a run holds it, or it was kept open, or it stopped mid-run);
* ``AWAITING_APPROVAL``: its last run paused for a human decision;
* ``IN_DOUBT``: a call or an undo has no outcome, or its last run ended IN_DOUBT or
  COMPENSATION_FAILED (left open for recovery);
* ``REOPENED``: a late outcome landed after its SAGA_CLOSED (recovery undoes it first);
* ``DIRTY``: it closed with effects still in the world that its report names (undo failed, not
  undone, in doubt: ``CompensationReport.clean``); kept irreversible effects do not count;
* ``BEFORE_DEADLINE``: a call (INTENT) or an undo (COMPENSATING) is still before its deadline:
  its ``recorded_at`` + its deadline + one lease period of the run that wrote it
  (``core.resolution.answerable_at``, the rule an answer to an in-doubt call waits for) is not
  yet before ``now``. Its holder could still write a late outcome, whose undo would need the data;
* ``UNVERIFIED``: the saga's chain (and tags, with a keyring) does not verify.

``force=True`` with a non-empty reason overrides every rule; the access log records
``forced: true``.

**Order.** The DATA_ERASED entry goes to the access log first (``core.access_log``: the reserved
saga ``sagacity.access``, tagged by the writer's keyring when the journal is a signing view):
when it cannot be written (a read-only journal) nothing is erased. Then the store erases, then
this process forgets its copy (``DataKeys.forget``). An erasure that finds no wrapped key left
says so (:attr:`Erasure.already`) and writes nothing.

**After.** A late outcome that lands after the erasure is committed and sealed under a fresh
generation (``DataKeys.secrets_for`` makes generation N+1 when the newest is erased;
``core.fence`` reloads the saga's keys from the store before a late append):
:func:`erasure_state` reports it for a human.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, JournalWriteError, SagaStateError
from .access_log import record_access
from .data_keys import DataKeys, DataKeyStore, StoredDataKey
from .entries import JournalEntry, Phase
from .evidence import CHAIN_ONLY, Evidence
from .fence import backend_of
from .journal import Journal, utc_now
from .key_roles import Role
from .ledger import SagaLedger, is_closed, reopened_by
from .resolution import answerable_at

__all__ = ["Erasure", "ErasureState", "erase", "erasure_refusal", "erasure_state"]

_LEFT_OPEN = ("IN_DOUBT", "COMPENSATION_FAILED")
_DIRTY_LISTS = ("failed", "no_undo", "in_doubt")
"""The lists of a SAGA_CLOSED report that leave a saga dirty (``CompensationReport.clean``)."""


@dataclass(frozen=True, slots=True)
class Erasure:
    """What :func:`erase` did."""

    saga_id: str
    """The saga."""
    generations: tuple[int, ...]
    """The key generations erased now (empty: none was left, or none was ever stored)."""
    already: bool
    """Every stored generation was erased before: nothing was done now."""
    stored: bool
    """The journal held a data key for the saga (``False``: its values were never stored,
    e.g. written without ``SAGACITY_DATA_KEY``; only this process's copy was forgotten)."""
    forced: bool
    """The refusal rules were overridden (``force=True``)."""
    entry: JournalEntry | None = None
    """The DATA_ERASED access-log entry written (``None``: nothing was erased)."""


def _stamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    except (TypeError, ValueError):
        return None


def _last_run_status(entries: Sequence[JournalEntry]) -> Any:
    """The status the saga's last run ended with (``None``: a run holds it, or none ran)."""
    for entry in reversed(entries):
        if entry.phase is Phase.RUN_STARTED:
            return None
        if entry.phase is Phase.RUN_ENDED:
            return entry.payload.get("status") if isinstance(entry.payload, dict) else None
    return None


def _open_refusal(saga_id: str, entries: Sequence[JournalEntry], ledger: SagaLedger) -> SagaStateError:
    """Why an open saga may not be erased (``AWAITING_APPROVAL``, ``IN_DOUBT`` or ``OPEN``)."""
    status = _last_run_status(entries)
    if status == "AWAITING_APPROVAL":
        return SagaStateError(f"saga {saga_id} is waiting for an approval: its data may still be "
                              "needed (decide and resume it, or recover it, first)",
                              code="AWAITING_APPROVAL")
    if status in _LEFT_OPEN or ledger.in_doubt() or ledger.undo_in_doubt():
        return SagaStateError(f"saga {saga_id} has calls or undos in doubt (an undo may need its "
                              "data): resolve and recover it first", code="IN_DOUBT")
    return SagaStateError(f"saga {saga_id} is open (a run may still write to it or undo its "
                          "calls with their data): close or recover it first", code="OPEN")


def _deadline_refusal(saga_id: str, entries: Sequence[JournalEntry],
                      now: dt.datetime) -> SagaStateError | None:
    """``BEFORE_DEADLINE`` when a call or an undo of the saga is still before its deadline."""
    for entry in entries:
        kind = "call" if entry.phase is Phase.INTENT else "undo" if entry.phase is Phase.COMPENSATING \
            else None
        if kind is None or _stamp(entry.recorded_at) is None:
            continue
        at, how = answerable_at(entries, entry, kind)
        if now <= at:
            stamp = at.isoformat().replace("+00:00", "Z")
            return SagaStateError(
                f"saga {saga_id}: its {kind} at seq {entry.seq} is before its deadline until "
                f"{stamp} ({how}): a late outcome may still land; erase after that, or force",
                code="BEFORE_DEADLINE")
    return None


def erasure_refusal(saga_id: str, entries: Sequence[JournalEntry],
                    now: dt.datetime) -> SagaStateError | None:
    """Why ``saga_id``'s data may not be erased now (the module notes' rules), or ``None``.

    Args:
        saga_id: the saga (named in the message).
        entries: its verified entries in ``seq`` order.
        now: the eraser's clock (aware UTC).

    Returns:
        A ``SagaStateError`` whose ``code`` is ``OPEN``, ``AWAITING_APPROVAL``, ``IN_DOUBT``,
        ``REOPENED``, ``DIRTY``, ``BEFORE_DEADLINE`` or ``UNKNOWN_SAGA``; ``None``: it may be.
    """
    if not entries:
        return SagaStateError(f"no saga {saga_id} in the journal", code="UNKNOWN_SAGA")
    reopened = reopened_by(entries)
    if reopened is not None:
        return SagaStateError(
            f"saga {saga_id} is REOPENED (a late outcome, seq {reopened[1]}, landed after its "
            f"SAGA_CLOSED at seq {reopened[0]}): recover it first", code="REOPENED")
    ledger = SagaLedger(list(entries))
    if not is_closed(entries):
        return _open_refusal(saga_id, entries, ledger)
    if ledger.in_doubt() or ledger.undo_in_doubt():
        return SagaStateError(f"saga {saga_id} has calls or undos in doubt: resolve them first",
                              code="IN_DOUBT")
    closing = entries[-1].payload
    report = closing.get("report") if isinstance(closing, dict) else None
    dirty = [f"{name} seq {row.get('seq')}" for name in _DIRTY_LISTS
             for row in (report.get(name) or () if isinstance(report, dict) else ())
             if isinstance(row, dict)]
    if dirty:
        return SagaStateError(f"saga {saga_id} closed still dirty ({', '.join(dirty)}): a repair "
                              "may need its data", code="DIRTY")
    return _deadline_refusal(saga_id, entries, now)


async def _verified(journal: Journal, saga_id: str, evidence: Evidence,
                    force: bool) -> list[JournalEntry]:
    verdict, entries = await evidence.checked_entries(journal, saga_id)
    if not verdict.ok and not force:
        raise SagaStateError(f"saga {saga_id} does not verify ({verdict.detail}): its state cannot "
                             "be trusted to allow an erasure; force it with a reason",
                             code="UNVERIFIED")
    return entries


async def erase(
    journal: Journal, data_keys: DataKeys | None, saga_id: str, *, by: str, reason: str,
    force: bool = False, now: dt.datetime | None = None, evidence: Evidence | None = None,
) -> Erasure:
    """Destroy ``saga_id``'s data key: every sensitive value of the saga becomes unrecoverable.

    Args:
        journal: the journal, as this host writes to it (a signing view tags the DATA_ERASED
            entry with the host's key; a backend: untagged); its backend must be a
            ``DataKeyStore``.
        data_keys: this process's data keys (its copy of the saga's keys is forgotten);
            ``None``: none held.
        saga_id: the saga to erase.
        by: who erases (journaled; non-empty).
        reason: why (journaled; non-empty; with ``force``, why the rules are overridden).
        force: erase although :func:`erasure_refusal` refuses (journaled ``forced: true``).
        now: the clock the deadlines are judged at (aware UTC; default: the system clock).
        evidence: how the saga is verified first (default: the chain alone).

    Returns:
        An :class:`Erasure`.

    Raises:
        ValueError: an empty ``by`` or ``reason``.
        TypeError: the journal keeps no data keys (not a ``DataKeyStore``).
        SagaStateError: refused (``code`` as :func:`erasure_refusal`, or ``UNVERIFIED``);
            nothing was written or erased.
        ConfigurationError: under key roles, this host's key is not a checkpoint signer (the
            only role that may tag the access log, ``core.key_roles``); nothing was erased.
        JournalError: the access log could not be written (a read-only journal: nothing was
            erased), or the store failed (the access log then names an erasure to retry).
    """
    if not isinstance(by, str) or not by.strip() or not isinstance(reason, str) or not reason.strip():
        raise ValueError("an erasure names who erases (by) and why (reason)")
    store = backend_of(journal)
    if not isinstance(store, DataKeyStore):
        raise TypeError(f"{store!r} keeps no data keys (core.data_keys.DataKeyStore)")
    entries = await _verified(journal, saga_id, evidence or CHAIN_ONLY, force)
    refusal = erasure_refusal(saga_id, entries, now or utc_now())
    if refusal is not None and not force:
        raise refusal
    rows = await store.data_keys(saga_id)
    live = tuple(row.generation for row in rows if row.wrapped is not None)
    if not live:
        if data_keys is not None:
            data_keys.forget(saga_id)
        return Erasure(saga_id, (), bool(rows), bool(rows), force)
    # Under key roles only a checkpoint signer may tag the access log: an entry another key
    # tagged would not verify, and the erasure could not be shown to have been logged.
    problem = await (evidence or CHAIN_ONLY).role_problem(journal, Role.CHECKPOINT_SIGNER,
                                                          "an access-log entry (DATA_ERASED)")
    if problem is not None:
        raise ConfigurationError(f"cannot sign the erasure's access-log entry here: {problem}; "
                                 "nothing was erased")
    if not await store.may_erase_data_keys():
        raise JournalWriteError(
            "this connection may not erase data keys (PostgreSQL: connect as a role given "
            "`sagacity db grant ROLE --eraser`); nothing was logged or erased")
    entry = await record_access(journal, Phase.DATA_ERASED, {
        "saga_id": saga_id, "by": by, "reason": reason, "forced": bool(force),
        "generations": list(live)})
    await store.erase_data_keys(saga_id, by=by, reason=reason)
    if data_keys is not None:
        data_keys.forget(saga_id)
    return Erasure(saga_id, live, False, True, force, entry)


@dataclass(frozen=True, slots=True)
class ErasureState:
    """Where a saga's data key stands (for ``saga show`` and the erasure report)."""

    erased: tuple[StoredDataKey, ...]
    """The erased generations (tombstones: when, by whom, why)."""
    live: tuple[int, ...]
    """Generations still stored."""

    @property
    def written_after(self) -> tuple[int, ...]:
        """Live generations made after an erasure (a late outcome's values): a human checks
        them (and may erase again)."""
        last = max((row.generation for row in self.erased), default=0)
        return tuple(g for g in self.live if g > last) if self.erased else ()

    def describe(self) -> str | None:
        """One line for a human (``None``: nothing was ever erased)."""
        if not self.erased:
            return None
        first = self.erased[0]
        line = (f"data key erased at {first.erased_at} by {first.erased_by} ({first.reason}): "
                "its sensitive values are gone")
        if self.written_after:
            gens = ", ".join(str(g) for g in self.written_after)
            line += (f"; values written after the erasure under key generation {gens} "
                     "(a late outcome: check it, erase again once the saga is closed)")
        return line


async def erasure_state(journal: Journal, saga_id: str) -> ErasureState | None:
    """``saga_id``'s data-key state, or ``None`` when the journal keeps no data keys.

    Raises:
        JournalError: the store could not be read.
    """
    store = backend_of(journal)
    if not isinstance(store, DataKeyStore):
        return None
    rows = await store.data_keys(saga_id)
    return ErasureState(tuple(r for r in rows if r.wrapped is None),
                        tuple(r.generation for r in rows if r.wrapped is not None))
