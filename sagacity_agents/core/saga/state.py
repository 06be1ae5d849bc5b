"""The state of one live saga in this process, shared by every part of :class:`~.saga.Saga`:
the journal it writes to, its declarations, failures and held outcomes, the calls in flight,
and the frame of the call running in the current context.

:class:`SagaState` is the base of the saga's layers (``lifecycle`` -> ``outcomes`` ->
``refusals`` -> ``calls`` -> ``external`` -> ``closing``, each the base class of the next); each
layer uses only itself and the layers before it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError, LeaseLostError
from ..compensation import CompensationItem, CompensationReport
from ..declarations import ToolDeclaration, interchangeable
from ..entries import JournalEntry, Phase
from ..evidence import Evidence
from ..fence import FencedJournal
from ..journal import Journal, capabilities_of
from ..lease import DEFAULT_LEASE_SECONDS, LeaseKeeper, check_lease_seconds, new_holder_id
from ..undo import StopSignal
from .status import FailurePolicy, FailureRecord, SagaStatus

__all__ = ["CallFrame", "SagaState"]


class InFlight:
    """One call counted in flight; ended exactly once."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False


@dataclass
class CallFrame:
    """The call currently running in this context (set by the wrapper around the body)."""

    saga: SagaState
    """The saga the call belongs to."""
    tool: str
    """Tool name."""
    call_id: str | None
    """The model's call id."""
    intent_seq: int
    """Sequence number of the call's INTENT."""
    undo_data: Any = None
    """What the body handed to :func:`record_undo_data` (the encoding marker when it has no
    canonical encoding)."""
    has_undo_data: bool = False
    """Whether the body called :func:`record_undo_data`."""
    undo_data_error: str | None = None
    """Why the undo data could not be journaled (no canonical encoding), else ``None``."""


class SagaState:
    """The fields of a live saga and the bookkeeping every layer shares (see :class:`~.saga.Saga`
    for the arguments)."""

    verified: list[JournalEntry] | None = None
    """The saga's verified entries up to this run's RUN_STARTED, when the caller verified them
    and nothing came between (``begin_run(verified=...)``): compensation and the close use them
    instead of reading the journal again."""

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
        lease_seconds = check_lease_seconds(lease_seconds)
        self.evidence = evidence
        self._fresh_id = saga_id is None  # a new random id: nothing in the journal to read
        # Invocation ids (write-key prefixes): random per Saga object, counted per call; unique
        # across processes and retries of a saga without a uuid4 per call.
        self._invocation_prefix = uuid.uuid4().hex[:16]
        self._invocations = itertools.count(1)
        self.saga_id = saga_id or uuid.uuid4().hex
        self.fence: int | None = None
        """The seq of the RUN_STARTED whose lease this object holds (``None``: none); every
        entry it writes carries it (``core.fence``)."""
        self.lease_lost: LeaseLostError | None = None
        """Set when this object's run lease was found taken over (by the journal's fence, or by
        the lease keeper): the run starts no new tool body, compensates nothing and never
        closes the saga; it ends with :class:`~sagacity_agents.errors.LeaseLostError`."""
        self.unjournaled: list[str] = []
        """Outcomes of this object's calls or undos that happened after its lease was lost and
        that the journal refused even late (the saga was closed meanwhile): effects that exist
        and are in no entry. Named in the run's :class:`LeaseLostError`."""
        self.journal: Journal = FencedJournal(journal, self.saga_id, lambda: self.fence,
                                              self._lose_lease, self.unjournaled.append)
        """The saga's journal, fenced: every append carries :attr:`fence`."""
        self.policy = FailurePolicy(policy)
        self.in_flight_timeout = in_flight_timeout
        self.metadata = metadata or {}
        self.declarations: dict[str, ToolDeclaration] = {}
        """Tool name -> the first declaration bound or met under it (every one is journaled by
        id; compensation looks undos up by id)."""
        self.agent_declarations: dict[tuple[str | None, str], ToolDeclaration] = {}
        """(agent name, tool name) -> declaration, for tools of one name on several agents."""
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
        self._outcomes_behind = capabilities_of(self.journal).outcomes_behind
        self._behind: set[asyncio.Future[None]] = set()
        self._behind_last: asyncio.Future[None] | None = None
        self._claimed_requests: set[str] = set()  # approvals taken by calls of this object
        self.resumed_approvals: set[str | None] = set()
        """Call ids whose approval a resume of this object consumed (CONSUMED journaled): only
        such a call of an undeclared tool reads the journal for its grant (M-01)."""
        self.journal_errors: list[str] = []
        """Journal writes of the saga's own bookkeeping that failed (SAGA_FAILED, SAGA_CLOSED)."""
        self._external: dict[str | None, tuple[ToolDeclaration | None, JournalEntry]] = {}
        self._owned_external: set[str | None] = set()  # ended by their owner only (external.py)
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
        self.compensation_stop = StopSignal()
        """Set when the run's caller is cancelled while the saga compensates: the walk stops at
        its next step boundary (``core.compensation.compensate``)."""

    @property
    def failed(self) -> bool:
        """True once any call failed (raised, was cancelled, or was classified failed)."""
        return bool(self.failures)

    @property
    def closed(self) -> bool:
        """True once SAGA_CLOSED is journaled."""
        return self._closed

    def register(
        self, tool: str, declaration: ToolDeclaration, *, agent: str | None = None, **settings: Any
    ) -> None:
        """Make ``declaration``'s undo available for entries of ``tool`` and note the tool's
        framework settings (e.g. ``timeout`` seconds, used to say a cancellation was a timeout).

        Two agents of one saga may each have their own tool of one name (M-03): every INTENT
        journals its declaration id and agent, and compensation finds the undo by the INTENT's
        (agent, tool) when that declaration has the journaled id, else by the id when exactly one
        declaration of the saga has it; so the second declaration is kept beside the first
        (:meth:`declaration_for` by agent name) rather than refused. Name-only lookups
        (``declarations``) keep the first. (Two different tools of one name on one agent object
        are refused by the adapter's graph walk, which knows agents by identity.)

        Refused: a different declaration (another undo) under the same agent *name*, tool name
        and declaration id as one bound already (two agents of one name, each with a tool a
        factory made): neither the id nor the agent could tell their calls apart, and a wrong
        undo is worse than none.

        Args:
            tool: the tool's name as calls are journaled (the SDK's qualified name).
            declaration: its saga declaration.
            agent: the name of the agent that has the tool (``None``: not known).
            settings: the tool's framework settings.

        Raises:
            ConfigurationError: the clash above; give each tool its own id
                (``compensable(..., declaration_id=...)``) or the agents distinct names.
        """
        bound = self.agent_declarations.get((agent, tool))
        if (bound is not None and bound.declaration_id == declaration.declaration_id
                and not interchangeable(bound, declaration)):
            raise ConfigurationError(
                f"tool {tool!r}: two different declarations (different undos) under one "
                f"declaration id {declaration.declaration_id!r} on agents both named "
                f"{agent!r}; compensation could not tell their calls apart. Give each tool its "
                "own id with compensable(..., declaration_id=...) or the agents distinct names")
        self.agent_declarations.setdefault((agent, tool), declaration)
        self.declarations.setdefault(tool, declaration)
        if settings:
            self.tool_settings.setdefault(tool, settings)

    def note_declaration(self, tool: str, declaration: ToolDeclaration, agent: str | None) -> None:
        """A call of ``agent``'s ``tool`` is starting with ``declaration`` (the one its wrapper
        or guardrail carries): bind it, so compensation finds *this* undo for the call even
        when the agent was met only at run time (an agent run inside a tool body, M-03).

        Raises:
            ConfigurationError: as :meth:`register` (an agent of the same name bound another
                tool under this name and id: the calls could not be told apart).
        """
        if agent is None:
            self.declarations.setdefault(tool, declaration)
        elif self.agent_declarations.get((agent, tool)) is not declaration:
            self.register(tool, declaration, agent=agent)

    def declaration_for(self, tool: str, agent: str | None = None) -> ToolDeclaration | None:
        """The declaration bound for ``agent``'s tool ``tool``, else the first bound under that
        name (``None``: none)."""
        return self.agent_declarations.get((agent, tool)) or self.declarations.get(tool)

    def _lose_lease(self, lost: LeaseLostError) -> None:
        """Note that this object's lease was taken over (the first notice is kept)."""
        if self.lease_lost is None and (lost.fence is None or lost.fence == self.fence):
            self.lease_lost = lost

    def lease_lost_error(self) -> LeaseLostError | None:
        """The error that tells this object's run it lost its lease (``None``: it did not):
        which lease, to which run, and any outcome the journal refused even late."""
        lost = self.lease_lost
        if lost is None:
            return None
        error = LeaseLostError(
            f"saga {self.saga_id}: this run lost its lease (RUN_STARTED seq {lost.fence}) to "
            f"another run (RUN_STARTED seq {lost.current}); it stalled past the lease's "
            "expiry. It stops here: no further tool body, no compensation, no close; the "
            f"saga is the other run's (read it: sagacity journal show {self.saga_id})"
            + "".join(f". NOT IN THE JOURNAL: {what}" for what in self.unjournaled),
            saga_id=self.saga_id, fence=lost.fence, current=lost.current,
        )
        error.__cause__ = lost
        return error

    def check_lease(self) -> None:
        """Raise the lease loss noted, if any (before a tool body starts, at each run step).

        Raises:
            LeaseLostError: this object's run lease is another run's now
                (:meth:`lease_lost_error`).
        """
        error = self.lease_lost_error()
        if error is not None:
            raise error

    def _invocation_id(self) -> str:
        return f"{self._invocation_prefix}-{next(self._invocations)}"

    def _begin(self) -> InFlight:
        with self._lock:
            self._active += 1
        self.last_journaled = time.monotonic()  # the INTENT about to be written renews the lease
        return InFlight()

    def _end(self, token: InFlight) -> None:
        self.last_journaled = time.monotonic()
        with self._lock:
            if not token.ended:
                token.ended = True
                self._active -= 1

    def _keep_unwritten(self, phase: Phase, payload: dict[str, Any], keys: dict[str, Any]) -> None:
        """Hold an outcome the journal refused; settle() retries it with the same write key."""
        with self._lock:
            self._unwritten.append((phase, {"payload": payload, **keys}))

    def _note_failure(self, record: FailureRecord) -> None:
        with self._lock:
            self.failures.append(record)
