"""What a saga is and says: its failure policy, its status, a failed call, a human decision."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FailurePolicy", "FailureRecord", "Grant", "SagaStatus"]


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
    REOPENED = "REOPENED"
    """A closed saga that got a late outcome after its close: the call's own holder, stalled
    past its lease while a recovery took the saga over and closed it, journaled what its call
    did (the one entry a closed saga accepts, ``core.append_rule.reopens``). Derived from the
    entries (an entry after the last SAGA_CLOSED, ``core.ledger.reopened_by``), never
    journaled as a status: the effect may be in the world while the saga says closed, so a
    human or a recovery must look. ``recover`` (and ``recover --all``, which selects it) undoes
    the late effect and closes the saga again (a second SAGA_CLOSED)."""
    LEASE_LOST = "LEASE_LOST"
    """This run lost the saga's run lease to another run (it stalled past the lease's expiry and
    a recovery took the saga over): it stopped at its next step without compensating or closing
    and wrote nothing after the loss but the late outcomes of calls it had started. The saga's
    state is the other run's: read the journal (``sagacity journal show SAGA_ID``). Never journaled as a
    saga's status by the run that lost."""


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
