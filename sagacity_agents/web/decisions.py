"""Deciding from the inbox, and telling the application when a saga can be resumed.

A decision goes through :meth:`Sagacity.approve` / :meth:`Sagacity.reject`, the code
``sagacity approvals approve|reject`` runs (``sdk/approvals.py``, ``ApprovalDesk.decide``): the
same checks and the same journal entries. What this module adds is the web's part: the hash the
approver was shown must be the stored one, the approver is the authenticated identity, and a
refusal is turned into a stable error code (:class:`Refused`):

====================  ======  ============================================================
code                  status  when
====================  ======  ============================================================
``not_found``         404     no such request (or saga)
``reason_required``   422     a rejection without a reason
``hash_mismatch``     409     the hash posted is not the request's: the page shown is stale
``already_decided``   409     decided by another identity, or differently (names who, what)
``saga_closed``       409     the saga is closed: nothing can run on a decision any more
``request_consumed``  409     a resume (or a recovery) already used the request
``request_expired``   410     the request's expiry has passed
``saga_not_verified`` 409     the saga's journal does not verify (``EvidenceError``)
``signing_key_required`` 409  the journal's entries are signed (a keyring was adopted) and
                              this process has no signing key: its decision would not verify
``decision_refused``  409     any other refusal of the desk (store edited, no signing key...)
====================  ======  ============================================================

A reason longer than :data:`MAX_REASON` characters is ``invalid_request`` (422).

:class:`DecisionWatcher` calls ``on_decided(saga_id, requests)`` in the background once every
unconsumed request of a saga is decided: at once for decisions made through this app, and by
polling the store every ``poll_interval`` seconds for decisions made elsewhere (the CLI, another
replica). Each process calls back at most once per set of requests; with several replicas the
callback may run in each, and the resume it starts stays exactly-once (run lease, CONSUMED claim).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.approval import ApprovalRequest, ApprovalStore
from ..core.authenticity import ADOPTION_SAGA
from ..core.entries import Phase
from ..errors import ApprovalError, EvidenceError

__all__ = ["MAX_REASON", "DecisionWatcher", "OnDecided", "Refused", "decide", "signing_problem"]

MAX_REASON = 2000
"""Longest reason accepted (characters), from the API and the form alike."""

log = logging.getLogger("sagacity_agents.web")

OnDecided = Callable[[str, list[ApprovalRequest]], "Awaitable[None] | None"]
"""``on_decided(saga_id, requests)``: every unconsumed request of the saga is decided."""


class Refused(Exception):
    """A request the API answers with an error: HTTP ``status`` and a stable ``code``.

    Args:
        status: the HTTP status.
        code: the stable error code (see the module's table).
        message: for people.
        details: extra JSON fields (``approver``, ``decision``...).
    """

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def _settled(stored: ApprovalRequest, identity: str, wanted: str, changed: bool) -> tuple[ApprovalRequest, bool]:
    """``(stored, changed)`` when ``identity`` made ``wanted`` (a double submit is not an error).

    Raises:
        Refused: ``already_decided``, naming the first approver and decision.
    """
    if stored.decision == wanted and stored.approver == identity:
        return stored, changed
    raise Refused(409, "already_decided",
                  f"request {stored.request_id} was already {stored.decision} by "
                  f"{stored.approver} at {stored.decided_at}",
                  approver=stored.approver, decision=stored.decision, decided_at=stored.decided_at)


async def decide(sagacity: Any, request_id: str, *, approve: bool, identity: str,
                 shown_hash: str, reason: str | None) -> tuple[ApprovalRequest, bool]:
    """Decide ``request_id`` as ``identity`` through ``sagacity.approve`` / ``reject``.

    Args:
        sagacity: the app's :class:`~sagacity_agents.Sagacity`.
        request_id: the request.
        approve: approve (else reject).
        identity: the authenticated caller: the approver journaled.
        shown_hash: the SHA-256 the approver was shown.
        reason: why (required to reject).

    Returns:
        The request as stored after the decision, and whether this call made it (``False``: the
        same identity's same decision was already recorded, a double submit).

    Raises:
        Refused: with the code of the module's table.
    """
    reason = (reason or "").strip() or None
    if reason is not None and len(reason) > MAX_REASON:
        raise Refused(422, "invalid_request", f"reason: at most {MAX_REASON} characters")
    if not approve and reason is None:
        raise Refused(422, "reason_required", "a rejection needs a reason (the model is told it)")
    request = await sagacity.approvals.get(request_id)
    if request is None:
        raise Refused(404, "not_found", f"no approval request {request_id!r}")
    if not hmac.compare_digest(str(shown_hash), request.args_hash):
        raise Refused(409, "hash_mismatch",
                      "the arguments' hash you were shown is not this request's: reload the "
                      "request and decide on what it shows now", args_hash=request.args_hash)
    wanted = "approved" if approve else "rejected"
    if request.decision is not None and (request.consumed_at is None or (
            request.decision == wanted and request.approver == identity)):
        # Decided (and perhaps already used by the resume on_decided started): the same
        # identity's same decision is a double submit, answered with the stored decision.
        return _settled(request, identity, wanted, False)
    problem = await signing_problem(sagacity, request.saga_id)
    if problem is not None:
        raise Refused(409, "signing_key_required", problem)
    try:
        if approve:
            decided = await sagacity.approve(request_id, approver=identity, reason=reason)
        else:
            decided = await sagacity.reject(request_id, approver=identity, reason=reason or "")
    except EvidenceError as exc:
        raise Refused(409, "saga_not_verified", str(exc)) from exc
    except ApprovalError as exc:
        outcome = await _classify(sagacity, request, identity, wanted, exc)
        if isinstance(outcome, Refused):
            raise outcome from exc
        return outcome, False  # a double submit that lost the race to its twin
    return _settled(decided, identity, wanted, decided.decided_at != request.decided_at)


async def signing_problem(sagacity: Any, saga_id: str) -> str | None:
    """Why this process must not decide in ``saga_id``'s journal (``None``: it may).

    A process without a signing key (no keyring, or none allowed to sign decisions) would
    write an untagged, unsigned APPROVED; in a journal that adopted a keyring (a
    KEYRING_ADOPTED entry in the reserved ``sagacity.keyring`` saga) or whose saga holds
    tagged entries, ``verify`` and every resume would then call that saga BROKEN. With a
    keyring configured the desk's own check applies (``decision_refused``). Cost without a
    keyring: the reserved saga's and the saga's entries read once per decision.
    """
    if sagacity.evidence.keyring is not None:
        return None  # the desk itself refuses a keyring without an allowed signing key
    signed = bool(await sagacity.journal.entries(ADOPTION_SAGA)) or any(
        e.tag is not None for e in await sagacity.journal.entries(saga_id))
    if not signed:
        return None
    return (f"this journal's entries are signed (a keyring was adopted) and this server has no "
            f"keyring: a decision made here would make saga {saga_id} fail verification. Start "
            "it with the keyring (--keyring / $SAGACITY_KEYRING) holding a decision key")


async def _classify(sagacity: Any, before: ApprovalRequest, identity: str, wanted: str,
                    exc: ApprovalError) -> Refused | ApprovalRequest:
    """The :class:`Refused` for the desk's refusal ``exc``, from the state after it (a
    double submit that lost a race to its twin comes back as a success instead)."""
    entries = await sagacity.journal.entries(before.saga_id)
    if any(e.phase is Phase.SAGA_CLOSED for e in entries):
        return Refused(409, "saga_closed", f"saga {before.saga_id} is closed: {exc}")
    now = await sagacity.approvals.get(before.request_id)
    if now is None:
        return Refused(404, "not_found", f"no approval request {before.request_id!r}")
    if now.consumed_at is not None:
        return Refused(409, "request_consumed", f"request {now.request_id} was already used "
                       f"by a resume or a recovery at {now.consumed_at}")
    if now.decision is not None:
        try:
            _settled(now, identity, wanted, False)
        except Refused as refused:
            return refused
        return now
    if now.expired(dt.datetime.now(dt.UTC)):
        return Refused(410, "request_expired", f"request {now.request_id} expired at {now.expires_at}",
                       expires_at=now.expires_at)
    # The other approver's decision may be journaled and not yet in the store.
    for e in entries:
        if e.phase in (Phase.APPROVED, Phase.REJECTED) and isinstance(e.payload, dict) \
                and e.payload.get("request_id") == now.request_id:
            decision = "approved" if e.phase is Phase.APPROVED else "rejected"
            return Refused(409, "already_decided", f"request {now.request_id} was already "
                           f"{decision} by {e.payload.get('approver')} at {e.recorded_at}",
                           approver=e.payload.get("approver"), decision=decision,
                           decided_at=e.recorded_at)
    return Refused(409, "decision_refused", str(exc))


class DecisionWatcher:
    """Calls ``on_decided`` when every unconsumed request of a saga is decided.

    Args:
        store: the approval store.
        on_decided: the callback (sync or async); ``None``: the watcher does nothing.
        poll_interval: seconds between two reads of the store (decisions made elsewhere);
            ``None``: no polling, only decisions made through this app are seen.
    """

    def __init__(self, store: ApprovalStore, on_decided: OnDecided | None,
                 poll_interval: float | None = 2.0) -> None:
        self.store = store
        self.on_decided = on_decided
        self.poll_interval = poll_interval
        self._announced: set[tuple[str, frozenset[str]]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start polling on the running loop, once (called on every request; cheap)."""
        if self.on_decided is None or self.poll_interval is None:
            return
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def saga_decided(self, saga_id: str) -> None:
        """Check ``saga_id`` after a decision made here; call back when it is ready."""
        if self.on_decided is not None:
            self._announce(saga_id, await self.store.list(saga_id))

    def _announce(self, saga_id: str, requests: list[ApprovalRequest]) -> None:
        open_ = [r for r in requests if r.consumed_at is None]
        if not open_ or any(r.decision is None for r in open_):
            return
        key = (saga_id, frozenset(r.request_id for r in open_))
        if key in self._announced:
            return
        self._announced.add(key)
        task = asyncio.get_running_loop().create_task(self._call(saga_id, open_))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, saga_id: str, requests: list[ApprovalRequest]) -> None:
        assert self.on_decided is not None
        try:
            result = self.on_decided(saga_id, requests)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_decided(%r) raised", saga_id)

    async def _poll(self) -> None:
        assert self.poll_interval is not None
        while True:
            try:
                await self.poll_once()
            except Exception:
                log.exception("polling the approval store failed")
            await asyncio.sleep(self.poll_interval)

    async def poll_once(self) -> None:
        """Read every request once and call back for each saga that is ready. Cost: one read
        of the whole approval store."""
        by_saga: dict[str, list[ApprovalRequest]] = {}
        for r in await self.store.list(None):
            by_saga.setdefault(r.saga_id, []).append(r)
        for saga_id, requests in by_saga.items():
            self._announce(saga_id, requests)

    async def aclose(self) -> None:
        """Stop polling and wait for the callbacks running now."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
