"""Calls journaled from outside their body: tools we cannot decorate (the fallback seams of the
adapter) and tools nobody declared (journaled ``undeclared`` from the run's hooks) get their
INTENT before the SDK runs them and their outcome when a later seam sees it. Their approval hash
covers the canonical raw arguments."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ...errors import ConfigurationError
from ..approval_args import sensitivity_of
from ..declarations import Reversibility, ToolDeclaration
from ..entries import JournalEntry
from .calls import CallRecorder
from .outcomes import outcome_keys
from .payloads import UNDECLARED, raw_args_value, sensitivity_of
from .state import CallFrame

__all__ = ["ExternalCalls"]


class ExternalCalls:
    """INTENT and outcome of calls whose body we cannot wrap (a part of :class:`~.saga.Saga`,
    beside the calls it wraps: ``calls``)."""

    def __init__(self, calls: CallRecorder) -> None:
        self.calls = calls
        self.core = calls.core
        self.outcomes = calls.outcomes
        self._lock = calls.core.lock
        self._external: dict[str | None, tuple[ToolDeclaration | None, JournalEntry]] = {}
        self._owned: set[str | None] = set()  # ended by their owner only

    async def begin_external_call(
        self, decl: ToolDeclaration | None, tool: str, call_id: str | None, raw_args: str, *,
        agent: str | None = None, asks_approval: bool = False,
        grant_args: dict[str, Any] | None = None, owned: bool = False,
    ) -> JournalEntry:
        """Journal the INTENT of a call whose body we cannot wrap (raw arguments journaled).

        ``decl`` ``None`` is a tool nobody declared: journaled with reversibility
        ``"undeclared"`` (no approval check, no classifier), reported "no undo declared" when the
        saga fails. ``agent`` is the name of the agent whose tool it is (journaled).
        ``asks_approval``: an undeclared call that paused for an approval and was approved (a
        resume consumed the decision); it is held to the journaled decision (hash of the
        canonical raw arguments, consumed once) and its INTENT names the request.
        ``owned``: the seam that writes this INTENT also sees the call's answer (a protected MCP
        server's extractor) and alone ends it (``end_external_call(..., owner=True)``): a call
        that raised without an answer may have acted, so a generic last-resort end (a failure
        formatter, ``on_tool_end``) must not turn it into FAILED; only ``not_run`` may.
        ``grant_args`` is what an irreversible call's approval was bound to, when that is more
        than its raw arguments (an MCP tool: the arguments and the tool's definition); default:
        the canonical raw arguments.

        The outcome comes later through :meth:`end_external_call`. The call is not counted in
        flight meanwhile: the seams that bring its outcome run before the SDK moves on, so
        waiting could never bring a late one (an INTENT left without outcome is in doubt).

        Raises:
            ApprovalError: an irreversible call without a consumed approval of these arguments
                (journaled FAILED; the caller must not run the tool).
            JournalWriteError: the INTENT could not be written (the caller must not run the tool).
        """
        invocation = self.core.invocation_id()
        request_id = None
        if decl is not None and decl.reversibility is Reversibility.IRREVERSIBLE:
            # The approval hash of a tool we cannot decorate covers its canonical raw arguments.
            bound = grant_args if grant_args is not None else raw_args_value(raw_args)
            request_id = await self.calls.refusals.check_grant(tool, call_id, bound, invocation,
                                                               spec=sensitivity_of(decl))
        elif decl is None and asks_approval:
            request_id = await self.calls.refusals.check_grant(tool, call_id, raw_args_value(raw_args),
                                                               invocation, required=False)
        intent = await self.calls.write_intent(decl, tool, call_id, {}, raw_args, invocation, request_id,
                                          agent)
        self.core.last_journaled = time.monotonic()
        with self._lock:
            self._external[call_id] = (decl, intent)
            if owned:
                self._owned.add(call_id)
        return intent

    def adopt_external_call(self, intent: JournalEntry) -> None:
        """Register a fallback call's INTENT read from the journal (a paused run resumed in this
        process) as waiting for its outcome, so :meth:`end_external_call` journals it once."""
        with self._lock:
            self._external.setdefault(intent.call_id, (None, intent))

    def external_frame(self, call_id: str | None) -> CallFrame | None:
        """The call journaled from outside its body that waits for its outcome under
        ``call_id``, as the parent frame of the calls a run nested in it makes; ``None`` when no
        such call is pending."""
        with self._lock:
            pending = self._external.get(call_id)
        if pending is None:
            return None
        intent = pending[1]
        return CallFrame(self.calls.saga, intent.tool or "", call_id, intent.seq)

    def has_external_call(self, call_id: str | None) -> bool:
        """Whether a fallback call with this call id is waiting for its outcome."""
        with self._lock:
            return call_id in self._external

    def end_external_call(
        self, call_id: str | None, *, result: Any = None, exc: BaseException | None = None,
        declaration: ToolDeclaration | None = None, not_run: bool = False,
        timed_out: bool = False, owner: bool = False,
    ) -> asyncio.Future[Any] | None:
        """Journal the outcome of a fallback call (EXECUTED / REFUSED / FAILED), once.

        Safe to call from sync code on the loop thread (a failure formatter): the write is
        scheduled as a task, tracked as in flight. Returns that task, or ``None`` when no such
        call is pending (its outcome was already recorded), or when the call is ``owned`` (see
        :meth:`begin_external_call`) and this end is neither its owner's nor ``not_run``.

        Args:
            declaration: the tool's declaration (for its classifier), when the caller has it.
            not_run: with ``exc``: the body never started (e.g. an ``on_tool_start`` raised).
            timed_out: with ``exc``: the SDK stopped the body at its own timeout (journaled
                ``timed_out``, as a declared tool's timeout is).
            owner: this end comes from the seam that owns the call.
        """
        with self._lock:
            if call_id in self._owned and not (owner or not_run):
                return None  # only its owner knows its answer; without one it stays in doubt
            self._owned.discard(call_id)
            pending = self._external.pop(call_id, None)
        if pending is None:
            return None
        stored, intent = pending
        undeclared = (intent.payload or {}).get("reversibility") == UNDECLARED
        decl = declaration or stored or (None if undeclared else self.calls.tools.declarations.get(intent.tool or ""))
        if decl is None:  # a reloaded call whose tool this process never met: no classifier
            decl = ToolDeclaration(name=intent.tool or "", reversibility=Reversibility.READ_ONLY)
        frame = CallFrame(self.calls.saga, intent.tool or "", call_id, intent.seq)
        phase, payload, failure = self.outcomes.decide(decl, intent, frame, result=result, exc=exc)
        if not_run:
            payload["not_run"] = True
        if exc is not None and timed_out:
            payload["timed_out"] = True  # the error text stays the SDK's own
        if failure is not None:
            # Mark the saga failed now (synchronously), not when the write lands.
            self.core.note_failure(failure)
        done = self.outcomes.begin()
        keys = {**outcome_keys(intent), "sensitive": sensitivity_of(None if undeclared else decl)}
        task = asyncio.ensure_future(self.outcomes.write(phase, payload, keys))
        task.add_done_callback(lambda _t: self.outcomes.end(done))
        return task

    async def refuse_undeclared_call(
        self, tool: str, call_id: str | None, raw_args: str, error: ConfigurationError
    ) -> None:
        """Refuse a call of an undeclared tool met at run time under ``strict=True``: journal
        FAILED (``not_run``, with its raw arguments), fail the saga and raise ``error``.

        Raises:
            ConfigurationError: ``error``, always (the caller must not run the tool).
        """
        await self.calls.refusals.refused_before_intent(
            error, tool, call_id, self.core.invocation_id(),
            {"raw_args": raw_args, "reversibility": UNDECLARED})

    def pending_external_calls(self) -> int:
        """How many fallback calls have an INTENT and no outcome yet in this process."""
        with self._lock:
            return len(self._external)
