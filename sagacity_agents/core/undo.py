"""What an undo receives and how it runs: the :class:`CompensationContext` of the call it takes
back, the idempotency key that stays the same on every retry of that undo (in this process or
another), and :func:`run_undo`, which runs it under its timeout.

Below both the declarations (an undo is declared to take a context) and the compensation walk
(which builds one from the journal and journals what :func:`run_undo` reports).

Bounded undos (design: docs/architecture.md, "Undo timeouts"): an async undo runs as a task of
its own, a sync one in a daemon thread of its own (never the loop's default executor, whose
shutdown would wait for a hung undo). The walk waits for it at most its timeout, or until it is
told to stop (:class:`StopSignal`); then it stops waiting: an async undo is cancelled, a sync
one cannot be and runs on. Either may have acted, so the caller journals it in doubt; when it
does end after all (a sync undo returns, an async one ignored its cancellation), ``on_late_end``
is called on the event loop with its outcome, so that the end is journaled too.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import JournalClosedError, JournalWriteError, describe_error
from .canonical import ENCODING_ERROR_KEY, sha256_hex
from .entries import JournalEntry, Phase
from .journal import Journal

__all__ = [
    "CompensationContext", "StopSignal", "UndoRun", "call_idempotency_key", "idempotency_key", "late_end_writer",
    "late_undo_ends", "lost_undo_data", "mark_in_doubt", "missing_undo_needs", "run_undo",
]

_log = logging.getLogger("sagacity_agents.compensation")


def _bound(text: str, journal_id: str | None, opened_hash: str | None) -> str:
    """``text``, followed by the journal id and SAGA_OPENED hash under derivation 2."""
    if journal_id is None and opened_hash is None:
        return text  # derivation 1: a saga opened before journal ids
    if not journal_id or not opened_hash:
        raise ValueError("derivation 2 needs both journal_id and opened_hash")
    return f"{text}\x00{journal_id}\x00{opened_hash}"


def idempotency_key(saga_id: str, seq: int, *, journal_id: str | None = None,
                    opened_hash: str | None = None) -> str:
    """The idempotency key of the undo of entry ``seq`` of ``saga_id``.

    Stable across retries and processes: ``"sgc-"`` + the first 32 hex digits of SHA-256 of
    ``saga_id`` NUL ``seq`` and, under derivation 2 (``core.identity``: sagas whose SAGA_OPENED
    records ``"derivation": 2``), NUL ``journal_id`` NUL ``opened_hash``. Pass it to the remote
    API's idempotency header. A saga's own rule: ``core.identity.Derivation.undo_key``.

    Args:
        saga_id: the saga.
        seq: the EXECUTED entry undone.
        journal_id: the journal's id (derivation 2; with ``opened_hash``).
        opened_hash: the hash of the saga's SAGA_OPENED (derivation 2).

    Raises:
        ValueError: only one of ``journal_id`` and ``opened_hash``.
    """
    return "sgc-" + sha256_hex(_bound(f"{saga_id}\x00{seq}", journal_id, opened_hash).encode())[:32]


def call_idempotency_key(saga_id: str, intent_seq: int, *, journal_id: str | None = None,
                         opened_hash: str | None = None) -> str:
    """The idempotency key of the call whose INTENT is entry ``intent_seq`` of ``saga_id`` (the
    forward call, not its undo).

    ``"sgc-call-"`` + the first 32 hex digits of SHA-256 of ``saga_id`` NUL ``"call"`` NUL
    ``intent_seq`` and, under derivation 2, NUL ``journal_id`` NUL ``opened_hash`` (as
    :func:`idempotency_key`): the same in every process that reads the journal, different in
    another journal or for a saga re-created after a restore, and never equal to an undo's key.
    Sent to MCP servers in ``_meta``; a decorated tool's body reads its own with
    ``current_idempotency_key()``.

    Raises:
        ValueError: only one of ``journal_id`` and ``opened_hash``.
    """
    text = _bound(f"{saga_id}\x00call\x00{intent_seq}", journal_id, opened_hash)
    return "sgc-call-" + sha256_hex(text.encode())[:32]


@dataclass(frozen=True, slots=True)
class CompensationContext:
    """Everything an undo gets. Values are in their journaled (canonical JSON) form, because the
    undo may run in another process than the tool did."""

    saga_id: str
    """The saga being compensated."""
    seq: int
    """Sequence number of the EXECUTED entry being undone."""
    tool: str
    """Tool name as the model saw it."""
    call_id: str | None
    """The model's call id of the original call."""
    args: dict[str, Any]
    """The validated arguments the body received (canonical form: Decimal as string, etc.)."""
    result: Any
    """What the body returned (canonical form; ``bytes`` when the body returned bytes)."""
    undo_data: Any
    """What the body passed to ``record_undo_data`` (``None`` if nothing), in its JSON form: a
    ``uuid.UUID``, a path, an IP address, a ``Decimal`` or a datetime comes back as ``str``,
    bytes as base64 ``str``, a tuple or set as a list, a dataclass or pydantic model as a dict,
    an ``Enum`` as its value (``core.canonical``)."""
    idempotency_key: str
    """Stable key for this undo; the same on every retry of it."""
    raw_args: str | None = None
    """The raw argument text, journaled only for fallback-protected tools (``args`` is then empty)."""
    call_idempotency_key: str | None = None
    """The forward call's idempotency key (:func:`call_idempotency_key` of its INTENT): what the
    call sent to the far side, by which the undo can find the effect."""
    intent_seq: int | None = None
    """The seq of the call's INTENT (``seq`` is its outcome's: EXECUTED, or the RESOLVED or
    CHECKED that answered it)."""


def missing_undo_needs(needs: tuple[str, ...], undo_data: Any) -> list[str]:
    """The keys of ``needs`` (a declaration's ``undo_needs``) that ``undo_data`` lacks: all of
    them when it is not an object. An undo with any missing is not run: it would act blind.

    Args:
        needs: undo-data keys the undo reads.
        undo_data: the call's journaled undo data (or a human's / a check's answer's).
    """
    if not needs:
        return []
    if not isinstance(undo_data, dict):
        return list(needs)
    return [key for key in needs if undo_data.get(key) is None]


def lost_undo_data(payload: Any) -> str | None:
    """Why a call's undo data is missing from its outcome entry, or ``None`` when it is not.

    ``record_undo_data`` given a value with no canonical encoding journals the marker
    ``{"$encoding_error": why, "type": ...}`` as the call's undo data (the effect may exist, what
    its undo needs does not): compensation never runs that undo blind, it reports the call still
    dirty with this reason.

    Args:
        payload: an outcome entry's payload (EXECUTED or FAILED), as journaled.
    """
    undo_data = payload.get("undo_data") if isinstance(payload, dict) else None
    if isinstance(undo_data, dict) and ENCODING_ERROR_KEY in undo_data:
        return f"its undo data could not be journaled ({undo_data[ENCODING_ERROR_KEY]})"
    return None


class StopSignal:
    """A request to stop a compensation walk at its next step boundary, set when the run's caller
    is cancelled: no further undo starts, and the undo running is no longer waited for.

    Not bound to an event loop; :meth:`set` and :meth:`waiter` are called on the loop's thread.
    """

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] = []

    def set(self) -> None:
        """Ask the walk to stop (idempotent)."""
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._set

    def waiter(self) -> asyncio.Future[None]:
        """A future of the running loop, done once the signal is set (at once if it is)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._set:
            waiter.set_result(None)
        else:
            self._waiters.append(waiter)
        return waiter

    def _discard(self, waiter: asyncio.Future[None]) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)


@dataclass(frozen=True, slots=True)
class UndoRun:
    """How one run of an undo ended, as far as the walk waited for it."""

    error: BaseException | None = None
    """What the undo raised (``None``: it returned, or it was not waited for to its end)."""
    stopped: str | None = None
    """``"timed_out"`` (it outlasted its timeout) or ``"cancelled"`` (the walk was told to
    stop, or the undo's own task was cancelled): the undo may have acted and may still end
    (then ``on_late_end`` is called); ``None``: it ended and ``error`` says how."""


def _start(undo: Callable[..., Any], ctx: CompensationContext,
           loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
    """Start ``undo(ctx)``: an async undo as a task, a sync one in a daemon thread (with the
    caller's context variables); the future ends when the undo does."""
    if inspect.iscoroutinefunction(undo):
        return loop.create_task(undo(ctx))
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        elif inspect.isawaitable(outcome):  # a sync callable handing back a coroutine
            asyncio.ensure_future(outcome).add_done_callback(forward)
        else:
            done.set_result(None)

    def forward(awaited: asyncio.Future[Any]) -> None:
        if done.done():
            return
        if awaited.cancelled():
            done.cancel()
        elif awaited.exception() is not None:
            done.set_exception(awaited.exception())  # type: ignore[arg-type]
        else:
            done.set_result(None)

    def body() -> None:
        try:
            outcome, error = context.run(undo, ctx), None
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, journaled there
            outcome, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, outcome, error)
        except RuntimeError:  # the loop is closed: nobody is left to journal the end
            _log.warning(
                "undo of seq %s in saga %s ended after its event loop closed; its end is not "
                "journaled: the undo stays in doubt and `recover` retries it with idempotency "
                "key %s", ctx.seq, ctx.saga_id, ctx.idempotency_key)

    threading.Thread(target=body, name=f"sagacity-undo-{ctx.seq}", daemon=True).start()
    return done


def _abandon(running: asyncio.Future[Any], on_late_end: Callable[[BaseException | None], None]) -> None:
    """Stop waiting for ``running``: cancel it when it is a task (an async undo); whenever it
    ends other than cancelled, hand its outcome to ``on_late_end``."""
    if isinstance(running, asyncio.Task):
        running.cancel()

    def ended(future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            on_late_end(future.exception())

    running.add_done_callback(ended)


async def run_undo(
    undo: Callable[..., Any],
    ctx: CompensationContext,
    *,
    timeout: float,
    stop: StopSignal | None = None,
    on_late_end: Callable[[BaseException | None], None],
) -> UndoRun:
    """Run ``undo(ctx)`` and wait for it at most ``timeout`` seconds or until ``stop`` is set.

    Args:
        undo: the declared undo (sync or async).
        ctx: what it receives.
        timeout: seconds to wait for it (the declaration's ``undo_timeout``).
        stop: set to stop waiting at once (the walk's caller was cancelled).
        on_late_end: called on the event loop with the undo's exception (``None``: it returned)
            when an undo that was not waited for to its end ends after all; never called for an
            undo that ended while waited for, nor for one whose cancellation went through.

    Returns:
        :class:`UndoRun`: the undo's exception, or that it was stopped waiting for.

    Raises:
        asyncio.CancelledError: the calling task was cancelled; the undo was abandoned as for a
            stop (``on_late_end`` still reports a late end).
    """
    loop = asyncio.get_running_loop()
    running = _start(undo, ctx, loop)
    waiter = stop.waiter() if stop is not None else None
    try:
        awaited: set[asyncio.Future[Any]] = {running} if waiter is None else {running, waiter}
        await asyncio.wait(awaited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _abandon(running, on_late_end)
        raise
    finally:
        if waiter is not None and stop is not None:
            stop._discard(waiter)
            waiter.cancel()
    if running.done():  # ended: also when the stop came at the same moment
        if running.cancelled():
            return UndoRun(stopped="cancelled")  # its own task was cancelled (not by us)
        return UndoRun(error=running.exception())
    _abandon(running, on_late_end)
    return UndoRun(stopped="cancelled" if stop is not None and stop.is_set() else "timed_out")


_LATE_ENDS: set[asyncio.Task[None]] = set()
"""Writes of undos' late ends still running (kept referenced until they finish)."""


def late_undo_ends() -> list[asyncio.Task[None]]:
    """The journal writes of late undo ends still under way in this process: await them (e.g.
    ``asyncio.gather(*late_undo_ends())``) before closing a journal whose undos timed out."""
    return list(_LATE_ENDS)


async def _append_late_end(journal: Journal, saga_id: str, spec: dict[str, Any]) -> None:
    """Journal the real end of an undo attempt that was stopped waiting for; a storage failure
    is retried once (same write key). What cannot be written is logged: the attempt stays in
    doubt in the journal, and recovery retries it with the same idempotency key."""
    for attempt in (1, 2):
        try:
            await journal.append(saga_id, **spec)
            return
        except JournalClosedError:
            _log.warning("late end of undo %s in saga %s not journaled: the saga was closed "
                         "meanwhile (a recovery retried the undo and finished it)",
                         spec["write_key"], saga_id)
            return
        except Exception as exc:  # noqa: BLE001 - nobody is left to raise to
            if attempt == 2 or type(exc) is not JournalWriteError:
                _log.warning("late end of undo %s in saga %s not journaled: %s; the undo stays "
                             "in doubt and `recover` retries it with the same idempotency key",
                             spec["write_key"], saga_id, describe_error(exc))
                return


def late_end_writer(
    journal: Journal, saga_id: str, write_key: str, intent: JournalEntry, payload: dict[str, Any]
) -> Callable[[BaseException | None], None]:
    """An ``on_late_end`` for :func:`run_undo`: journals the undo's real end (COMPENSATED, or
    COMPENSATION_FAILED with the error) from a task of its own, under the attempt's end key
    ``write_key``, with ``payload`` (``target_seq``, ``compensating_seq``) and
    ``after_in_doubt: true``; stored once, as that attempt's outcome (``core.compensation``).

    Args:
        journal: the saga's journal (its fenced view: written late if the lease moved on).
        saga_id: the saga.
        write_key: the attempt's end key, ``undo:SEQ:ATTEMPT:end``.
        intent: the INTENT of the call being undone (tool and call id).
        payload: the attempt's outcome payload.
    """

    def on_late_end(error: BaseException | None) -> None:
        body = {**payload, "after_in_doubt": True}
        if error is not None:
            body["error"] = describe_error(error)
        spec = {"phase": Phase.COMPENSATED if error is None else Phase.COMPENSATION_FAILED,
                "write_key": write_key, "tool": intent.tool, "call_id": intent.call_id,
                "payload": body}
        task = asyncio.get_running_loop().create_task(_append_late_end(journal, saga_id, spec))
        _LATE_ENDS.add(task)
        task.add_done_callback(_LATE_ENDS.discard)

    return on_late_end


def _stopped_detail(run: UndoRun, timeout: float, start_seq: int) -> str:
    how = f"timed out after {timeout:g} s" if run.stopped == "timed_out" else "was cancelled"
    return (f"undo {how} (COMPENSATING seq {start_seq}); it may have acted: `recover` retries it "
            "with the same idempotency key")


async def mark_in_doubt(
    journal: Journal, saga_id: str, intent: JournalEntry, outcome_payload: dict[str, Any],
    run: UndoRun, timeout: float, attempt: int,
) -> str:
    """Journal the in-doubt mark of an undo attempt that was stopped waiting for: a
    COMPENSATION_FAILED with ``in_doubt: true``, ``timed_out`` / ``cancelled`` and the timeout
    (seconds), under the write key ``undo:SEQ:ATTEMPT:in-doubt`` (SEQ: the entry undone).

    Args:
        journal: the saga's journal.
        saga_id: the saga.
        intent: the INTENT of the call being undone (tool and call id).
        outcome_payload: ``target_seq`` and ``compensating_seq`` of the attempt.
        run: how the attempt was stopped (``run.stopped`` set).
        timeout: the undo's timeout, seconds.
        attempt: the attempt's number.

    Returns:
        The report line's detail. Never raises for the journal: a mark that cannot be written
        leaves the COMPENSATING without outcome (in doubt for a human), which the detail says.
    """
    detail = _stopped_detail(run, timeout, outcome_payload["compensating_seq"])
    payload = {**outcome_payload, "error": detail, "in_doubt": True,
               "timed_out": run.stopped == "timed_out", "cancelled": run.stopped == "cancelled",
               "undo_timeout": timeout}
    try:
        await journal.append(saga_id, Phase.COMPENSATION_FAILED,
                             write_key=f"undo:{outcome_payload['target_seq']}:{attempt}:in-doubt",
                             tool=intent.tool, call_id=intent.call_id, payload=payload)
    except Exception as exc:  # noqa: BLE001 - the COMPENSATING then stays without outcome
        detail += f"; its in-doubt mark could not be journaled ({describe_error(exc)})"
    return detail
