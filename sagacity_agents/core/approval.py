"""Approval requests, the store contract, and waiting for a decision: the working state of human
approvals.

An irreversible tool call pauses for a human decision bound to its exact arguments (design.md,
"Approvals"). The store keeps, per request, the canonical validated arguments and their SHA-256,
the decision while it is pending, and whether a resume has *consumed* it; it also keeps the run
snapshot of a paused saga so that any process can resume it.

The store is working state, not evidence (the journal is; see the architecture notes, "Two storage
shapes"): nothing in it is hash-chained, and a resume never trusts a decision found here without
the matching APPROVED entry in the journal. What the store does guarantee is :meth:`consume`:
all-or-nothing and atomic, even across processes sharing one database, so that two concurrent
resumes of the same request execute the tool at most once.

The stores live in the backend folders, beside the journals: ``backends/memory/approvals.py``
(:class:`InMemoryApprovalStore`, one process), ``backends/sqlite/approvals.py``
(:class:`SqliteApprovalStore`, one file, several processes; may be the journal's file) and
``backends/postgres/approvals.py`` (:class:`PostgresApprovalStore`, many hosts; LISTEN/NOTIFY
hints). They share the rules below (:func:`check_decision`, :func:`apply_decision`,
:func:`consume_refusal`) and tell waiters in this process about a decision at once
(:class:`DecisionNotifier`); :func:`wait_for_decision` also polls, which is how a decision made by
another process is seen where no notification reaches it.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import datetime as dt
import hmac
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from ..errors import ApprovalError
from .canonical import canonical_bytes, format_timestamp, sha256_hex, to_canonical_value

__all__ = [
    "APPROVED",
    "ARGS_VERSION",
    "DEFAULT_APPROVAL_TTL",
    "REJECTED",
    "ApprovalRequest",
    "ApprovalStore",
    "Decision",
    "DecisionNotifier",
    "args_hash",
    "wait_for_decision",
]

Decision = Literal["approved", "rejected"]
"""A human decision on a request."""

APPROVED: Decision = "approved"
"""The request was approved: the call may run once, with exactly the hashed arguments."""

REJECTED: Decision = "rejected"
"""The request was rejected: the call does not run."""

_DECISIONS = frozenset({APPROVED, REJECTED})

DEFAULT_APPROVAL_TTL = dt.timedelta(hours=24)
"""Default lifetime of a request (design.md: 24 h; configurable, ``None`` disables expiry)."""

_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

ARGS_VERSION = 2
"""The argument-hash version of new requests: SHA-256 of the RFC 8785 bytes of the committed
arguments (:class:`ApprovalRequest`'s ``args_version``)."""


def args_hash(args: Any) -> str:
    """Return the SHA-256 hex of the canonical bytes of ``args``.

    Args:
        args: the arguments, in any form the canonical rules accept (``core.canonical``).

    Returns:
        64 lowercase hex characters.

    Raises:
        EncodingError: ``args`` has no canonical encoding.
    """
    return sha256_hex(canonical_bytes(args))


def _parse_timestamp(text: str) -> dt.datetime:
    """Parse the fixed-width UTC text written by :func:`format_timestamp`.

    Raises:
        ValueError: ``text`` is not in that form.
    """
    return dt.datetime.strptime(text, _TIMESTAMP_FORMAT).replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One request for a human decision on one tool call, as stored.

    Instances are immutable; a store returns a new instance for every change. Build a fresh request
    with :meth:`build`, which canonicalizes the arguments and computes their hash.
    """

    request_id: str
    """Unique id of the request (a UUID by default)."""
    saga_id: str
    """The saga whose run paused for this request."""
    call_id: str | None
    """The model's tool call id, when the framework gives one."""
    tool: str
    """Name of the tool waiting for the decision."""
    args: dict[str, Any]
    """The canonical validated arguments (for fallback-wrapped tools: the canonical raw ones)."""
    raw_args: str | None
    """The model's raw argument text, kept only where it differs from ``args`` or is needed."""
    args_hash: str
    """SHA-256 hex of the canonical bytes of ``args``: what a decision is bound to."""
    created_at: str
    """When the request was made: fixed-width UTC text (``core.canonical.format_timestamp``)."""
    expires_at: str | None
    """When the request stops being valid, same format; ``None``: never."""
    decision: Decision | None = None
    """``"approved"``, ``"rejected"`` or ``None`` while pending. Working state only: the journal's
    APPROVED / REJECTED entry is the evidence a resume checks."""
    approver: str | None = None
    """Who decided (free text chosen by the application)."""
    reason: str | None = None
    """Why, as given by the approver."""
    decided_at: str | None = None
    """When the decision was recorded, same format as ``created_at``."""
    consumed_at: str | None = None
    """When a resume consumed the request; a consumed request can be neither decided nor consumed
    again."""
    args_version: int = 1
    """How ``args_hash`` covers the arguments. 1 (requests made before sensitive values were
    committed, and :meth:`build`): the clear arguments. 2 (:data:`ARGS_VERSION`, every request
    the approval desk makes now): the *committed* arguments (``core.approval_args``), so that
    ``args`` holds commitments and masks, never a card number, and the binding still holds."""
    args_sealed: str | None = None
    """Version 2 with a master key: the clear arguments (``{"args": .., "raw_args": ..}`` as
    JSON) sealed under the saga's data key (``SagaSecrets.seal_text("approval-args", ..)``), so
    that an approver whose process holds the key sees them; ``None``: not stored (no master key,
    or nothing sensitive to show)."""

    def __post_init__(self) -> None:
        if self.decision is not None and self.decision not in _DECISIONS:
            raise ValueError(
                f"decision must be 'approved', 'rejected' or None, not {self.decision!r}"
            )

    @classmethod
    def build(
        cls,
        *,
        saga_id: str,
        tool: str,
        args: Any,
        created_at: dt.datetime,
        call_id: str | None = None,
        raw_args: str | None = None,
        ttl: dt.timedelta | None = DEFAULT_APPROVAL_TTL,
        request_id: str | None = None,
    ) -> ApprovalRequest:
        """Make a new pending request.

        Args:
            saga_id: the saga the run belongs to.
            tool: the tool's name.
            args: the validated arguments; converted by the canonical rules, and must then be a
                JSON object.
            created_at: an aware datetime, the time of the request.
            call_id: the model's call id, if any.
            raw_args: the model's raw argument text, where it is needed.
            ttl: time until the request expires; ``None``: it never does.
            request_id: an explicit id; a random UUID by default.

        Returns:
            A pending, unconsumed request.

        Raises:
            EncodingError: ``args`` has no canonical encoding, or ``created_at`` is naive.
            ValueError: an empty saga id or tool name, or arguments that are not an object.
        """
        if not saga_id or not tool:
            raise ValueError("saga_id and tool must be non-empty strings")
        canonical = to_canonical_value(args)
        if not isinstance(canonical, dict):
            kind = type(canonical).__name__
            raise ValueError(f"tool arguments must be a JSON object, not {kind}")
        return cls(
            request_id=request_id or str(uuid.uuid4()),
            saga_id=saga_id,
            call_id=call_id,
            tool=tool,
            args=canonical,
            raw_args=raw_args,
            args_hash=args_hash(canonical),
            created_at=format_timestamp(created_at),
            expires_at=None if ttl is None else format_timestamp(created_at + ttl),
        )

    @property
    def pending(self) -> bool:
        """``True`` when the request is neither decided nor consumed."""
        return self.decision is None and self.consumed_at is None

    def expired(self, now: dt.datetime) -> bool:
        """Return whether the request has expired at ``now``.

        Args:
            now: an aware datetime.

        Returns:
            ``True`` when ``expires_at`` is set and ``now`` is at or past it.

        Raises:
            EncodingError: ``now`` is naive.
        """
        if self.expires_at is None:
            return False
        format_timestamp(now)  # refuses a naive datetime, like everywhere else
        return now >= _parse_timestamp(self.expires_at)

    def matches(self, args: Any) -> bool:
        """Return whether ``args`` hash to this request's ``args_hash`` (constant-time compare).

        Raises:
            EncodingError: ``args`` has no canonical encoding.
        """
        return hmac.compare_digest(args_hash(args), self.args_hash)

    def to_dict(self) -> dict[str, Any]:
        """Return every field as plain JSON types (``args`` is already canonical)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApprovalRequest:
        """Rebuild a request from :meth:`to_dict` output.

        Raises:
            TypeError: a field is missing or unknown.
            ValueError: the decision is not one of the allowed values.
        """
        return cls(**data)


# --- in-process notification ---------------------------------------------------------------


class DecisionNotifier:
    """Per-request-id waiters, woken when a decision is recorded in this process.

    Each waiter is an ``asyncio.Event`` tied to the loop it was created on; :meth:`notify` may run
    on any thread (SQLite stores decide on their I/O thread) and sets each event through
    ``loop.call_soon_threadsafe``. A notification is a hint: the waiter always re-reads the store.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def subscribe(self, request_id: str) -> asyncio.Event:
        """Register a waiter for ``request_id`` on the running loop and return its event.

        Raises:
            RuntimeError: no event loop is running.
        """
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            self._waiters.setdefault(request_id, set()).add((loop, event))
        return event

    def unsubscribe(self, request_id: str, event: asyncio.Event) -> None:
        """Remove a waiter registered by :meth:`subscribe`. Unknown waiters are ignored."""
        with self._lock:
            waiters = self._waiters.get(request_id)
            if waiters is None:
                return
            for item in [w for w in waiters if w[1] is event]:
                waiters.discard(item)
            if not waiters:
                del self._waiters[request_id]

    def notify(self, request_id: str) -> None:
        """Wake every waiter of ``request_id``. Thread-safe; waiters on closed loops are skipped."""
        with self._lock:
            waiters = list(self._waiters.get(request_id, ()))
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop is closed: nobody is waiting there any more
                pass

    def notify_all(self) -> None:
        """Wake every waiter (decisions may have been missed: each re-reads its request)."""
        with self._lock:
            ids = builtins.list(self._waiters)
        for request_id in ids:
            self.notify(request_id)

    async def listen(self) -> None:
        """Make sure decisions made by other processes wake waiters from now on, when the store
        can learn of them (PostgreSQL: LISTEN); a no-op here, where only :meth:`notify` wakes.
        :func:`wait_for_decision` calls it after subscribing and before its first read."""


# --- the contract --------------------------------------------------------------------------


@runtime_checkable
class ApprovalStore(Protocol):
    """Where approval requests and paused-run snapshots live between pause and resume.

    A store may also expose ``notifier`` (a :class:`DecisionNotifier`) that its :meth:`decide`
    notifies; :func:`wait_for_decision` uses it when present and polls regardless.
    """

    async def create(self, request: ApprovalRequest) -> None:
        """Store a new request.

        Raises:
            ApprovalError: a request with the same id exists.
            JournalError: storage could not be written.
        """
        ...

    async def get(self, request_id: str) -> ApprovalRequest | None:
        """Return the request, or ``None`` if unknown.

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def list(
        self, saga_id: str | None = None, *, pending_only: bool = False
    ) -> builtins.list[ApprovalRequest]:
        """Return requests, oldest first.

        Args:
            saga_id: only this saga's requests; ``None``: every saga.
            pending_only: only requests neither decided nor consumed.

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        approver: str | None,
        reason: str | None,
        at: dt.datetime,
    ) -> ApprovalRequest:
        """Record a decision (it does not consume the request) and wake in-process waiters.

        Deciding again with the same decision returns the stored request unchanged (first
        approver, reason and time kept). Expiry is not checked here; resume checks it.

        Args:
            request_id: the request.
            decision: ``"approved"`` or ``"rejected"``.
            approver: who decides.
            reason: why.
            at: an aware datetime, the time of the decision.

        Returns:
            The request as stored after the call.

        Raises:
            ApprovalError: unknown request, already consumed, or already decided differently.
            ValueError: ``decision`` is not an allowed value.
            EncodingError: ``at`` is naive.
            JournalError: storage could not be read or written.
        """
        ...

    async def consume(self, request_ids: builtins.list[str], at: dt.datetime) -> None:
        """Mark every request consumed, atomically and all-or-nothing.

        Either every id exists, none is consumed yet, and all become consumed at ``at``; or
        nothing changes and :class:`ApprovalError` names the offending ids. Two concurrent
        consumers of one id (tasks, threads or processes on one SQLite file): exactly one wins.
        Duplicate ids in the list count once; an empty list does nothing.

        Raises:
            ApprovalError: an id is unknown or already consumed.
            EncodingError: ``at`` is naive.
            JournalError: storage could not be read or written.
        """
        ...

    async def save_snapshot(self, saga_id: str, snapshot: str) -> None:
        """Store (or replace) the serialized run state of a paused saga.

        Raises:
            JournalError: storage could not be written.
        """
        ...

    async def load_snapshot(self, saga_id: str) -> str | None:
        """Return the saga's stored snapshot, or ``None``.

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def delete_snapshot(self, saga_id: str) -> None:
        """Remove the saga's snapshot; nothing happens if there is none.

        Raises:
            JournalError: storage could not be written.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...


# --- shared rules --------------------------------------------------------------------------


def check_decision(decision: str) -> None:
    """Check that ``decision`` is ``"approved"`` or ``"rejected"`` (every store, before storing).

    Raises:
        ValueError: anything else.
    """
    if decision not in _DECISIONS:
        raise ValueError(f"decision must be 'approved' or 'rejected', not {decision!r}")


def apply_decision(
    current: ApprovalRequest | None,
    request_id: str,
    decision: Decision,
    approver: str | None,
    reason: str | None,
    decided_at: str,
) -> tuple[ApprovalRequest, bool]:
    """Return the request after the decision and whether it changed.

    Raises:
        ApprovalError: unknown, consumed, or decided differently.
    """
    if current is None:
        raise ApprovalError(f"approval request {request_id!r} is unknown")
    if current.consumed_at is not None:
        raise ApprovalError(
            f"approval request {request_id!r} was consumed at {current.consumed_at}; "
            "it cannot be decided any more"
        )
    if current.decision is not None:
        if current.decision != decision:
            raise ApprovalError(
                f"approval request {request_id!r} is already {current.decision} "
                f"(by {current.approver!r} at {current.decided_at}); cannot make it {decision}"
            )
        return current, False
    updated = dataclasses.replace(
        current, decision=decision, approver=approver, reason=reason, decided_at=decided_at
    )
    return updated, True


def consume_refusal(unknown: Iterable[str], consumed: Iterable[str]) -> ApprovalError:
    """The error every store raises when a consume names request ids it does not hold
    (``unknown``) or already consumed ones (``consumed``): nothing is consumed then."""
    parts = []
    unknown, consumed = sorted(unknown), sorted(consumed)
    if unknown:
        parts.append(f"unknown: {', '.join(repr(i) for i in unknown)}")
    if consumed:
        parts.append(f"already consumed: {', '.join(repr(i) for i in consumed)}")
    return ApprovalError(f"cannot consume approval requests ({'; '.join(parts)}); nothing consumed")


def unique_ids(ids: Iterable[str]) -> builtins.list[str]:
    """``ids`` without repeats, in first-seen order (a consume may name a request twice)."""
    return builtins.list(dict.fromkeys(ids))


# --- waiting -------------------------------------------------------------------------------


async def wait_for_decision(
    store: ApprovalStore,
    request_id: str,
    *,
    timeout: float,
    poll_interval: float = 0.05,
    max_interval: float = 1.0,
    backoff: float = 2.0,
) -> ApprovalRequest:
    """Wait until ``request_id`` has a decision and return the request.

    Two ways to learn of the decision, used together:

    * **In this process**: when ``store`` has a ``notifier`` (:class:`DecisionNotifier`; both
      built-in stores do), a :meth:`~ApprovalStore.decide` on that same store object wakes this
      coroutine at once, from any task or thread.
    * **From another process** (or another store object on the same file): the store is polled.
      The first poll waits ``poll_interval`` seconds (default 0.05); each following wait is
      multiplied by ``backoff`` (default 2.0) and capped at ``max_interval`` (default 1.0): with
      the defaults 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, ... seconds. A decision made elsewhere is
      thus seen within ``max_interval`` seconds once the backoff has reached it.
    * **PostgreSQL**: the store's one LISTEN connection per process wakes the waiter when any
      process decides (NOTIFY, payload = the request id). LISTEN is active before the first read,
      and a reconnect wakes every waiter to re-read; polling goes on regardless, so a lost
      notification only delays.

    A notification is only a hint: the store is always re-read before returning.

    Args:
        store: the approval store.
        request_id: the request to wait for.
        timeout: seconds to wait at most.
        poll_interval: first polling interval, in seconds (> 0).
        max_interval: largest polling interval, in seconds (>= ``poll_interval``).
        backoff: factor applied to the interval after each poll (>= 1).

    Returns:
        The request, with ``decision`` set.

    Raises:
        TimeoutError: (``asyncio.TimeoutError`` is the same class) no decision within ``timeout``.
        ApprovalError: the request is unknown, or was consumed without a decision (it can never
            be decided).
        ValueError: invalid interval settings.
        JournalError: the store could not be read.
    """
    if poll_interval <= 0 or max_interval < poll_interval or backoff < 1:
        raise ValueError("need poll_interval > 0, max_interval >= poll_interval and backoff >= 1")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    notifier = getattr(store, "notifier", None)
    event = notifier.subscribe(request_id) if isinstance(notifier, DecisionNotifier) else None
    interval = poll_interval
    try:
        if event is not None and isinstance(notifier, DecisionNotifier):
            await notifier.listen()  # before the first read: a decision after it wakes us
        while (request := await _decided(store, request_id)) is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    f"no decision on approval request {request_id!r} within {timeout} s"
                )
            await _nap(event, min(interval, remaining))
            interval = min(interval * backoff, max_interval)
        return request
    finally:
        if event is not None and isinstance(notifier, DecisionNotifier):
            notifier.unsubscribe(request_id, event)


async def _decided(store: ApprovalStore, request_id: str) -> ApprovalRequest | None:
    """The request read again from the store if it is decided, ``None`` if not yet.

    Raises:
        ApprovalError: the request is unknown, or was consumed without a decision.
    """
    request = await store.get(request_id)
    if request is None:
        raise ApprovalError(f"approval request {request_id!r} is unknown")
    if request.decision is not None:
        return request
    if request.consumed_at is not None:
        raise ApprovalError(
            f"approval request {request_id!r} was consumed without a decision"
        )
    return None


async def _nap(event: asyncio.Event | None, delay: float) -> None:
    """Wait ``delay`` seconds, or less when ``event`` (a decision's notification) is set."""
    if event is None:
        await asyncio.sleep(delay)
        return
    try:
        await asyncio.wait_for(event.wait(), delay)
    except TimeoutError:
        pass
    event.clear()
