"""A live saga: the scope tool wrappers journal into, and the end-of-run decision.

Framework-agnostic: an adapter calls :meth:`Saga.run_call` (async bodies) or
:meth:`Saga.run_call_sync` (sync bodies in worker threads) around each tool body, and
:meth:`Saga.finish` when a run ends. The active saga and the current call live in
``contextvars`` so that async, threaded, parallel and nested calls all see them.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import enum
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from ...errors import (
    ApprovalError, ConfigurationError, EncodingError, JournalError, JournalWriteError, SagaFailedError,
    SagaStateError, describe_error,
)
from ..canonical import canonical_bytes, encode_canonical, parse_json, sha256_hex, to_canonical_value
from ..compensation import CompensationItem, CompensationReport, SagaLedger, compensate
from ..declarations import Reversibility, ToolDeclaration, Verdict
from ..entries import JournalEntry, Phase
from ..evidence import Evidence, verified_entries
from ..grants import grant_for_call
from ..journal import Journal, append_each
from ..lease import DEFAULT_LEASE_SECONDS, LeaseKeeper, acquire_lease, new_holder_id
from .verdict import changes_world, read_verdict

__all__ = [
    "CallFrame",
    "FailurePolicy",
    "FailureRecord",
    "Grant",
    "Saga",
    "SagaStatus",
    "current_call",
    "current_saga",
    "record_undo_data",
]

T = TypeVar("T")

_REVERSIBILITY_TEXT = {kind: kind.value for kind in Reversibility}  # Enum.value is slow per call

ENCODING_ERROR_KEY = "$encoding_error"
"""Marker key in a payload for a value that had no canonical encoding (never a ``repr``)."""


class FailurePolicy(str, enum.Enum):
    """What happens at the first failed tool call of a saga."""

    STOP = "stop"
    """Stop the run at once: no further side effects after a failure (the default)."""
    CONTINUE = "continue"
    """Let the model carry on (it sees the SDK's error text); compensate when the run ends."""
    REFUSE_EFFECTS = "refuse_effects"
    """Let the model carry on, but refuse every further call to a tool that changes the world
    (compensatable, no-undo, irreversible; undeclared tools are not ours to refuse): its body does
    not run, the call is journaled REFUSED, and the model is told that nothing more will be
    changed and what will be undone. Read-only tools still run. Compensate when the run ends."""


class SagaStatus(str, enum.Enum):
    """Where a saga stands."""

    OPEN = "OPEN"
    """Open, with no failure so far (between runs of a multi-run saga)."""
    COMPLETED = "COMPLETED"
    """Closed with no failure."""
    COMPENSATED = "COMPENSATED"
    """Failed; every compensatable effect was undone (kept irreversible/no-undo effects are listed)."""
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    """Failed; at least one undo failed: the report says what is still dirty."""
    IN_DOUBT = "IN_DOUBT"
    """Failed and compensated, but some call has no known outcome: a human must look."""
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """The run returned with calls paused for a human decision."""


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """A failed call, as the saga saw it."""

    seq: int | None
    """Sequence number of the FAILED entry (``None`` if it could not be written)."""
    tool: str
    """Tool name."""
    call_id: str | None
    """The model's call id."""
    error: str
    """Exception type and message, or the classifier's verdict."""
    exception: BaseException | None = None
    """The raw exception, when there was one."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A human decision about one pending irreversible call, consumed by a resume (and journaled
    as CONSUMED: the journal entry, not this object, is what lets the call run)."""

    request_id: str
    """The approval request it answers."""
    call_id: str | None
    """The model's call id of the paused call."""
    tool: str
    """Tool name."""
    args_hash: str
    """SHA-256 of the canonical validated arguments that were decided on."""
    approved: bool
    """True for an approval, False for a rejection."""


class _InFlight:
    """One call counted in flight; ended exactly once."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False


@dataclass
class CallFrame:
    """The call currently running in this context (set by the wrapper around the body)."""

    saga: Saga
    """The saga the call belongs to."""
    tool: str
    """Tool name."""
    call_id: str | None
    """The model's call id."""
    intent_seq: int
    """Sequence number of the call's INTENT."""
    undo_data: Any = None
    """What the body handed to :func:`record_undo_data`."""
    has_undo_data: bool = False


current_saga: contextvars.ContextVar[Saga | None] = contextvars.ContextVar(
    "sagacity_current_saga", default=None
)
"""The saga of the current context (set around a run; inherited by tasks and worker threads)."""

current_call: contextvars.ContextVar[CallFrame | None] = contextvars.ContextVar(
    "sagacity_current_call", default=None
)
"""The wrapped tool call running in this context (parent of nested runs)."""


def record_undo_data(data: Any) -> None:
    """Hand the undo what it will need, from inside a tool body (e.g. the state before the change).

    The value is journaled with the call's EXECUTED entry, inside the hash chain, and given to the
    undo as ``CompensationContext.undo_data``. Call it once per call (a later call replaces the
    value). Outside a saga it does nothing, so tools stay usable without one.

    Call it before the body changes the world (it records the state *before* the change).

    Args:
        data: any value with a canonical encoding (see ``core.canonical``).

    Raises:
        EncodingError: ``data`` has no canonical encoding (raised inside the body, which then
            fails like any raising body).
    """
    frame = current_call.get()
    if frame is not None:
        # Checked now, in the body, where the developer can see it: undo data that cannot be
        # journaled would leave the undo without what it needs, discovered only at refund time.
        encode_canonical(to_canonical_value(data))
        frame.undo_data = data
        frame.has_undo_data = True


def _encode_or_marker(value: Any) -> Any:
    try:
        converted = to_canonical_value(value)
        encode_canonical(converted)  # e.g. a lone surrogate converts but does not encode
        return converted
    except EncodingError as exc:
        return {ENCODING_ERROR_KEY: str(exc), "type": type(value).__qualname__}


RESULT_TYPE_KEY = "result_type"
"""Payload key beside ``result`` saying what the canonical value stands for: ``"bytes"`` when the
body returned bytes (journaled, like all bytes, as a standard base64 string; the hashed bytes
follow the unchanged canonical rule), so a reader and the undo get bytes back, not text."""


def _with_result(base: dict[str, Any], result: Any) -> dict[str, Any]:
    if isinstance(result, (bytes, bytearray, memoryview)):
        return {**base, "result": result, RESULT_TYPE_KEY: "bytes"}
    return {**base, "result": result}


_describe = describe_error


def _raw_args_value(raw_args: str) -> dict[str, Any]:
    """The canonical value of a fallback call's raw argument text (``{"$unparsable": text}`` when
    it is not a JSON object: no approval can match it)."""
    try:
        value = parse_json(raw_args or "{}")
        if isinstance(value, dict):
            converted: dict[str, Any] = to_canonical_value(value)
            return converted
    except EncodingError:
        pass
    return {"$unparsable": raw_args}


class Saga:
    """One saga in this process: where wrapped calls journal, and how a run's end is decided.

    Args:
        journal: where entries go.
        saga_id: reuse an existing id (a later run of the same saga, a resume); a new UUID if None.
        policy: what the first failed call does (default :attr:`FailurePolicy.STOP`).
        in_flight_timeout: seconds :meth:`settle` waits for calls still running before deciding
            what to undo; calls still running then are reported in doubt.
        metadata: JSON-able data journaled with SAGA_OPENED.
        evidence: how the saga's past is verified before acting on it (reopening, compensating)
            and whether checkpoints are signed at close; default: the hash chain alone.
        lease_seconds: duration of the run lease this object takes in :meth:`start_run` (see
            ``core.lease``): another process may take the saga over this many seconds after
            the last entry of a run whose holder died.
    """

    def __init__(
        self,
        journal: Journal,
        saga_id: str | None = None,
        *,
        policy: FailurePolicy = FailurePolicy.STOP,
        in_flight_timeout: float = 30.0,
        metadata: dict[str, Any] | None = None,
        evidence: Evidence | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        self.journal = journal
        self.evidence = evidence
        self._fresh_id = saga_id is None  # a new random id: nothing in the journal to read
        # Invocation ids (write-key prefixes): random per Saga object, counted per call; unique
        # across processes and retries of a saga without a uuid4 per call.
        self._invocation_prefix = uuid.uuid4().hex[:16]
        self._invocations = itertools.count(1)
        self.saga_id = saga_id or uuid.uuid4().hex
        self.policy = FailurePolicy(policy)
        self.in_flight_timeout = in_flight_timeout
        self.metadata = metadata or {}
        self.declarations: dict[str, ToolDeclaration] = {}
        self.tool_settings: dict[str, dict[str, Any]] = {}
        self.failures: list[FailureRecord] = []
        self.status = SagaStatus.OPEN
        self.report: CompensationReport | None = None
        self.in_doubt: tuple[CompensationItem, ...] = ()
        """Every call whose outcome is unknown when the saga was last finished (its INTENT, or
        its undo's COMPENSATING, has no outcome in the journal)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._active = 0  # calls between _begin and _end (any thread)
        self._unwritten: list[tuple[Phase, dict[str, Any]]] = []
        # Outcome entries written behind their calls (journals with ``writes_outcomes_behind``):
        # pending writes, and the latest, which the next one waits for (outcomes keep call order).
        self._outcomes_behind = bool(getattr(journal, "writes_outcomes_behind", False))
        self._behind: set[asyncio.Future[None]] = set()
        self._behind_last: asyncio.Future[None] | None = None
        self._claimed_requests: set[str] = set()  # approvals taken by calls of this object
        self.journal_errors: list[str] = []
        """Journal writes of the saga's own bookkeeping that failed (SAGA_FAILED, SAGA_CLOSED)."""
        self._external: dict[str | None, tuple[ToolDeclaration | None, JournalEntry]] = {}
        self.resume_parents: dict[str | None, CallFrame] = {}
        """Parent call of a paused nested call, by call id, reloaded from the journal on resume
        (the SDK resumes a nested run without the guardrail that sets :data:`current_call`)."""
        self._opened = False
        self._recovering = False
        self._closed = False
        self.lease_seconds = lease_seconds
        self.holder = new_holder_id()
        """This object's run-lease holder id (``host:pid:random``)."""
        self._keeper: LeaseKeeper | None = None
        self.last_journaled = time.monotonic()
        """``time.monotonic()`` of the latest call start or end (the lease keeper reads it)."""

    # --- lifecycle ------------------------------------------------------------------------
    @property
    def failed(self) -> bool:
        """True once any call failed (raised, was cancelled, or was classified failed)."""
        return bool(self.failures)

    @property
    def closed(self) -> bool:
        """True once SAGA_CLOSED is journaled."""
        return self._closed

    async def open(self, *, recovering: bool = False) -> None:
        """Journal SAGA_OPENED (once per saga id; a retry or a later process is harmless) and
        bind the saga to the running event loop.

        Args:
            recovering: allow a saga that failed (it ended COMPENSATION_FAILED or IN_DOUBT, or
                its process stopped while compensating): recovery finishes it.

        Raises:
            SagaStateError: the saga is closed in the journal (closed is terminal), or it failed
                (a failed saga takes no more runs: recover it).
            EvidenceError: the saga's journal does not verify (nothing is written).
            JournalError: the journal cannot be written.
        """
        self.loop = asyncio.get_running_loop()
        if self._opened:
            return
        if self._fresh_id:
            await self.journal.append(
                self.saga_id, Phase.SAGA_OPENED, write_key="saga:open", payload={"metadata": self.metadata}
            )
            self._opened = True
            return
        existing = await verified_entries(self.journal, self.saga_id, self.evidence)
        self._refuse_state(existing, recovering)
        self._recovering = recovering
        if not existing:
            try:
                await self.journal.append(
                    self.saga_id, Phase.SAGA_OPENED, write_key="saga:open",
                    payload={"metadata": self.metadata}, expected_seq=0,
                )
            except JournalWriteError:
                # Opened meanwhile by another writer (two first runs of one saga id at once):
                # the lease decides which of them runs.
                if not any(e.phase is Phase.SAGA_OPENED for e in await self.journal.entries(self.saga_id)):
                    raise
        self._opened = True

    def _refuse_state(self, existing: list[JournalEntry], recovering: bool) -> None:
        closes = [e for e in existing if e.phase is Phase.SAGA_CLOSED]
        if closes:
            last = closes[-1].payload if isinstance(closes[-1].payload, dict) else {}
            raise SagaStateError(
                f"saga {self.saga_id} is closed ({last.get('status')}); a closed saga is "
                "terminal: open a new saga"
            )
        if not recovering and any(e.phase is Phase.SAGA_FAILED for e in existing):
            raise SagaStateError(
                f"saga {self.saga_id} failed and is not closed (it ended COMPENSATION_FAILED or "
                "IN_DOUBT, or its process stopped while compensating); it takes no more runs: "
                "recover it (Sagacity.recover or `sagacity saga recover`)"
            )

    async def begin_run(self, agent_name: str, *, recovering: bool = False) -> None:
        """:meth:`open` then :meth:`start_run`. For a saga this object created, SAGA_OPENED and
        RUN_STARTED go to the journal together (one round trip where it batches appends,
        ``core.journal.append_each``).

        Raises:
            As :meth:`open` and :meth:`start_run`.
        """
        if self._fresh_id and not self._opened:
            self.loop = asyncio.get_running_loop()
            await self.start_run(agent_name, opening={
                "phase": Phase.SAGA_OPENED, "write_key": "saga:open",
                "payload": {"metadata": self.metadata},
            })
            self._opened = True
            return
        await self.open(recovering=recovering)
        await self.start_run(agent_name)

    async def start_run(self, agent_name: str, *, opening: dict[str, Any] | None = None) -> None:
        """Take the saga's run lease: journal RUN_STARTED for one run (segment), resume,
        recovery or close of the saga, and keep the lease renewed until :meth:`end_run`.
        ``opening``: the SAGA_OPENED append of a saga this object created, written in the same
        batch (:meth:`begin_run`).

        Raises:
            SagaStateError: another run holds the saga's lease and it has not expired, or the
                saga is closed or failed (see :meth:`open`); nothing was written.
            JournalError: the journal cannot be read or written.
        """
        self.loop = asyncio.get_running_loop()
        recovering = self._recovering
        await acquire_lease(
            self.journal, self.saga_id, holder=self.holder, seconds=self.lease_seconds,
            agent=agent_name,
            check=None if self._fresh_id else (lambda entries: self._refuse_state(entries, recovering)),
            opening=opening,
        )
        self.last_journaled = time.monotonic()
        self._keeper = LeaseKeeper(
            self.journal, self.saga_id, self.holder, self.lease_seconds, lambda: self.last_journaled
        )
        self._keeper.start()

    @property
    def running(self) -> bool:
        """True between :meth:`start_run` and :meth:`end_run` (this object holds the lease)."""
        return self._keeper is not None

    async def end_run(self, status: SagaStatus) -> None:
        """Release the run lease: journal RUN_ENDED with the saga's status. Idempotent; a failed
        write is recorded in :attr:`journal_errors` (the lease then simply expires)."""
        await self._release_lease(status)

    async def _release_lease(self, status: SagaStatus, closing: dict[str, Any] | None = None) -> bool:
        """Stop renewing the lease and journal RUN_ENDED; with ``closing`` (the SAGA_CLOSED
        append), both in one batch where the journal batches (``core.journal.append_each``).

        Returns:
            Whether ``closing`` was stored here. ``False`` too when this object held no lease
            (nothing written) or the batch raised (RUN_ENDED is then written alone, under the
            same write key, and the caller writes ``closing``). A failed RUN_ENDED is recorded
            in :attr:`journal_errors` (the lease then simply expires).
        """
        keeper, self._keeper = self._keeper, None
        if keeper is None:
            return False
        await keeper.stop()
        ended: dict[str, Any] = {
            "phase": Phase.RUN_ENDED, "write_key": f"run-end:{self.holder}:{uuid.uuid4().hex[:8]}",
            "payload": {"holder": self.holder, "status": status.value},
        }
        if closing is not None:
            try:
                await append_each(self.journal, self.saga_id, [ended, closing])
                return True
            except JournalError:
                pass  # one by one: RUN_ENDED here, SAGA_CLOSED by the caller
        try:
            await self.journal.append(self.saga_id, **ended)
        except JournalError as exc:
            self.journal_errors.append(f"RUN_ENDED not journaled: {_describe(exc)}")
        return False

    def register(self, tool: str, declaration: ToolDeclaration, **settings: Any) -> None:
        """Make ``declaration``'s undo available for entries of ``tool`` and note the tool's
        framework settings (e.g. ``timeout`` seconds, used to say a cancellation was a timeout).

        Raises:
            ConfigurationError: another declaration is registered under the same tool name (two
                agents of one saga with different tools named alike): the journal names calls by
                tool name, so compensation would run the wrong undo.
        """
        known = self.declarations.get(tool)
        if known is not None and known is not declaration:
            raise ConfigurationError(
                f"two different tools are named {tool!r} in saga {self.saga_id} "
                f"({known.name} and {declaration.name}); tool names must be unique across the "
                "agents of a saga (use function_tool(name_override=...))"
            )
        self.declarations[tool] = declaration
        if settings:
            self.tool_settings[tool] = settings

    # --- one tool call ------------------------------------------------------------------
    def _invocation_id(self) -> str:
        return f"{self._invocation_prefix}-{next(self._invocations)}"

    def _begin(self) -> _InFlight:
        with self._lock:
            self._active += 1
        self.last_journaled = time.monotonic()  # the INTENT about to be written renews the lease
        return _InFlight()

    def _end(self, token: _InFlight) -> None:
        self.last_journaled = time.monotonic()
        with self._lock:
            if not token.ended:
                token.ended = True
                self._active -= 1

    def _intent_payload(
        self, decl: ToolDeclaration, args: dict[str, Any], raw_args: str | None,
        request_id: str | None = None,
        call_id: str | None = None,
    ) -> dict[str, Any]:
        frame = current_call.get() or self.resume_parents.pop(call_id, None)
        payload: dict[str, Any] = {
            "args": args,  # converted by the journal; unencodable -> INTENT fails, body not run
            "reversibility": _REVERSIBILITY_TEXT[decl.reversibility],
        }
        if request_id is not None:
            payload["request_id"] = request_id  # the approval this call uses up
        if raw_args is not None:
            payload["raw_args"] = raw_args
        if decl.declaration_id is not None:
            payload["declaration"] = decl.declaration_id
        if frame is not None and frame.saga is self:
            payload["parent_call_id"] = frame.call_id
            payload["parent_intent_seq"] = frame.intent_seq
        return payload

    async def _write_intent(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, args: dict[str, Any],
        raw_args: str | None, invocation: str, request_id: str | None = None,
    ) -> JournalEntry:
        payload = self._intent_payload(decl, args, raw_args, request_id, call_id)
        try:
            return await self.journal.append(
                self.saga_id, Phase.INTENT, write_key=f"{invocation}:intent", tool=tool,
                call_id=call_id, payload=payload,
            )
        except Exception as exc:  # noqa: BLE001 - retried or failed closed there
            return await self._intent_after_failure(exc, tool, call_id, payload, invocation)

    async def _intent_after_failure(
        self, exc: Exception, tool: str, call_id: str | None, payload: dict[str, Any],
        invocation: str,
    ) -> JournalEntry:
        """The first INTENT append raised ``exc``: retry a storage failure once, else fail closed.

        Raises:
            JournalWriteError: the INTENT is not written; the body must not run.
        """
        write_key = f"{invocation}:intent"
        try:
            if not isinstance(exc, JournalWriteError):
                raise exc
            # The write may have landed with its acknowledgement lost: a retry with the same
            # write key returns the stored entry if so (and writes it if not).
            return await self.journal.append(
                self.saga_id, Phase.INTENT, write_key=write_key, tool=tool,
                call_id=call_id, payload=payload,
            )
        except Exception as final:
            # Fail closed: the body will not run. Journal why, if the journal is reachable; the
            # entry names the INTENT's write key, so a reader can pair it with an INTENT that
            # landed after all.
            reason = _describe(final)
            seq = None
            try:
                entry = await self.journal.append(
                    self.saga_id, Phase.FAILED, write_key=f"{invocation}:outcome", tool=tool,
                    call_id=call_id,
                    payload={"intent_seq": None, "intent_write_key": write_key, "not_run": True,
                             "error": f"INTENT not written, body not run: {reason}"},
                )
                seq = entry.seq
            except Exception:  # noqa: BLE001 - the journal is down; the raise below says so
                pass
            self._note_failure(FailureRecord(seq, tool, call_id, f"INTENT not written: {reason}", final))
            raise JournalWriteError(
                f"{tool}: INTENT could not be journaled ({reason}); the tool was not run"
            ) from final

    async def _refuse_other_declaration(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, invocation: str
    ) -> None:
        """A call under a tool name already bound to another declaration in this saga (an agent
        run inside a tool body, which no walk of the agent graph sees in advance): its undo
        could be mistaken for the other tool's, so it is journaled FAILED, fails the saga, and
        raises before its body runs.

        Raises:
            ConfigurationError: always.
        """
        known = self.declarations[tool]
        error = ConfigurationError(
            f"{tool} (call {call_id}) refused: the name {tool!r} is already bound to "
            f"{known.declaration_id or known.name} in saga {self.saga_id}, and this call is "
            f"{decl.declaration_id or decl.name}; tool names must be unique across every agent "
            "of a saga, nested runs included (use function_tool(name_override=...)); the tool "
            "was not run"
        )
        await self._refused_before_intent(
            error, tool, call_id, invocation, {"declaration": decl.declaration_id})

    async def _refused_before_intent(
        self, error: Exception, tool: str, call_id: str | None, invocation: str,
        extra: dict[str, Any],
    ) -> NoReturn:
        """Journal FAILED (``not_run``) for a call refused before its INTENT, fail the saga,
        and raise ``error``."""
        seq = None
        try:
            entry = await self.journal.append(
                self.saga_id, Phase.FAILED, write_key=f"{invocation}:outcome", tool=tool,
                call_id=call_id,
                payload={"intent_seq": None, "not_run": True, "error": str(error), **extra},
            )
            seq = entry.seq
        finally:
            self._note_failure(FailureRecord(seq, tool, call_id, str(error), error))
        raise error

    async def _check_grant(
        self, tool: str, call_id: str | None, args: dict[str, Any], invocation: str
    ) -> str:
        """Execution-time approval check of an irreversible call (fail closed).

        The call runs only when the saga's journal holds APPROVED and CONSUMED for this call
        and the SHA-256 of the canonical arguments the body is about to receive, not yet used by
        an INTENT (``core.grants``). Grants come from the journal, never from memory, so a
        ``RunState`` approved through the SDK's own API, a forged snapshot, or a decision never
        consumed by a resume runs nothing. Anything else is journaled as FAILED, fails the saga,
        and raises :class:`~sagacity_agents.errors.ApprovalError`.

        Returns:
            The request id the call uses up (journaled in its INTENT).
        """
        digest = sha256_hex(canonical_bytes(args))
        try:
            # Acted on only once it verifies (and, with a keyring, its decisions' signatures).
            entries = await verified_entries(self.journal, self.saga_id, self.evidence)
        except Exception as exc:  # noqa: BLE001 - fail closed: no evidence, no run
            request_id, problem = None, f"the journal could not be read or verified ({_describe(exc)})"
        else:
            with self._lock:
                request_id, problem = grant_for_call(
                    entries, tool=tool, call_id=call_id, args_hash=digest,
                    claimed=self._claimed_requests,
                )
                if request_id is not None:
                    self._claimed_requests.add(request_id)
                    return request_id
        error = ApprovalError(f"{tool} (call {call_id}) refused: {problem}; the tool was not run")
        await self._refused_before_intent(
            error, tool, call_id, invocation, {"args": _encode_or_marker(args), "args_hash": digest})

    def _outcome(
        self, decl: ToolDeclaration, intent: JournalEntry, frame: CallFrame, result: Any = None,
        exc: BaseException | None = None, elapsed: float = 0.0,
    ) -> tuple[Phase, dict[str, Any], FailureRecord | None]:
        tool = intent.tool or ""
        base: dict[str, Any] = {"intent_seq": intent.seq}
        if exc is not None:
            cancelled = isinstance(exc, asyncio.CancelledError)
            timeout = self.tool_settings.get(tool, {}).get("timeout")
            timed_out = bool(cancelled and timeout is not None and elapsed >= float(timeout) * 0.999)
            error = _describe(exc)
            if timed_out:
                error = f"timed out after {timeout} s (cancelled by the tool's own timeout)"
            elif cancelled:
                error = "cancelled before it finished (CancelledError)"
            payload = {**base, "error_type": type(exc).__qualname__, "error": error,
                       "cancelled": cancelled, "timed_out": timed_out}
            if frame.has_undo_data:
                # The body recorded the state before its change, then failed: the change may
                # have happened. Compensation runs the undo for such an entry too.
                payload["undo_data"] = frame.undo_data
            return Phase.FAILED, payload, FailureRecord(None, tool, intent.call_id, error, exc)
        try:
            verdict = decl.verdict(result)
        except Exception as classify_exc:  # noqa: BLE001 - see below
            # The body returned, so its effect may exist: journal it as EXECUTED (undoable) and
            # fail the saga, rather than hide an effect behind FAILED.
            error = f"classifier raised {_describe(classify_exc)}"
            payload = {**_with_result(base, result), "classifier_error": error}
            if frame.has_undo_data:
                payload["undo_data"] = frame.undo_data
            return Phase.EXECUTED, payload, FailureRecord(
                None, tool, intent.call_id, error, classify_exc
            )
        # Converted once, by the journal; a value with no encoding is marked on the retry in
        # _write_outcome (never a repr).
        payload = _with_result(base, result)
        if frame.has_undo_data:
            payload["undo_data"] = frame.undo_data
        if verdict is Verdict.REFUSED:
            return Phase.REFUSED, payload, None
        if verdict is Verdict.FAILED:
            payload["error"] = "result classified as failed"
            return Phase.FAILED, payload, FailureRecord(None, tool, intent.call_id, payload["error"])
        return Phase.EXECUTED, payload, None

    async def _write_outcome(
        self, intent: JournalEntry, phase: Phase, payload: dict[str, Any],
        failure: FailureRecord | None,
    ) -> None:
        kwargs: dict[str, Any] = {
            "write_key": f"{intent.write_key.rsplit(':', 1)[0]}:outcome",
            "tool": intent.tool,
            "call_id": intent.call_id,
        }
        seq = None
        try:
            try:
                entry = await self.journal.append(self.saga_id, phase, payload=payload, **kwargs)
            except EncodingError:
                payload = {
                    key: (_encode_or_marker(value) if key in ("result", "undo_data") else value)
                    for key, value in payload.items()
                }
                entry = await self.journal.append(self.saga_id, phase, payload=payload, **kwargs)
            seq = entry.seq
        except Exception:  # noqa: BLE001 - the outcome is kept and retried by settle()
            self._keep_unwritten(phase, payload, kwargs)
        if failure is not None:
            self._note_failure(
                FailureRecord(seq, failure.tool, failure.call_id, failure.error, failure.exception)
            )

    def _keep_unwritten(self, phase: Phase, payload: dict[str, Any], keys: dict[str, Any]) -> None:
        """Hold an outcome the journal refused; settle() retries it with the same write key."""
        with self._lock:
            self._unwritten.append((phase, {"payload": payload, **keys}))

    def _note_failure(self, record: FailureRecord) -> None:
        with self._lock:
            self.failures.append(record)

    # --- refusing effects after a failure (REFUSE_EFFECTS, saga_tool_guardrail) ------------
    def refuses_effects(self, decl: ToolDeclaration | None) -> bool:
        """Whether the REFUSE_EFFECTS policy refuses a call of a tool declared ``decl`` now: the
        saga has failed and the tool may change the world (``decl`` ``None``: undeclared)."""
        return bool(self.failures) and self.policy is FailurePolicy.REFUSE_EFFECTS and changes_world(decl)

    async def refuse_call(
        self, decl: ToolDeclaration | None, tool: str, call_id: str | None,
        args: dict[str, Any] | None, *, raw_args: str | None = None, refused_by: str,
        intent: JournalEntry | None = None,
    ) -> str:
        """Refuse one call because the saga has failed: journal REFUSED (the body is not run, no
        INTENT is written) and return the message for the model (:meth:`SagaVerdict.model_message`).

        Args:
            decl: the tool's declaration (``None``: undeclared).
            tool, call_id: the call.
            args: validated arguments when known (the wrapper), else ``None``.
            raw_args: the raw argument text (guardrails see only that).
            refused_by: who refused it (journaled): ``"policy"`` or a guardrail's name.
            intent: the call's INTENT when it was written before the refusal (the saga failed
                while it was being written): the REFUSED entry is then its one outcome.

        Returns:
            The message the model gets instead of the tool's output. It is returned even when the
            REFUSED entry cannot be written (the entry is then held and retried like an outcome).
        """
        message = (await read_verdict(self)).model_message()
        payload: dict[str, Any] = {
            "intent_seq": intent.seq if intent else None, "not_run": True, "result": message,
            "refused_by": refused_by,
            "reason": "saga failed",
            "reversibility": _REVERSIBILITY_TEXT[decl.reversibility] if decl else "undeclared",
        }
        if args is not None:
            payload["args"] = _encode_or_marker(args)
        if raw_args is not None:
            payload["raw_args"] = raw_args
        invocation = intent.write_key.rsplit(":", 1)[0] if intent else self._invocation_id()
        keys: dict[str, Any] = {"write_key": f"{invocation}:outcome", "tool": tool, "call_id": call_id}
        try:
            await self.journal.append(self.saga_id, Phase.REFUSED, payload=payload, **keys)
        except Exception:  # noqa: BLE001 - the call is refused anyway; the entry is retried by settle()
            self._keep_unwritten(Phase.REFUSED, payload, keys)
        return message

    async def run_call(
        self,
        decl: ToolDeclaration,
        tool: str,
        call_id: str | None,
        args: dict[str, Any],
        body: Callable[[], Awaitable[T]],
        *,
        raw_args: str | None = None,
    ) -> T:
        """Journal one async call around ``body``: INTENT, then EXECUTED / REFUSED / FAILED.

        Args:
            decl: the tool's declaration.
            tool: tool name as the model saw it.
            call_id: the model's call id.
            args: the validated arguments the body receives (journaled in INTENT).
            body: runs the tool body.
            raw_args: the raw argument text, journaled only for tools whose validated
                arguments are not available (fallback wrapping).

        Returns:
            Whatever ``body`` returned, even when the outcome could not be journaled.

        Raises:
            JournalWriteError: the INTENT could not be written; ``body`` was not run.
            BaseException: whatever ``body`` raised (including ``CancelledError``), re-raised
                after the FAILED entry is written.
        """
        if self.failures and self.refuses_effects(decl):
            return await self.refuse_call(decl, tool, call_id, args, raw_args=raw_args,  # type: ignore[return-value]
                                          refused_by="policy")
        done = self._begin()
        invocation = self._invocation_id()
        try:
            if self.declarations.setdefault(tool, decl) is not decl:
                await self._refuse_other_declaration(decl, tool, call_id, invocation)
            if decl.reversibility is Reversibility.IRREVERSIBLE:
                request_id = await self._check_grant(tool, call_id, args, invocation)
            else:
                request_id = None
            payload = self._intent_payload(decl, args, raw_args, request_id, call_id)
            try:
                # The common case, written out: one journal call, no helper coroutine.
                intent = await self.journal.append(
                    self.saga_id, Phase.INTENT, write_key=f"{invocation}:intent", tool=tool,
                    call_id=call_id, payload=payload,
                )
            except Exception as exc:  # noqa: BLE001 - retried (lost ack) or failed closed there
                intent = await self._intent_after_failure(exc, tool, call_id, payload, invocation)
        except BaseException:
            self._end(done)
            raise
        if self.refuses_effects(decl):
            # The saga failed while the INTENT was being written (a call of the same turn): the
            # body must not run after the failure; the REFUSED entry is the call's outcome.
            try:
                return await self.refuse_call(decl, tool, call_id, args, raw_args=raw_args,  # type: ignore[return-value]
                                              refused_by="policy", intent=intent)
            finally:
                self._end(done)
        frame = CallFrame(self, tool, call_id, intent.seq)
        token = current_call.set(frame)
        started = time.monotonic()
        try:
            result = await body()
        except BaseException as exc:
            phase, payload, failure = self._outcome(decl, intent, frame, exc=exc,
                                                    elapsed=time.monotonic() - started)
            await self._finish_write(done, intent, phase, payload, failure)
            raise
        finally:
            current_call.reset(token)
        phase, payload, failure = self._outcome(decl, intent, frame, result=result)
        if failure is not None:
            await self._finish_write(done, intent, phase, payload, failure)
            return result
        if self._outcomes_behind:
            self._write_behind(done, intent, phase, payload)
            return result
        # The common case, written out; every kind of trouble goes where _write_outcome sends it.
        outcome: dict[str, Any] = {"write_key": f"{invocation}:outcome", "tool": tool, "call_id": call_id}
        try:
            await self.journal.append(self.saga_id, phase, payload=payload, **outcome)
        except EncodingError:
            await self._finish_write(done, intent, phase, payload, failure)  # marks the value
            return result
        except asyncio.CancelledError:
            task = asyncio.ensure_future(self._write_outcome(intent, phase, payload, failure))
            task.add_done_callback(lambda _t: self._end(done))
            raise
        except Exception:  # noqa: BLE001 - kept and retried by settle() with the same write key
            self._keep_unwritten(phase, payload, outcome)
        self._end(done)
        return result

    def _write_behind(
        self, done: _InFlight, intent: JournalEntry, phase: Phase, payload: dict[str, Any]
    ) -> None:
        """Write a successful call's outcome behind it: the result goes back to the agent now,
        the entry follows (after the previous outcome written behind, so outcomes keep the order
        in which calls ended). The call counts as in flight until the entry is written or held
        unwritten, so :meth:`settle` (before compensation, a verdict, the end of a run) waits
        for it. Only for successful calls: a failure is noted before the call returns."""
        previous = self._behind_last

        async def write() -> None:
            try:
                if previous is not None and not previous.done():
                    await asyncio.wait((previous,))
                await self._write_outcome(intent, phase, payload, None)
            finally:
                self._end(done)

        task = asyncio.ensure_future(write())
        self._behind.add(task)
        task.add_done_callback(self._behind.discard)
        self._behind_last = task

    async def outcomes_written(self) -> None:
        """Wait until every outcome written behind its call is in the journal or held unwritten
        (at most ``in_flight_timeout`` seconds); returns at once when none is pending."""
        if self._behind:
            await asyncio.wait(tuple(self._behind), timeout=self.in_flight_timeout)

    async def _finish_write(
        self, done: _InFlight, intent: JournalEntry, phase: Phase,
        payload: dict[str, Any], failure: FailureRecord | None,
    ) -> None:
        try:
            await self._write_outcome(intent, phase, payload, failure)
        except asyncio.CancelledError:
            # Cancelled during the write (the SDK gives cancelled siblings ~0.25 s): finish it as
            # a task of its own, with the same write key (harmless if the first attempt landed),
            # and count the call in flight until it has, so settle() waits for it.
            task = asyncio.ensure_future(self._write_outcome(intent, phase, payload, failure))
            task.add_done_callback(lambda _t: self._end(done))
            raise
        except BaseException:
            self._end(done)
            raise
        self._end(done)

    def run_call_sync(
        self,
        decl: ToolDeclaration,
        tool: str,
        call_id: str | None,
        args: dict[str, Any],
        body: Callable[[], T],
        *,
        raw_args: str | None = None,
    ) -> T:
        """Journal one sync call around ``body``, from a worker thread.

        Journal writes are handed to the saga's event loop and awaited by this thread, so a sync
        body the framework cannot stop still gets its real outcome journaled when it ends.

        Raises:
            SagaStateError: called on the event loop's own thread (it would deadlock).
            JournalWriteError: the INTENT could not be written; ``body`` was not run.
            BaseException: whatever ``body`` raised, re-raised after the FAILED entry is written.
        """
        loop = self.loop
        if loop is None:
            raise SagaStateError("saga is not open")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise SagaStateError("run_call_sync was called on the event loop thread")

        def on_loop(coro: Awaitable[Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

        if self.failures and self.refuses_effects(decl):
            return on_loop(self.refuse_call(decl, tool, call_id, args, raw_args=raw_args,  # type: ignore[no-any-return]
                                            refused_by="policy"))
        done = self._begin()
        try:
            invocation = self._invocation_id()
            if self.declarations.setdefault(tool, decl) is not decl:
                on_loop(self._refuse_other_declaration(decl, tool, call_id, invocation))
            request_id = None
            if decl.reversibility is Reversibility.IRREVERSIBLE:
                request_id = on_loop(self._check_grant(tool, call_id, args, invocation))
            intent = on_loop(self._write_intent(decl, tool, call_id, args, raw_args, invocation,
                                                request_id))
        except BaseException:
            self._end(done)
            raise
        if self.refuses_effects(decl):  # failed while the INTENT was written: see run_call
            try:
                return on_loop(self.refuse_call(decl, tool, call_id, args, raw_args=raw_args,  # type: ignore[no-any-return]
                                                refused_by="policy", intent=intent))
            finally:
                self._end(done)
        frame = CallFrame(self, tool, call_id, intent.seq)
        token = current_call.set(frame)
        try:
            try:
                result = body()
            except BaseException as exc:
                phase, payload, failure = self._outcome(decl, intent, frame, exc=exc)
                on_loop(self._write_outcome(intent, phase, payload, failure))
                raise
            finally:
                current_call.reset(token)
            phase, payload, failure = self._outcome(decl, intent, frame, result=result)
            on_loop(self._write_outcome(intent, phase, payload, failure))
            return result
        finally:
            self._end(done)

    # --- calls journaled from outside the body (fallback for tools we cannot decorate) ----
    async def begin_external_call(
        self, decl: ToolDeclaration, tool: str, call_id: str | None, raw_args: str
    ) -> JournalEntry:
        """Journal the INTENT of a call whose body we cannot wrap (raw arguments journaled).

        The outcome comes later through :meth:`end_external_call`. The call is not counted in
        flight meanwhile: the seams that bring its outcome run before the SDK moves on, so
        waiting could never bring a late one (an INTENT left without outcome is in doubt).

        Raises:
            ApprovalError: an irreversible call without a consumed approval of these arguments
                (journaled FAILED; the caller must not run the tool).
            JournalWriteError: the INTENT could not be written (the caller must not run the tool).
        """
        invocation = self._invocation_id()
        request_id = None
        if decl.reversibility is Reversibility.IRREVERSIBLE:
            # The approval hash of a tool we cannot decorate covers its canonical raw arguments.
            request_id = await self._check_grant(tool, call_id, _raw_args_value(raw_args), invocation)
        intent = await self._write_intent(decl, tool, call_id, {}, raw_args, invocation, request_id)
        self.last_journaled = time.monotonic()
        with self._lock:
            self._external[call_id] = (decl, intent)
        return intent

    def adopt_external_call(self, intent: JournalEntry) -> None:
        """Register a fallback call's INTENT read from the journal (a paused run resumed in this
        process) as waiting for its outcome, so :meth:`end_external_call` journals it once."""
        with self._lock:
            self._external.setdefault(intent.call_id, (None, intent))

    def has_external_call(self, call_id: str | None) -> bool:
        """Whether a fallback call with this call id is waiting for its outcome."""
        with self._lock:
            return call_id in self._external

    def end_external_call(
        self, call_id: str | None, *, result: Any = None, exc: BaseException | None = None,
        declaration: ToolDeclaration | None = None, not_run: bool = False,
    ) -> asyncio.Future[None] | None:
        """Journal the outcome of a fallback call (EXECUTED / REFUSED / FAILED), once.

        Safe to call from sync code on the loop thread (a failure formatter): the write is
        scheduled as a task, tracked as in flight. Returns that task, or ``None`` when no such
        call is pending (its outcome was already recorded).

        Args:
            declaration: the tool's declaration (for its classifier), when the caller has it.
            not_run: with ``exc``: the body never started (e.g. an ``on_tool_start`` raised).
        """
        with self._lock:
            pending = self._external.pop(call_id, None)
        if pending is None:
            return None
        stored, intent = pending
        decl = declaration or stored or self.declarations.get(intent.tool or "")
        if decl is None:  # a reloaded call whose tool this process never met: no classifier
            decl = ToolDeclaration(name=intent.tool or "", reversibility=Reversibility.READ_ONLY)
        frame = CallFrame(self, intent.tool or "", call_id, intent.seq)
        phase, payload, failure = self._outcome(decl, intent, frame, result=result, exc=exc)
        if not_run:
            payload["not_run"] = True
        if failure is not None:
            # Mark the saga failed now (synchronously), not when the write lands.
            self._note_failure(failure)
        done = self._begin()
        task = asyncio.ensure_future(self._write_outcome(intent, phase, payload, None))
        task.add_done_callback(lambda _t: self._end(done))
        return task

    def pending_external_calls(self) -> int:
        """How many fallback calls have an INTENT and no outcome yet in this process."""
        with self._lock:
            return len(self._external)

    # --- end of a run -------------------------------------------------------------------
    def fail_now(self, tool: str, call_id: str | None, reason: str) -> None:
        """Mark the saga failed without a failed call (e.g. a rejection under a policy that
        fails the saga); with :attr:`FailurePolicy.STOP` the run stops at its next step."""
        self._note_failure(FailureRecord(None, tool, call_id, reason))

    async def settle(self) -> int:
        """Wait for calls still in flight (up to ``in_flight_timeout`` seconds), then retry any
        outcome write that failed earlier (same write key: harmless if it had landed).

        Returns:
            How many calls were still running when the wait gave up (their INTENTs are in doubt).
        """
        # Calls end on worker threads too; a short poll only runs while calls are still in
        # flight, i.e. after a run ended badly, never on the hot path.
        await self.outcomes_written()
        deadline = time.monotonic() + self.in_flight_timeout
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        with self._lock:
            unwritten, self._unwritten = self._unwritten, []
        for phase, kwargs in unwritten:
            try:
                await self.journal.append(self.saga_id, phase, **kwargs)
            except Exception:  # noqa: BLE001 - still kept; reported as in doubt
                with self._lock:
                    self._unwritten.append((phase, kwargs))
        with self._lock:
            return self._active

    @property
    def unwritten_outcomes(self) -> list[dict[str, Any]]:
        """Outcomes the journal refused and that are held in memory (journal down)."""
        with self._lock:
            return [{"phase": p.value, **k} for p, k in self._unwritten]

    async def fail(self, reason: str) -> None:
        """Journal SAGA_FAILED with ``reason`` (once per saga: a saga already marked failed, e.g.
        by a process that died while compensating, keeps its first reason).

        Raises:
            JournalError: the entry could not be written and the saga is not marked failed.
        """
        try:
            await self.journal.append(
                self.saga_id, Phase.SAGA_FAILED, write_key="saga:failed", payload={"reason": reason}
            )
        except JournalWriteError:
            entries = await self.journal.entries(self.saga_id)
            if not any(e.phase is Phase.SAGA_FAILED for e in entries):
                raise

    async def compensate(self) -> CompensationReport:
        """Settle in-flight calls, then undo EXECUTED compensatable effects in reverse order.

        Repeats while calls that were still running during a pass have since ended, so an
        outcome that arrives late is still undone or reported.

        Returns:
            The compensation report (also kept on :attr:`report`).
        """
        still_running = await self.settle()
        report = await compensate(self.journal, self.saga_id, self.declarations, evidence=self.evidence)
        while still_running:
            before = still_running
            still_running = await self.settle()
            if still_running >= before:
                break
            report = _merge(report, await compensate(self.journal, self.saga_id, self.declarations,
                                                     evidence=self.evidence))
        self.report = report
        return report

    async def close(self, status: SagaStatus, **extra: Any) -> None:
        """End the run (RUN_ENDED) and journal SAGA_CLOSED with the final status and report.

        Closed is terminal: nothing is appended after it. Only COMPLETED and COMPENSATED sagas
        are closed; one that ended IN_DOUBT or COMPENSATION_FAILED stays open for recovery.
        A failed write is retried once (same write key), then recorded in
        :attr:`journal_errors`: the status stands, the journal shows the saga still open, and
        ``Sagacity.close_saga`` / ``recover`` can close it later. When :attr:`evidence` signs
        checkpoints, the saga's head is then signed and stored (a failure is recorded in
        :attr:`journal_errors` too).

        Raises:
            ValueError: ``status`` is not a closing status.
        """
        if status not in (SagaStatus.COMPLETED, SagaStatus.COMPENSATED):
            raise ValueError(f"a saga is closed COMPLETED or COMPENSATED, not {status.value}")
        payload: dict[str, Any] = {"status": status.value, **extra}
        if self.report is not None:
            payload["report"] = self.report.to_dict()
        closing: dict[str, Any] = {"phase": Phase.SAGA_CLOSED, "write_key": "saga:closed",
                                   "payload": payload}
        stored = await self._release_lease(status, closing)
        self.status = status
        self._closed = True
        # SAGA_CLOSED alone (retried once, same write key) when it did not go with RUN_ENDED.
        for attempt in () if stored else (1, 2):
            try:
                await self.journal.append(self.saga_id, **closing)
                break
            except JournalError as exc:
                if attempt == 2:
                    self.journal_errors.append(f"SAGA_CLOSED not journaled: {_describe(exc)}")
                    return
        if self.evidence is not None and self.evidence.signs_checkpoints:
            try:
                await self.evidence.checkpoint(self.journal, self.saga_id)
            except Exception as exc:  # noqa: BLE001 - the saga's status stands; reported
                self.journal_errors.append(f"checkpoint not written: {_describe(exc)}")

    async def _end_open(self, status: SagaStatus) -> SagaStatus:
        """End the run and leave the saga open with ``status`` (more runs, approvals, or
        recovery to come)."""
        await self.end_run(status)
        self.status = status
        return status

    async def finish(self, *, error: BaseException | None, close: bool) -> SagaStatus:
        """Decide how one run of the saga ended, compensating when it ended badly, and end the
        run (its lease is released).

        A run ended badly when it raised (``error``) or any call failed; then the saga is
        compensated and, when every effect was undone or kept on purpose (COMPENSATED), closed.
        A saga left COMPENSATION_FAILED or IN_DOUBT is *not* closed: it takes no more runs and
        waits, open, for :meth:`~sagacity_agents.Sagacity.recover` (design.md, "Runs, leases and
        the end of a saga"). A run that ended well closes the saga COMPLETED when ``close`` is
        true (IN_DOUBT, open, if some call has no outcome), and leaves it OPEN otherwise.

        Returns:
            The saga's status after this run.
        """
        if error is not None or self.failed:
            await self.settle()
            if self.failures:
                first = self.failures[0]
                reason = f"{first.tool} (call {first.call_id}) failed: {first.error}"
                if error is not None and not isinstance(error, SagaFailedError):
                    reason += f"; run raised {_describe(error)}"
            else:
                reason = f"run raised {_describe(error)}" if error is not None else "failed"
            try:
                await self.fail(reason)
            except JournalError as exc:  # compensation must not wait for the journal's health
                self.journal_errors.append(f"SAGA_FAILED not journaled: {_describe(exc)}")
            report = await self.compensate()
            self.in_doubt = report.in_doubt
            if report.failed:
                status = SagaStatus.COMPENSATION_FAILED
            elif report.in_doubt or self.unwritten_outcomes or self.journal_errors:
                status = SagaStatus.IN_DOUBT
            else:
                status = SagaStatus.COMPENSATED
            if status is SagaStatus.COMPENSATED:
                await self.close(status)
                return status
            return await self._end_open(status)
        await self.settle()
        if close:
            if self._fresh_id:
                # Every entry of a saga this object created was written here: a call without
                # outcome would still be in flight (settle() waited) or held unwritten.
                in_doubt = bool(self._active) or bool(self.pending_external_calls())
            else:
                in_doubt = bool(SagaLedger(await self.journal.entries(self.saga_id)).in_doubt())
            if in_doubt or self.unwritten_outcomes:  # name every call in doubt (never on the hot path)
                self.in_doubt = await self._calls_in_doubt()
                return await self._end_open(SagaStatus.IN_DOUBT)
            await self.close(SagaStatus.COMPLETED)
            return SagaStatus.COMPLETED
        return await self._end_open(SagaStatus.OPEN)


    async def _calls_in_doubt(self) -> tuple[CompensationItem, ...]:
        """INTENTs without outcome, from the journal, and calls whose outcome is held unwritten
        (from memory: the journal may be the reason they are)."""
        items: list[CompensationItem] = []
        try:
            entries = await self.journal.entries(self.saga_id)
            items = [CompensationItem(e.seq, e.tool, e.call_id, "INTENT without outcome")
                     for e in SagaLedger(entries).in_doubt()]
        except Exception:  # noqa: BLE001 - the journal is down; memory still names some calls
            pass
        seqs = {i.seq for i in items}
        with self._lock:
            for phase, kwargs in self._unwritten:
                seq = (kwargs.get("payload") or {}).get("intent_seq")
                if isinstance(seq, int) and seq not in seqs:
                    items.append(CompensationItem(seq, kwargs.get("tool"), kwargs.get("call_id"),
                                                  f"{phase.value} outcome not journaled"))
        return tuple(sorted(items, key=lambda i: i.seq))


def _merge(first: CompensationReport, second: CompensationReport) -> CompensationReport:
    seen = {i.seq for i in first.undone + first.failed}
    return CompensationReport(
        undone=first.undone + tuple(i for i in second.undone if i.seq not in seen),
        failed=first.failed + tuple(i for i in second.failed if i.seq not in seen),
        kept_irreversible=second.kept_irreversible,
        no_undo=second.no_undo,
        in_doubt=second.in_doubt,
        approved_not_run=second.approved_not_run,
    )


