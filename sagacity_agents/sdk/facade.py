"""``Sagacity``: protect an agent run with a saga in one call, and the ``SagaResult`` it returns
(``sdk.results``; a streamed run is a ``SagaStream``, ``sdk.streaming``).

::

    sagacity = Sagacity("journal.db")                 # SQLite, the embedded default
    result = await sagacity.run(agent, "book a trip")  # any Runner.run keyword passes through
    if result.status is SagaStatus.COMPENSATED: ...
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agents import Agent, RunHooks, Runner

from ..core.approval import ApprovalStore, wait_for_decision
from ..core.chain import ChainHead, VerifyResult
from ..core.declarations import DEFAULT_CALL_DEADLINE, positive_seconds
from ..core.evidence import verify_sagas
from ..core.entries import JournalEntry
from ..core.journal import Journal
from ..core.lease import DEFAULT_LEASE_SECONDS, check_lease_seconds
from ..core.recovery import Recovered, Recovery
from ..core.authenticity import signing_view
from ..core.saga import FailurePolicy, Saga, SagaStatus, current_saga
from ..core.checkpoints import CheckpointStore
from ..core.data_keys import DataKeys, MasterKey, SagaSecrets
from ..core.protection import data_keys_of
from ..core.declarations import journaled_scopes
from ..core.signing import Keyring
from ..errors import ApprovalError, ConfigurationError, DeclarationError, SagacityError, SagaStateError
from ..settings import DEFAULT_JOURNAL_PATH, evidence_from, journal_path
from ..stores import approval_store_for, open_journal
from .approvals import ApprovalDesk
from .binding import bind_agent
from .hooks import SagaRunHooks
from .results import (
    Approver,
    Decision,
    SagaRecovered,
    SagaResult,
    StreamAbandoned,
    ask_approver,
    saga_result,
)
from .streaming import SagaStream
from .trace_warning import warn_if_sdk_traces_sensitive
from .tracing import saga_trace

__all__ = [
    "DEFAULT_JOURNAL_PATH",
    "Approver",
    "Decision",
    "SagaRecovered",
    "SagaResult",
    "SagaStream",
    "Sagacity",
    "StreamAbandoned",
]


def _journal_from(journal: Journal | str | Path | None) -> Journal:
    if journal is None:
        journal = journal_path()
    if isinstance(journal, (str, Path)):
        return open_journal(journal)
    return journal


class Sagacity:
    """The facade: runs an agent under a saga and returns a :class:`SagaResult`.

    Args:
        journal: a :class:`Journal`, a SQLite file path, a ``postgresql://`` URI (the
            ``postgres`` extra; migrate first with ``sagacity db migrate``), ``":memory:"`` for an
            in-memory journal, or ``None`` for ``$SAGACITY_DB`` or ``sagacity.db`` in the
            current directory.
        policy: what the first failed call does (default: stop the run at once).
        in_flight_timeout: seconds to wait for calls still running before compensating.
        approvals: the approval store; by default the one living with the journal (same
            PostgreSQL database and pools, same SQLite file, or in memory).
        approval_ttl: seconds before an approval request expires (``None``: never).
        fail_on_rejection: a rejected call fails the saga (which compensates) instead of
            letting the model carry on.
        lease_seconds: the run lease's duration (``core.lease``): a saga whose running process
            died can be taken over (run, resumed, recovered) this many seconds after its last
            entry; a running process renews it by journaling. A finite number > 0
            (``ValueError`` here otherwise).
        checkpoints: signed checkpoints: a ``CheckpointStore``, a directory, or a
            ``postgresql://`` URI (a table in its own schema, docs/postgres.md); ``None`` reads
            ``$SAGACITY_CHECKPOINTS`` (unset: none). A saga's head is signed at close and at
            every pause, and every saga is verified against its newest checkpoint before it is
            resumed, recovered, decided on, closed or run again.
        keyring: a ``Keyring`` or a keyring directory; ``None`` reads ``$SAGACITY_KEYRING``. It
            verifies checkpoints and decisions (approvals must then be signed) and, holding a
            private key, signs them. See docs/threat-model.md.
        decision_keys: key ids allowed to sign approvals and rejections; ``None`` reads
            ``$SAGACITY_DECISION_KEYS`` (unset: any key of the keyring).
        strict: refuse function tools nobody declared (``SagaRunHooks``' ``strict``): a run
            whose agent graph has one raises ``ConfigurationError`` naming each, before
            anything is journaled; one met only at run time is refused at its call. Default
            ``False``: such calls run and are journaled and reported as undeclared (README,
            "Undeclared tools", says why).
        call_deadline: seconds a protected call may take when neither its SDK tool
            (``function_tool(timeout=...)``) nor its declaration (``deadline=``) says; journaled
            in each INTENT as ``deadline_seconds`` (default 300,
            ``core.declarations.DEFAULT_CALL_DEADLINE``). A human may answer that a call in doubt
            did not run only after it (:meth:`resolve`). A finite number > 0 (``ValueError``
            here otherwise).
        data_key: the master key that wraps each saga's data key (docs/sensitive-data.md): its
            text (base64 of 32 random bytes, or 64 hex digits), a ``MasterKey`` or a
            ``DataKeys``; ``None`` reads ``$SAGACITY_DATA_KEY`` (unset: sensitive values are
            committed and masked, never stored, and an undo gets the masks). Never one of the
            keyring's signing keys.

    Raises:
        ConfigurationError: checkpoints without a keyring, a keyring that cannot be loaded, or
            a data key that is not 32 bytes.
    """

    def __init__(
        self,
        journal: Journal | str | Path | None = None,
        *,
        approvals: ApprovalStore | None = None,
        policy: FailurePolicy = FailurePolicy.STOP,
        in_flight_timeout: float = 30.0,
        approval_ttl: float | None = 24 * 3600,
        fail_on_rejection: bool = False,
        checkpoints: CheckpointStore | str | Path | None = None,
        keyring: Keyring | str | Path | None = None,
        decision_keys: Iterable[str] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        strict: bool = False,
        call_deadline: float = DEFAULT_CALL_DEADLINE,
        data_key: str | MasterKey | DataKeys | None = None,
    ) -> None:
        self.data_keys = data_keys_of(data_key)
        """The data keys every saga, recovery and answer of this instance commits and seals
        sensitive values with (``core.protection``; the same object for all of them)."""
        self.strict = strict
        try:
            self.call_deadline = positive_seconds(call_deadline, "call_deadline", "Sagacity")
        except DeclarationError as exc:
            raise ValueError(str(exc)) from None
        self.evidence = evidence_from(checkpoints, keyring, decision_keys=decision_keys)
        # This instance's writer: its entries signed with its keyring's key (none without one).
        self.journal = signing_view(_journal_from(journal), self.evidence.keyring)
        if approvals is None:
            approvals = approval_store_for(self.journal)
        self.approvals = approvals
        self.desk = ApprovalDesk(self.journal, approvals, ttl=approval_ttl, evidence=self.evidence)
        self.policy = FailurePolicy(policy)
        self.in_flight_timeout = in_flight_timeout
        self.fail_on_rejection = fail_on_rejection
        self.lease_seconds = check_lease_seconds(lease_seconds)  # refused now, not at the first run

    def _hooks(
        self, agent: Agent[Any], saga_id: str | None, hooks: RunHooks[Any] | None, close: bool
    ) -> SagaRunHooks:
        if current_saga.get() is not None:
            raise SagaStateError(
                "a saga is already active in this context: opening another inside it would split "
                "the journal; nested Runner.run calls inside a wrapped tool join it automatically"
            )
        saga = Saga(self.journal, saga_id, policy=self.policy, in_flight_timeout=self.in_flight_timeout,
                    evidence=self.evidence, lease_seconds=self.lease_seconds,
                    data_keys=self.data_keys)
        saga.calls.call_deadline = self.call_deadline
        return SagaRunHooks(saga, agent=agent, hooks=hooks, close=close, approvals=self.approvals,
                            approval_ttl=self.desk.ttl, fail_on_rejection=self.fail_on_rejection,
                            strict=self.strict)


    async def _drive(
        self,
        saga_hooks: SagaRunHooks,
        agent: Agent[Any],
        input: Any,
        runner_kwargs: dict[str, Any],
        approver: Approver | None,
        restore: bool = False,
    ) -> SagaResult:
        """:meth:`_drive_in_trace` inside the SDK trace opened for the run and its
        compensation (``sdk.tracing.saga_trace``, shaped by the run's ``run_config``)."""
        warn_if_sdk_traces_sensitive(agent, runner_kwargs.get("run_config"))
        with saga_trace(runner_kwargs.get("run_config"), saga_id=saga_hooks.saga_id):
            return await self._drive_in_trace(saga_hooks, agent, input, runner_kwargs, approver, restore)

    async def _drive_in_trace(
        self,
        saga_hooks: SagaRunHooks,
        agent: Agent[Any],
        input: Any,
        runner_kwargs: dict[str, Any],
        approver: Approver | None,
        restore: bool = False,
    ) -> SagaResult:
        """Run (or resume) under the saga until it completes, fails or waits for a human.

        A thin user of the hooks' own approval flow (``request_approvals`` / ``resume_state``),
        the same pieces an application using ``Runner.run`` + ``SagaRunHooks`` calls."""
        run_result = None
        error: BaseException | None = None
        pending: tuple[Any, ...] = ()
        saga = saga_hooks.saga
        context = runner_kwargs.get("context")
        try:
            async with saga_hooks:
                if restore:
                    # A refused resume raises ApprovalError to the caller and changes nothing
                    # (no compensation; the saga still waits).
                    input = await saga_hooks.resume_state(context=context)
                run_result = await Runner.run(agent, input, hooks=saga_hooks, **runner_kwargs)
                while run_result.interruptions and not saga.failed:
                    outcome = await saga_hooks.request_approvals(run_result)
                    pending = outcome.requests
                    if pending and approver is None:
                        break
                    for request in pending:
                        verdict = await ask_approver(approver, request)  # type: ignore[arg-type]
                        await self.desk.decide(
                            request.request_id, approve=verdict.approved,
                            approver=verdict.approver, reason=verdict.reason,
                        )
                    state = await saga_hooks.resume_state(context=context) if pending else outcome.state
                    pending = ()
                    run_result = await Runner.run(agent, state, hooks=saga_hooks, **runner_kwargs)
                saga_hooks.pending_approvals = bool(pending)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - compensated in __aexit__, returned to the caller
            refused = isinstance(exc, ApprovalError) and saga_hooks.status is SagaStatus.AWAITING_APPROVAL
            if saga_hooks.status is None or refused:  # not started, or a refused resume
                raise
            error = exc
        return saga_result(saga_hooks, run_result, error, pending)

    async def run(
        self,
        agent: Agent[Any],
        input: Any,
        *,
        saga_id: str | None = None,
        close: bool = True,
        hooks: RunHooks[Any] | None = None,
        approver: Approver | None = None,
        **runner_kwargs: Any,
    ) -> SagaResult:
        """Run ``agent`` on ``input`` under a saga; compensate if the run ends badly.

        Args:
            agent: the agent (its declared tools are checked first).
            input: what ``Runner.run`` takes as input.
            saga_id: continue an open saga (one saga over several runs); new if ``None``.
            close: close the saga when the run ends well; ``False`` keeps it open.
            hooks: the application's own ``RunHooks``, composed with ours.
            approver: optional ``async (ApprovalRequest) -> Decision`` (or a plain function
                returning one); when given, paused irreversible calls are decided inline
                (journaled like any decision) and the run goes on to completion in one call.
                Without it the result is AWAITING_APPROVAL. An approver that returns anything but
                a ``Decision`` (``True`` included: a decision names who made it) fails the run
                with a ``TypeError`` saying so, in ``result.exception``; the saga is compensated
                and its request is no longer listed as pending.
            **runner_kwargs: passed to ``Runner.run`` unchanged (``context=``, ``max_turns=``...).

        Returns:
            The :class:`SagaResult`. Exceptions out of the run are caught, compensated and
            returned in ``result.exception``; task cancellation is compensated, then re-raised.

        Raises:
            ConfigurationError: a declared tool is misconfigured (nothing ran).
            SagaStateError: a saga is already active in this context; ``saga_id`` is closed,
                failed, waiting for approval, or held by another run's lease (one run at a time
                per saga: refused before anything is written).
            asyncio.CancelledError: the calling task was cancelled (after compensation; if it
                is cancelled again while the saga compensates, compensation stops at the next
                undo, the undo running is journaled in doubt, and ``recover`` finishes the rest).
        """
        if saga_id is not None:
            await self._service().refuse_if_waiting(saga_id, "start another run in it")
        saga_hooks = self._hooks(agent, saga_id, hooks, close)
        return await self._drive(saga_hooks, agent, input, runner_kwargs, approver)

    async def resume(
        self,
        saga_id: str,
        agent: Agent[Any],
        *,
        context: Any = None,
        close: bool = True,
        hooks: RunHooks[Any] | None = None,
        approver: Approver | None = None,
        **runner_kwargs: Any,
    ) -> SagaResult:
        """Resume a saga that is AWAITING_APPROVAL, in this or any other process.

        Every pending call is checked (failing closed): its request exists, is unconsumed and
        unexpired; the journal holds the decision for this request and this argument hash; the
        call in the stored snapshot hashes to it. All requests are then consumed atomically, so
        two concurrent resumes run a tool at most once, and the run goes on under the same saga.

        Args:
            saga_id: the paused saga.
            agent: the same agent (fresh objects are fine) with the same tools.
            context: the trusted application context (the stored snapshot carries none).
            Other arguments: as :meth:`run`.

        Raises:
            ApprovalError: any check failed, or some pending call has no decision yet (the
                message lists them); nothing was consumed or run.
            SagaStateError: the saga is closed, or another run holds its lease.
            EvidenceError: the saga's journal does not verify (an edited entry, a truncated or
                rewritten tail against a signed checkpoint, an unsigned approval with a keyring);
                nothing was consumed or run.
        """
        saga_hooks = self._hooks(agent, saga_id, hooks, close)
        kwargs = dict(runner_kwargs)
        kwargs["context"] = context
        return await self._drive(saga_hooks, agent, None, kwargs, approver, restore=True)

    async def recover(self, saga_id: str, agent: Agent[Any] | Callable[[str | None], Agent[Any]], *,
                      run_config: Any = None) -> SagaResult:
        """Finish saga ``saga_id``, left behind, with the undos ``agent``'s graph declares (only
        those: a call whose journaled declaration id and scope it lacks stays dirty), or with
        ``app(scope) -> Agent`` called per scope its calls journal (``None``: none); traced as
        ``run_config`` says (``None``: no raw data). ``core.recovery.Recovery.recover``.

        Raises:
            ConfigurationError: ``app`` returned no ``Agent``; else as ``Recovery.recover``.
        """
        return _result(await self._service(run_config).recover(saga_id, _binder(agent)))

    async def recover_all(
        self, agent: Agent[Any] | Callable[[str | None], Agent[Any]],
    ) -> list[tuple[str, str, SagaResult | SagacityError]]:
        """``(saga_id, why, SagaResult or refusal)`` for every saga that needed recovery, oldest
        first, ``agent`` declaring all their undos, or ``app(scope) -> Agent`` giving each saga
        the agent of the scope its calls journal (as :meth:`recover`;
        ``core.recovery.Recovery.recover_all``)."""
        done = await self._service().recover_all(_binder(agent))
        return [(sid, why, _result(r) if isinstance(r, Recovered) else r) for sid, why, r in done]

    async def resolve(
        self, saga_id: str, seq: int, *, ran: bool, resolver: str, reason: str,
        undo_data: Any = None, force: bool = False,
    ) -> JournalEntry:
        """Answer in-doubt entry ``seq`` (RESOLVED), with the undo data its undo needs when it
        ran (``undo_data``, plain JSON), only once its holder cannot still act unless ``force``
        (``reason`` journaled as ``forced``): ``Recovery.resolve``, ``core.resolution``."""
        return await self._service().resolve(saga_id, seq, ran=ran, resolver=resolver, reason=reason,
                                             undo_data=undo_data, force=force)

    async def erase(self, saga_id: str, *, by: str, reason: str, force: bool = False) -> Any:
        """Destroy saga ``saga_id``'s data key: its sensitive values become unrecoverable, the
        chain and tags still verify; refused while the saga may still need them unless ``force``
        (with ``reason``). Returns a ``core.erasure.Erasure``; ``Recovery.erase``,
        ``core.erasure.erase`` (rules and errors)."""
        return await self._service().erase(saga_id, by=by, reason=reason, force=force)

    async def approve(self, request_id: str, *, approver: str, reason: str | None = None) -> Any:
        """Approve a request: journals APPROVED (approver, reason, the hash decided on).

        Raises:
            ApprovalError: unknown, consumed or expired request; a different decision exists;
                a verify keyring is configured but this host holds no key allowed to sign
                decisions (the approval would not verify; nothing is journaled).
        """
        return await self.desk.decide(request_id, approve=True, approver=approver, reason=reason)

    async def reject(self, request_id: str, *, approver: str, reason: str) -> Any:
        """Reject a request: journals REJECTED; on resume the model gets the rejection message
        and the body never runs.

        Raises:
            ApprovalError: as :meth:`approve`.
        """
        return await self.desk.decide(request_id, approve=False, approver=approver, reason=reason)

    async def wait_for_decision(self, request_id: str, *, timeout: float) -> Any:
        """Wait up to ``timeout`` seconds for a decision on ``request_id`` (in-process event,
        or polling the store for a decision made by another process).

        Raises:
            TimeoutError: no decision in time. ApprovalError: unknown request.
        """
        return await wait_for_decision(self.approvals, request_id, timeout=timeout)

    def run_sync(self, agent: Agent[Any], input: Any, **kwargs: Any) -> SagaResult:
        """The sync form of :meth:`run` (same arguments), for code without an event loop.

        Raises:
            RuntimeError: called from a running event loop (use ``await run(...)`` there).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(agent, input, **kwargs))
        raise RuntimeError("Sagacity.run_sync cannot run inside an event loop; await Sagacity.run")

    def run_streamed(
        self,
        agent: Agent[Any],
        input: Any,
        *,
        saga_id: str | None = None,
        close: bool = True,
        hooks: RunHooks[Any] | None = None,
        abandon: str = "finish",
        **runner_kwargs: Any,
    ) -> SagaStream:
        """The streamed form of :meth:`run`: ``async with sagacity.run_streamed(...) as s:``.

        Iterate ``s.stream_events()``; when the block ends (stream consumed, abandoned or
        cancelled) the saga is finalized and ``s.result`` holds the :class:`SagaResult`.

        Args:
            abandon: what happens when the block ends normally before the stream was consumed:
                ``"finish"`` (default) lets the run go on to its end unread, as the SDK would;
                ``"cancel"`` cancels it, and the cancelled run is compensated
                (:class:`StreamAbandoned`). A block left by an exception or a task cancellation
                always cancels the run and compensates.
            Other arguments: as :meth:`run`.
        """
        return SagaStream(
            self._hooks(agent, saga_id, hooks, close), agent, input, runner_kwargs, abandon,
        )

    async def close_saga(self, saga_id: str) -> SagaStatus:
        """Close a saga kept open with ``close=False``; COMPLETED unless calls are in doubt
        (then it stays open, IN_DOUBT, for ``recover``).

        Raises:
            SagaStateError: the saga is already closed, failed, waiting for approval, or held
                by another run's lease.
            EvidenceError: the saga's journal does not verify; it was not closed.
        """
        return await self._service().close(saga_id)

    async def secrets(self, saga_id: str, *, create: bool = False) -> SagaSecrets:
        """``saga_id``'s secrets under :attr:`data_keys` (``core.data_keys.SagaSecrets``): what
        opens its sealed values (``reveal``) and seals new ones; see ``Recovery.secrets``.

        Raises:
            DataKeyError: the saga's key was wrapped by a master key this process lacks.
            JournalError: the data-key store could not be read.
        """
        return await self.data_keys.for_saga(self.journal, saga_id, create=create)

    def _service(self, run_config: Any = None) -> Recovery:
        """Recovery, selection, resolution and close (``core.recovery``) on this facade's journal
        and settings. Each recovery runs in an SDK trace of its own, grouped with the saga's runs
        (``sdk.tracing.saga_trace``) and shaped by ``run_config``; without one, it is named
        "sagacity recover" and keeps raw arguments and results out of its spans (the run's own
        choice is not journaled, so none is assumed)."""
        config = run_config if run_config is not None else {"trace_include_sensitive_data": False}
        name = None if run_config is not None else "sagacity recover"
        return Recovery(self.journal, self.approvals, evidence=self.evidence, policy=self.policy,
                        lease_seconds=self.lease_seconds, data_keys=self.data_keys,
                        scope=lambda saga_id: saga_trace(config, saga_id=saga_id, workflow_name=name))

    async def verify(
        self, saga_id: str | None = None, *, heads: dict[str, ChainHead] | None = None
    ) -> list[VerifyResult]:
        """Verify one saga's hash chain, or every saga's; with ``heads`` (exported earlier with
        ``heads_of``), also detect truncated or rewritten tails and missing sagas. With
        checkpoints or a keyring configured, each saga is also checked against its newest signed
        checkpoint and its decisions' signatures; the first fault of each saga is reported."""
        return await verify_sagas(self.journal, saga_id, heads=heads, evidence=self.evidence)

    async def checkpoint(self, saga_id: str) -> Any:
        """Sign and store the saga's current head now (after verifying it).

        Returns:
            The :class:`~sagacity_agents.core.checkpoints.Checkpoint`.

        Raises:
            ConfigurationError: no checkpoint store or no signing key is configured.
            EvidenceError: the saga does not verify.
        """
        if not self.evidence.signs_checkpoints:
            raise ConfigurationError("checkpoints need a checkpoint store and a keyring with a signing key")
        return await self.evidence.checkpoint(self.journal, saga_id)

    async def aclose(self) -> None:
        """Close the journal, the approval store and a checkpoint store that has a ``close``
        (all idempotent)."""
        await self.journal.close()
        await self.approvals.close()
        close_checkpoints = getattr(self.evidence.checkpoints, "close", None)
        if close_checkpoints is not None:
            await close_checkpoints()


def _binder(agent: Agent[Any] | Callable[[str | None], Agent[Any]]) -> Callable[[Saga], None]:
    """Registers the declarations of ``agent``'s graph (the undos) on a saga; for ``app(scope)``,
    of the graph of each agent it gives for the scopes the saga's calls journal."""
    if isinstance(agent, Agent) or not callable(agent):
        return lambda saga: bind_agent(saga, agent)
    return _ScopedBinder(agent)


class _ScopedBinder:
    """A recovery's binder for ``app(scope) -> Agent``: the core asks it for the binder of one
    saga, given the saga's verified entries (``for_entries``)."""

    def __init__(self, app: Callable[[str | None], Agent[Any]]) -> None:
        self.app = app

    def for_entries(self, entries: Iterable[JournalEntry]) -> Callable[[Saga], None]:
        """The binder of the saga whose entries these are: every scope its INTENTs journal.

        Raises:
            ConfigurationError: ``app`` returned something other than an ``Agent``.
        """
        agents: list[Agent[Any]] = []
        for scope in journaled_scopes(entries) or [None]:
            made = self.app(scope)
            if not isinstance(made, Agent):
                raise ConfigurationError(
                    f"the recovery app gave {made!r} for scope {scope!r}, not an Agent")
            agents.append(made)

        def bind(saga: Saga) -> None:
            for made in agents:
                bind_agent(saga, made)

        return bind

    def __call__(self, saga: Saga) -> None:
        """Without the saga's entries (an adapter's own recovery service): the agent of no scope."""
        self.for_entries(())(saga)


def _result(recovered: Recovered) -> SagaResult:
    return SagaResult(saga_id=recovered.saga_id, status=recovered.status, report=recovered.report,
                      in_doubt=recovered.in_doubt, exception=recovered.exception)
