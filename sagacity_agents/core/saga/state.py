"""The state every part of a live saga shares (:class:`SagaCore`): which saga, its journal (the
fence view), its policy, its failures, its run lease's token and loss, and the frame of the call
running in the current context (:class:`CallFrame`). Each part of :class:`~.saga.Saga` keeps its
own state beside this one.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from ...errors import LeaseLostError, RunStalledError
from ..entries import JournalEntry
from ..data_keys import DataKeys, SagaSecrets
from ..evidence import Evidence
from ..fence import FencedJournal
from ..identity import Derivation, check_saga_id
from ..journal import Journal
from ..lease import RunProgress
from ..scrub import scrub_text
from ..protection import default_data_keys
from .status import FailurePolicy, FailureRecord, SagaStatus

__all__ = ["CallFrame", "InFlight", "SagaCore"]


class InFlight:
    """One call counted in flight; ended exactly once."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False


@dataclass
class CallFrame:
    """The call currently running in this context (set by the wrapper around the body)."""

    saga: Any
    """The saga the call belongs to (a :class:`~.saga.Saga`)."""
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


class SagaCore:
    """What every part of a saga reads or notes (see :class:`~.saga.Saga` for the arguments)."""

    verified: list[JournalEntry] | None = None
    """The saga's verified entries up to this run's RUN_STARTED, when the caller verified them
    and nothing came between (``begin_run(verified=...)``): compensation and the close use them
    instead of reading the journal again."""

    def __init__(
        self, journal: Journal, saga_id: str | None, *, policy: FailurePolicy,
        in_flight_timeout: float, evidence: Evidence | None, data_keys: DataKeys | None = None,
    ) -> None:
        check_saga_id(saga_id)
        self.fresh_id = saga_id is None
        """A new random id: nothing in the journal to read."""
        self.saga_id = saga_id if saga_id is not None else uuid.uuid4().hex
        self.derivation = Derivation()
        """How the saga's idempotency keys are derived (``core.identity``), set when it is
        opened (derivation 1 until then, and for a saga opened before journal ids)."""
        # Invocation ids (write-key prefixes): random per Saga object, counted per call; unique
        # across processes and retries of a saga without a uuid4 per call.
        self._invocation_prefix = uuid.uuid4().hex[:16]
        self._invocations = itertools.count(1)
        self.evidence = evidence
        self.policy = FailurePolicy(policy)
        self.in_flight_timeout = in_flight_timeout
        self.lock = threading.Lock()
        """Guards what calls on several threads change (failures, counts, held outcomes)."""
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
        self.journal = FencedJournal(journal, self.saga_id, lambda: self.fence,
                                     self.lose_lease, self.unjournaled.append)
        """The saga's journal, fenced: every append carries :attr:`fence`."""
        self.capabilities = self.journal.capabilities
        self.failures: list[FailureRecord] = []
        self.status = SagaStatus.OPEN
        self.journal_errors: list[str] = []
        """Journal writes of the saga's own bookkeeping that failed (SAGA_FAILED, SAGA_CLOSED)."""
        self.last_journaled = time.monotonic()
        """``time.monotonic()`` of the latest call start or end (the lease keeper reads it)."""
        self.close_key = "saga:closed"
        """The write key of the saga's SAGA_CLOSED: another one when a recovery closes a
        reopened saga again (its first close holds this one)."""
        self.progress = RunProgress()
        """What the run is doing: the lease keeper renews only while it makes progress."""
        self.data_keys = data_keys if data_keys is not None else default_data_keys()
        """The application's data keys (``core.protection``; shared by its writers)."""
        self.secrets: SagaSecrets | None = None
        """The saga's secrets, set once a run holds its lease (``RunLifecycle.start_run``):
        every append of the saga through :attr:`journal` commits its sensitive values; undos
        and checks open them (``core.protection.opened``)."""

    def invocation_id(self) -> str:
        """A new write-key prefix for one call."""
        return f"{self._invocation_prefix}-{next(self._invocations)}"

    def note_failure(self, record: FailureRecord) -> None:
        """Count a failed call (any thread): the saga has failed. Its error text is kept with
        the saga's known sensitive values and card numbers masked (``core.scrub``): it goes
        into messages, the closing report and spans (an exception quoting the password)."""
        secrets = self.journal.secrets.get(self.saga_id)  # the view's (core.protection sets it)
        known = getattr(secrets, "known", None)
        # The secrets also remember whole free texts they masked inside (this very error, once
        # journaled): masking those would hide the whole message, not the value in it.
        text = scrub_text(record.error, [k for k in (known.copy() if known else ()) if k != record.error])
        if text != record.error:
            record = replace(record, error=text)
        with self.lock:
            self.failures.append(record)

    def lose_lease(self, lost: LeaseLostError) -> None:
        """Note that this object's lease was taken over (the first notice is kept)."""
        if self.lease_lost is None and (lost.fence is None or lost.fence == self.fence):
            self.lease_lost = lost

    def lease_lost_error(self) -> LeaseLostError | None:
        """The error that tells this object's run it lost its lease (``None``: it did not):
        which lease, to which run, and any outcome the journal refused even late."""
        lost = self.lease_lost
        if lost is None or isinstance(lost, RunStalledError):
            return lost  # a stall names the step the run waited on: said as it is
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
        if self.lease_lost is not None:
            raise self.lease_lost_error()  # type: ignore[misc]
