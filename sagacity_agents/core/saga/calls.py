"""Recording one call whose body we wrap: the INTENT, durable before the body runs (a failed
write means the body does not run), the body with its :class:`~.state.CallFrame` in the context,
then its outcome. The call is written once, as steps (:meth:`CallRecorder.call_steps`, see
``steps.py``): :meth:`CallRecorder.run_call` drives them for async bodies on the event loop,
:meth:`CallRecorder.run_call_sync` for sync bodies from a worker thread, whose journal writes go
straight to a backend that can write from that thread (``append_sync``: SQLite, memory) and
otherwise hop to the saga's event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from ...errors import (
    CallContextLostError, EncodingError, JournalWriteError, LeaseLostError, SagaStateError,
)
from ...errors import describe_error as _describe
from ..canonical import encode_canonical, to_canonical_value
from ..approval_args import sensitivity_of
from ..declarations import DEFAULT_CALL_DEADLINE, Reversibility, ToolDeclaration
from ..protection import remember_raw_args
from ..sensitive import DEFAULT_SENSITIVITY, Sensitivity
from ..entries import JournalEntry, Phase
from .declared import ToolRegistry
from .lifecycle import RunLifecycle
from .observed import begin_call, end_call, note_intent
from .outcomes import OutcomeLog
from .payloads import (
    ENCODING_ERROR_KEY, REVERSIBILITY_TEXT, UNDECLARED, encoding_marker, sensitivity_of,
)
from .refusals import Refusals
from .state import CallFrame, SagaCore
from .status import FailureRecord
from .steps import BODY, Append, Steps, drive, drive_in_thread

__all__ = ["CallRecorder", "calls_in_flight", "carry_context", "current_call",
           "current_idempotency_key", "record_undo_data"]

T = TypeVar("T")
P = ParamSpec("P")

current_call: contextvars.ContextVar[CallFrame | None] = contextvars.ContextVar(
    "sagacity_current_call", default=None
)
"""The wrapped tool call running in this context (parent of nested runs)."""


_IN_FLIGHT: dict[int, tuple[CallFrame, bool]] = {}
"""Every wrapped call whose body runs now in this process: ``id(frame)`` -> (its frame, whether
its tool is compensatable). A call of ``record_undo_data`` with no frame in its context while
this is not empty came from a thread the body started without the body's context."""

_IN_FLIGHT_LOCK = threading.Lock()


def calls_in_flight() -> int:
    """How many wrapped saga calls (decorated tools) have their body running in this process."""
    with _IN_FLIGHT_LOCK:
        return len(_IN_FLIGHT)


def _body_started(frame: CallFrame, decl: ToolDeclaration) -> None:
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT[id(frame)] = (frame, decl.reversibility is Reversibility.COMPENSATABLE)


def _body_ended(frame: CallFrame) -> None:
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.pop(id(frame), None)


_CARRY_HINT = (
    "no saga call is in this context, but this process has {n} saga call(s) in flight: {what} "
    "was probably called from a thread or executor the tool body started, which does not "
    "inherit the body's context. Carry the context into it: "
    "loop.run_in_executor(pool, sagacity_agents.saga.carry_context(fn)), "
    "threading.Thread(target=carry_context(fn)), contextvars.copy_context().run(fn), or "
    "asyncio.to_thread(fn) (which copies it)")


def _context_lost(what: str) -> CallContextLostError | None:
    """The error for ``what`` called with no call in its context, or ``None`` outside any saga
    call (no call in flight in this process: tools stay usable without a saga).

    For ``record_undo_data`` the value is lost, and no one can say which call it was meant for:
    every compensatable call in flight that has recorded no undo data gets the lost-data marker
    (its undo is never run blind; compensation reports it still dirty, naming this), so an
    effect made in such a thread never ends under a clean COMPENSATED, even when the thread
    swallowed this error."""
    with _IN_FLIGHT_LOCK:
        frames = list(_IN_FLIGHT.values())
    if not frames:
        return None
    message = _CARRY_HINT.format(n=len(frames), what=what)
    if what == "record_undo_data":
        why = f"record_undo_data was called outside the call's context ({message})"
        for frame, compensatable in frames:
            if compensatable and not frame.has_undo_data:
                frame.undo_data = {ENCODING_ERROR_KEY: why, "type": "lost context"}
                frame.undo_data_error, frame.has_undo_data = why, True
    return CallContextLostError(message, code="CALL_CONTEXT_LOST")


def carry_context(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn``, made to run in a copy of the context it is wrapped in: wrap it inside the tool
    body, then hand it to a thread or an executor, so that :func:`record_undo_data` and
    :func:`current_idempotency_key` called there find the body's call
    (``loop.run_in_executor(None, carry_context(work))``,
    ``threading.Thread(target=carry_context(work))``). Each call of the returned callable runs
    in its own copy (one context cannot be entered by two threads at once).

    Args:
        fn: any callable.

    Returns:
        A callable taking ``fn``'s arguments and returning what ``fn`` returns.
    """
    context = contextvars.copy_context()

    @functools.wraps(fn)
    def in_call_context(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.copy().run(fn, *args, **kwargs)

    return in_call_context


def record_undo_data(data: Any) -> None:
    """Hand the undo what it will need, from inside a tool body.

    The normal case is right *after* the effect, with what the effect created (the new booking's
    id: ``record_undo_data({"booking_id": booking.id})``); the state *before* a change (to put it
    back) is recorded the same way, before the change. The value is journaled with the call's
    outcome entry, inside the hash chain, and given to the undo as
    ``CompensationContext.undo_data``, in its JSON form (the canonical encoding,
    ``core.canonical``): a ``uuid.UUID``, ``pathlib`` path, ``ipaddress`` value, ``Decimal``,
    date or datetime comes back as a ``str`` (rebuild it in the undo: ``uuid.UUID(text)``), bytes
    as a base64 ``str``, a tuple or set as a list, a dataclass or pydantic model as a dict, an
    ``Enum`` as its value. Call it once per call (a later call replaces the value). Outside a
    saga it does nothing, so tools stay usable without one.

    A thread or executor the body starts does not inherit the body's context: wrap what it runs
    with :func:`carry_context` (``asyncio.to_thread`` copies the context itself).

    Args:
        data: the value for the undo; any value with a canonical encoding (see
            ``core.canonical``).

    Never raises for a value that cannot be journaled (the effect has usually happened by then;
    an exception here would hide it behind a clean FAILED): the call's undo data is journaled as
    the marker ``{"$encoding_error": why, "type": ...}`` instead, the call fails the saga
    (journaled EXECUTED when the body returns: its effect may exist), and compensation never
    runs its undo without its data: the report lists it still dirty (``no_undo``), naming the
    encoding error.

    Raises:
        CallContextLostError: no saga call is in this context while this process has one in
            flight (a thread the body started without :func:`carry_context`). The calls in
            flight that recorded no undo data are marked as having lost it: their undos are not
            run blind, compensation reports them still dirty.
    """
    frame = current_call.get()
    if frame is None:
        lost = _context_lost("record_undo_data")
        if lost is not None:
            raise lost
    else:
        # Checked now: undo data that cannot be journaled would leave the undo without what it
        # needs, discovered only at refund time.
        try:
            encode_canonical(to_canonical_value(data))
        except EncodingError as exc:
            frame.undo_data, frame.undo_data_error = encoding_marker(data, exc), str(exc)
        else:
            frame.undo_data, frame.undo_data_error = data, None
        frame.has_undo_data = True


def _seconds(value: float) -> float | int:
    """``value`` seconds as journaled: an int when whole (300, not 300.0). The same number in
    RFC 8785; but a float sends the entry's bytes to the reference encoder, about forty times
    slower than the fast path every call takes (``core.canonical.encode_canonical``)."""
    number = float(value)
    return int(number) if number.is_integer() else number


def current_idempotency_key() -> str | None:
    """The idempotency key of the journaled call running in this context, for the tool's own API
    client (an ``Idempotency-Key`` header), or ``None`` outside a journaled call.

    Read inside a decorated tool's body (``@compensable``, ``@irreversible``...): the key is
    derived from the call's INTENT (``core.undo.call_idempotency_key``, bound to the journal's id
    and the saga's SAGA_OPENED under derivation 2: ``core.identity``), so it is the same key
    an MCP call of the saga sends in ``_meta``, stable in every process that
    reads the journal, and never the model's call id (models reuse those). Its undo gets its own
    key as ``CompensationContext.idempotency_key``.

    Raises:
        CallContextLostError: no saga call is in this context while this process has one in
            flight (a thread the body started without :func:`carry_context`).
    """
    frame = current_call.get()
    if frame is None:
        lost = _context_lost("current_idempotency_key")
        if lost is not None:
            raise lost
        return None
    # The saga's derivation (core.identity): bound to its journal and SAGA_OPENED, or the
    # rule before journal ids for a saga opened before them.
    return frame.saga.core.derivation.call_key(frame.saga.saga_id, frame.intent_seq)


@dataclass(eq=False)
class CallRecorder:
    """Journaling one wrapped call around its body (a part of :class:`~.saga.Saga`)."""

    saga: Any
    """The saga the calls belong to (their frames name it)."""
    core: SagaCore
    tools: ToolRegistry
    lifecycle: RunLifecycle
    outcomes: OutcomeLog
    refusals: Refusals
    resume_parents: dict[str | None, CallFrame] = field(default_factory=dict)
    """Parent call of a paused nested call, by call id, reloaded from the journal on resume
    (the SDK resumes a nested run without the guardrail that sets :data:`current_call`)."""
    call_deadline: float = DEFAULT_CALL_DEADLINE
    """Seconds a call may take when neither its framework tool nor its declaration says
    (journaled in its INTENT as ``deadline_seconds``; ``core.resolution``)."""

    def intent_payload(
        self, decl: ToolDeclaration | None, args: dict[str, Any], raw_args: str | None,
        request_id: str | None = None, call_id: str | None = None, agent: str | None = None,
        tool: str | None = None,
    ) -> dict[str, Any]:
        """The payload of a call's INTENT (its parent call is the one running in this context,
        or the one reloaded for a resumed nested call). ``deadline_seconds``: the framework
        tool's timeout (``tool_settings``), else the declaration's ``deadline``, else
        :attr:`call_deadline`."""
        frame = current_call.get() or self.resume_parents.pop(call_id, None)
        timeout = self.tools.tool_settings.get(tool or "", {}).get("timeout") if tool else None
        payload: dict[str, Any] = {
            "args": args,  # converted by the journal; unencodable -> INTENT fails, body not run
            "reversibility": REVERSIBILITY_TEXT[decl.reversibility] if decl else UNDECLARED,
            "deadline_seconds": _seconds(timeout or (decl.deadline if decl else None) or self.call_deadline),
        }
        if request_id is not None:
            payload["request_id"] = request_id  # the approval this call uses up
        if raw_args is not None:
            payload["raw_args"] = raw_args
            # A text is not parsed by the scan: the values it names are masked inside it.
            remember_raw_args(self.core.secrets, raw_args, sensitivity_of(decl))
        if decl is not None and decl.declaration_id is not None:
            payload["declaration"] = decl.declaration_id
            if decl.scope is not None:
                payload["scope"] = decl.scope  # whose undo: recovery needs the same id and scope
        if agent is not None:
            payload["agent"] = agent  # which agent's tool of that name
        if frame is not None and frame.saga is self.saga:
            payload["parent_call_id"] = frame.call_id
            payload["parent_intent_seq"] = frame.intent_seq
        return payload

    def intent_steps(
        self, tool: str, call_id: str | None, payload: dict[str, Any], invocation: str,
        spec: Sensitivity = DEFAULT_SENSITIVITY,
    ) -> Steps[JournalEntry]:
        """Write a call's INTENT: a storage failure is retried once, anything else fails closed
        (:meth:`intent_after_failure`). ``spec``: what is sensitive in the tool's values (its
        declaration's; committed in the entry, ``core.sensitive``)."""
        try:
            return (yield Append(Phase.INTENT, {"write_key": f"{invocation}:intent", "tool": tool,
                                                "call_id": call_id, "payload": payload,
                                                "sensitive": spec}))
        except Exception as exc:  # noqa: BLE001 - retried (lost ack) or failed closed there
            return (yield self.intent_after_failure(exc, tool, call_id, payload, invocation, spec))

    async def write_intent(
        self, decl: ToolDeclaration | None, tool: str, call_id: str | None, args: dict[str, Any],
        raw_args: str | None, invocation: str, request_id: str | None = None,
        agent: str | None = None,
    ) -> JournalEntry:
        """Write a call's INTENT from the event loop (:meth:`intent_steps`).

        Raises:
            JournalWriteError: the INTENT is not written; the body must not run.
            LeaseLostError: this run lost the saga's lease; the body must not run.
        """
        payload = self.intent_payload(decl, args, raw_args, request_id, call_id, agent, tool)
        return await drive(self.intent_steps(tool, call_id, payload, invocation, sensitivity_of(decl)),
                           self.core.journal, self.core.saga_id)

    async def intent_after_failure(
        self, exc: Exception, tool: str, call_id: str | None, payload: dict[str, Any],
        invocation: str, spec: Sensitivity = DEFAULT_SENSITIVITY,
    ) -> JournalEntry:
        """The first INTENT append raised ``exc``: retry a storage failure once, else fail closed.

        Raises:
            JournalWriteError: the INTENT is not written; the body must not run.
            LeaseLostError: ``exc`` was one (another run holds the saga).
        """
        core = self.core
        write_key = f"{invocation}:intent"
        if isinstance(exc, LeaseLostError):
            # Another run holds the saga: the body must not run, and nothing more is ours to
            # journal (a FAILED would be refused by the same fence).
            core.check_lease()
            raise exc
        try:
            if not isinstance(exc, JournalWriteError):
                raise exc
            # The write may have landed with its acknowledgement lost: a retry with the same
            # write key returns the stored entry if so (and writes it if not).
            return await core.journal.append(
                core.saga_id, Phase.INTENT, write_key=write_key, tool=tool,
                call_id=call_id, payload=payload, sensitive=spec,
            )
        except Exception as final:
            # Fail closed: the body will not run. Journal why, if the journal is reachable; the
            # entry names the INTENT's write key, so a reader can pair it with an INTENT that
            # landed after all.
            reason = _describe(final)
            seq = None
            try:
                entry = await core.journal.append(
                    core.saga_id, Phase.FAILED, write_key=f"{invocation}:outcome", tool=tool,
                    call_id=call_id,
                    payload={"intent_seq": None, "intent_write_key": write_key, "not_run": True,
                             "error": f"INTENT not written, body not run: {reason}"},
                    sensitive=spec,
                )
                seq = entry.seq
            except Exception:  # noqa: BLE001 - the journal is down; the raise below says so
                pass
            core.note_failure(FailureRecord(seq, tool, call_id, f"INTENT not written: {reason}", final))
            raise JournalWriteError(
                f"{tool}: INTENT could not be journaled ({reason}); the tool was not run"
            ) from final

    def call_steps(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, args: dict[str, Any],
        raw_args: str | None, agent: str | None,
    ) -> Steps[Any]:
        """One wrapped call, as steps (``steps.py``): the approval check of an irreversible
        call, the INTENT, the body with its frame in the context, the outcome. Returns what the
        body returned (or the refusal's message for the model); raises what the body raised.
        Arguments as for :meth:`run_call`."""
        core, outcomes = self.core, self.outcomes
        core.check_lease()  # a run that lost its lease starts no new body
        if core.failures and self.refusals.refuses_effects(decl):
            return (yield self.refusals.refuse_call(decl, tool, call_id, args, raw_args=raw_args,
                                                    refused_by="policy"))
        done = outcomes.begin()
        invocation = core.invocation_id()
        # Begun before the INTENT, so that the call's entries carry its span (core.observe).
        step = begin_call(core.saga_id, decl, tool, call_id, args, agent)
        try:
            self.tools.note_declaration(tool, decl, agent)
            request_id = None
            if decl.reversibility is Reversibility.IRREVERSIBLE:
                request_id = yield self.refusals.check_grant(tool, call_id, args, invocation,
                                                             spec=sensitivity_of(decl))
            payload = self.intent_payload(decl, args, raw_args, request_id, call_id, agent, tool)
            intent = yield from self.intent_steps(tool, call_id, payload, invocation, decl.sensitivity)
        except BaseException as exc:
            end_call(step, None, None, None, exc)
            outcomes.end(done)
            raise
        note_intent(step, intent)
        core.progress.body_started(done, tool, call_id, intent.payload)
        if self.refusals.refuses_effects(decl):
            # The saga failed while the INTENT was being written (a call of the same turn): the
            # body must not run after the failure; the REFUSED entry is the call's outcome.
            try:
                return (yield self.refusals.refuse_call(
                    decl, tool, call_id, args, raw_args=raw_args, refused_by="policy", intent=intent))
            finally:
                end_call(step, Phase.REFUSED, None, None)
                outcomes.end(done)
        keys = {"write_key": f"{invocation}:outcome", "tool": tool, "call_id": call_id,
                "sensitive": decl.sensitivity}
        frame = CallFrame(self.saga, tool, call_id, intent.seq)
        token = current_call.set(frame)
        _body_started(frame, decl)
        started = time.monotonic()
        try:
            result = yield BODY
        except BaseException as exc:
            phase, payload, failure = outcomes.decide(decl, intent, frame, exc=exc,
                                                      elapsed=time.monotonic() - started)
            try:
                yield from outcomes.finish_steps(done, phase, payload, keys, failure)
            finally:
                end_call(step, phase, payload, failure)
            raise
        finally:
            _body_ended(frame)
            current_call.reset(token)
        phase, payload, failure = outcomes.decide(decl, intent, frame, result=result)
        written = None
        try:
            written = yield from outcomes.finish_steps(done, phase, payload, keys, failure)
        finally:
            end_call(step, phase, payload, failure, outcome=None if failure else written,
                     derivation=self.saga.core.derivation)
        return result

    def run_call(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, args: dict[str, Any],
        body: Callable[[], Awaitable[T]], *, raw_args: str | None = None, agent: str | None = None,
    ) -> Coroutine[Any, Any, T]:
        """Journal one async call around ``body``: INTENT, then EXECUTED / REFUSED / FAILED.

        Args:
            decl: the tool's declaration.
            tool: tool name as the model saw it.
            call_id: the model's call id.
            args: the validated arguments the body receives (journaled in INTENT).
            body: runs the tool body.
            raw_args: the raw argument text, journaled only for tools whose validated
                arguments are not available (fallback wrapping).
            agent: the name of the agent whose tool this is (journaled: two agents of a saga
                may each have a tool of this name; the undo is found by ``decl``'s id).

        Returns:
            Whatever ``body`` returned, even when the outcome could not be journaled.

        Raises:
            JournalWriteError: the INTENT could not be written; ``body`` was not run.
            LeaseLostError: this run lost the saga's lease (``core.fence``); ``body`` was not run.
            BaseException: whatever ``body`` raised (including ``CancelledError``), re-raised
                after the FAILED entry is written.
        """
        return drive(self.call_steps(decl, tool, call_id, args, raw_args, agent),
                     self.core.journal, self.core.saga_id, body)

    def run_call_sync(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, args: dict[str, Any],
        body: Callable[[], T], *, raw_args: str | None = None, agent: str | None = None,
    ) -> T:
        """:meth:`run_call` for a sync ``body``, from a worker thread: journal writes go through
        the backend's blocking ``append_sync`` where the fence view has it, else to the saga's
        event loop, awaited here; so a body the framework cannot stop still gets its real outcome
        journaled when it ends.

        Raises:
            SagaStateError: the saga is not open, or this is the loop's thread (a deadlock).
            Otherwise as :meth:`run_call`.
        """
        loop = self.lifecycle.loop
        if loop is None:
            raise SagaStateError("saga is not open")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise SagaStateError("run_call_sync was called on the event loop thread")
        steps = self.call_steps(decl, tool, call_id, args, raw_args, agent)
        core = self.core
        return drive_in_thread(steps, core.journal, core.saga_id, body, loop,
                               core.capabilities.sync_append)
