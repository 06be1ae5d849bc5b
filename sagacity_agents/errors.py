"""The exception hierarchy: one root, :class:`SagacityError`, and a subclass per failure kind.

Driver errors (``sqlite3``, ``psycopg``) are wrapped in :class:`JournalError` subclasses and
raised ``from`` the original, so callers never need to import a driver to catch ours.
"""

from __future__ import annotations

from ._lazy import on_first_use

__all__ = [
    "ApprovalError",
    "CallContextLostError",
    "ClaimTakenError",
    "ConfigurationError",
    "DataErasedError",
    "DataKeyError",
    "DeclarationError",
    "EncodingError",
    "EvidenceError",
    "HooksNotEnteredError",
    "JournalClosedError",
    "JournalConflictError",
    "JournalError",
    "JournalWriteError",
    "LeaseLostError",
    "McpServerMissingError",
    "RunLeaseLostError",
    "RunStalledError",
    "SagaFailedError",
    "SagaRecovered",
    "SagaStateError",
    "SagaStopped",
    "SagacityError",
    "SensitiveTraceWarning",
    "SignatureError",
    "StreamAbandoned",
    "describe_error",
]

# The exceptions of the Agents SDK adapter (some are also ``agents.AgentsException``s, so they
# pass through the SDK unwrapped) are imported on first use: the core imports this module and
# must not import the SDK.
__getattr__ = on_first_use(globals())


class SagacityError(Exception):
    """Root of every exception this library raises on purpose.

    Attributes:
        code: which check refused, where a failure kind has several (e.g. ApprovalError's
            ``"ARGS_HASH_MISMATCH_AT_CALL"``, SagaStateError's ``"LEASE_HELD"``), so a caller
            or a test can tell the guards apart without reading messages; ``None`` when the
            raiser gave none. The codes are listed in docs/architecture.md ("Guards").
    """

    code: str | None = None

    def __init__(self, *args: object, code: str | None = None) -> None:
        super().__init__(*args)
        if code is not None:
            self.code = code


class ConfigurationError(SagacityError):
    """A setting or a run configuration is wrong (e.g. an irreversible tool without
    ``needs_approval=True``, or :class:`SagaRunHooks` passed to a run without being entered)."""


class DeclarationError(ConfigurationError):
    """A tool's saga declaration is wrong: missing or mistyped undo, decorator order, etc.

    Raised at import or wrap time, never while compensating ("fail at start-up, not at refund
    time")."""


class EncodingError(SagacityError):
    """A value has no canonical JSON encoding under the rules in ``core.canonical``
    (NaN, an unknown object type, a duplicate key in JSON text...)."""


class JournalError(SagacityError):
    """The journal could not be read or written."""


class JournalWriteError(JournalError):
    """A journal append failed. When it is an INTENT, the tool body was not run."""


class JournalClosedError(JournalWriteError):
    """An append to a saga whose chain ends with SAGA_CLOSED: a closed saga is terminal and
    nothing is ever appended after its close (docs/architecture.md, "Runs, leases and the end
    of a saga")."""


class JournalConflictError(JournalWriteError):
    """A conditional append (``expected_seq``) found another entry at the saga's tail: someone
    wrote in between. Nothing was written; re-read the saga and decide again."""


class ClaimTakenError(JournalConflictError):
    """A claim (an entry that starts an action two writers could both start: COMPENSATING before
    an undo, CONSUMED when a resume uses a decision) found its write key already taken by
    *another* writer (another claimant nonce). Nothing was written; the action is the other
    writer's: do not perform it (docs/architecture.md, "Runs, leases and the end of a saga":
    claims).

    Attributes:
        saga_id: the saga.
        write_key: the claimed key.
        seq: sequence number of the other writer's entry.
        claimant: the other writer's nonce (``None``: its entry carries none).
    """

    def __init__(
        self, message: str, *, saga_id: str, write_key: str, seq: int, claimant: str | None
    ) -> None:
        super().__init__(message)
        self.saga_id = saga_id
        self.write_key = write_key
        self.seq = seq
        self.claimant = claimant


class SagaStateError(SagacityError):
    """An operation does not fit the saga's state: opening a saga inside an active one,
    appending to a closed saga, resuming a saga that is not waiting."""


class CallContextLostError(SagaStateError):
    """``record_undo_data`` or ``current_idempotency_key`` was called where no saga call is in the
    context (a thread or executor the tool body started, which does not inherit the body's
    context variables) while this process has a saga call in flight: the value would be lost, or
    the key would be ``None``. Carry the context into the thread
    (``sagacity_agents.saga.carry_context(fn)``, ``contextvars.copy_context().run``, or
    ``asyncio.to_thread``, which copies it)."""


class LeaseLostError(JournalConflictError, SagaStateError):
    """The run's lease is no longer the saga's: another run took it over (this holder stalled
    past its expiry, or was presumed dead), or it was released. Raised by the journal when an
    append carries a fence token (``fence``: the seq of the RUN_STARTED whose lease the writer
    held) that is not the saga's newest RUN_STARTED, checked in the same transaction as the
    insert (nothing was written); and by a run that finds it lost its lease: it starts no new
    tool body, writes no compensation and never closes the saga (docs/architecture.md, "Runs,
    leases and the end of a saga": the fence).

    Attributes:
        saga_id: the saga.
        fence: the lost lease's RUN_STARTED seq.
        current: the saga's newest RUN_STARTED seq when the loss was seen (``None``: unknown).
    """

    def __init__(self, message: str, *, saga_id: str, fence: int | None,
                 current: int | None = None) -> None:
        super().__init__(message)
        self.saga_id = saga_id
        self.fence = fence
        self.current = current


class RunStalledError(LeaseLostError):
    """A run (or a recovery) made no progress for too long, so its lease keeper stopped renewing
    the lease and the run was stopped: no append by the run, no model-turn boundary and no tool
    body inside its deadline for ``max(3, ceil(longest deadline or model timeout in flight /
    lease_seconds))`` lease periods (``core.lease.LeaseKeeper``). The lease then expires and
    another process can recover the saga. Like any lost lease, the run starts no new tool body,
    compensates nothing and does not close the saga.

    Attributes:
        waiting_on: the step the run was waiting on (``"model turn 3"``, ``"tool book_hotel
            (call c2) past its deadline of 300 s"``).
        idle_seconds: seconds without progress when the keeper stopped.
    """

    def __init__(self, message: str, *, saga_id: str, fence: int | None, waiting_on: str,
                 idle_seconds: float) -> None:
        super().__init__(message, saga_id=saga_id, fence=fence, current=fence)
        self.waiting_on = waiting_on
        self.idle_seconds = idle_seconds


class SagaFailedError(SagacityError):
    """Raised inside a run to stop it at the first failed tool call (the default failure
    policy). It subclasses the SDK's ``AgentsException`` in the adapter layer so that it passes
    through the Agents SDK unwrapped; the core only knows this base."""


class ApprovalError(SagacityError):
    """An approval check failed closed: unknown or consumed request, decision missing from the
    journal, argument hash mismatch, expired request, undecided pending calls. ``code`` says
    which check (e.g. ``"ARGS_HASH_MISMATCH_AT_RESUME"``, ``"SNAPSHOT_CHANGED"``)."""


class EvidenceError(SagacityError):
    """A saga's journal does not verify (its hash chain, its newest signed checkpoint, or a
    decision's signature), so nothing was done on it: no tool run, no undo, no decision, no close.

    Attributes:
        saga_id: the saga.
        bad_seq: the first bad sequence number.
        fault: why (a ``ChainFault`` value, e.g. ``"hash mismatch"``).
    """

    def __init__(self, message: str, *, saga_id: str, bad_seq: int | None, fault: str | None) -> None:
        super().__init__(message)
        self.saga_id = saga_id
        self.bad_seq = bad_seq
        self.fault = fault


class DataKeyError(SagacityError):
    """A sensitive value cannot be read or sealed: no master key is configured
    (``SAGACITY_DATA_KEY``), the configured one did not wrap the saga's data key, or the sealed
    bytes do not open under it (edited, moved to another saga, entry or path: ``core.data_keys``).
    ``code``: ``NO_MASTER_KEY``, ``WRONG_MASTER_KEY``, ``NOT_STORED``, ``SEALED_MISMATCH``,
    ``BAD_MASTER_KEY``."""


class DataErasedError(DataKeyError):
    """The saga's data key was erased (``sagacity saga erase``): its sensitive values are gone for
    good; the chain, tags and commitments still verify. ``code``: ``ERASED``."""

    code = "ERASED"


class SensitiveTraceWarning(SagacityError, UserWarning):
    """A tool of the run has sensitive fields (declared with ``sensitive=``, or a parameter
    named like ``card_number``, ``password``, ``token``) and the run's config lets the Agents
    SDK trace tool inputs (``trace_include_sensitive_data`` true, its default, and tracing on).
    The SDK's own function spans then carry the clear arguments to its trace processors (the
    OpenAI traces dashboard by default): the journal, this library's ``saga.*`` spans, its log
    lines and its exports never do, but the SDK's spans and the model provider are outside that
    guarantee (docs/observability.md). Warned by ``Sagacity.run`` and ``Sagacity.run_streamed``
    (``sdk.trace_warning``). Silence it with ``RunConfig(trace_include_sensitive_data=False)`` (or
    ``OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA=0``), or filter it once the trace's
    destination may hold those values. A :class:`SagacityError` too (one ``except`` catches it
    where warnings are raised as errors)."""


class SignatureError(SagacityError):
    """A signature (checkpoint or decision) is missing, made with an unknown key, or does not
    verify."""


def describe_error(exc: BaseException) -> str:
    """``"Type: message"`` for an exception, safe for any exception a tool or undo may raise.

    An exception's ``__str__`` is user code: it may raise, return a non-string, or be huge.
    Journaling a failure must never fail because of how the exception prints (a FAILED entry
    that cannot be written would leave the call in doubt, its effect never undone), so a
    ``__str__`` that raises gives ``"Type (message unavailable: <what it raised>)"``, and a lone
    surrogate in the message is escaped (``\\ud800``), since JSON cannot carry it.

    Args:
        exc: any exception.

    Returns:
        The type's qualified name, followed by ``": message"`` when the message is not empty.
        Never raises.
    """
    try:
        name = type(exc).__qualname__
    except Exception:  # noqa: BLE001 - a metaclass can break even this
        name = "exception"
    try:
        text = str(exc)
        if not isinstance(text, str):  # a C-level or odd __str__
            raise TypeError(f"__str__ returned {type(text).__name__}")
    except Exception as inner:  # noqa: BLE001 - never let printing an error fail the caller
        try:
            what = type(inner).__qualname__
        except Exception:  # noqa: BLE001
            what = "exception"
        return f"{name} (message unavailable: its __str__ raised {what})"
    described = f"{name}: {text}" if text else name
    try:
        described.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (bytes decoded with surrogateescape, a file name...) has no JSON
        # encoding: the FAILED entry and the saga's reason could not be journaled. Escaped.
        described = described.encode("utf-8", "backslashreplace").decode("utf-8")
    return described
