"""A live saga: the scope tool wrappers journal into, and the end-of-run decision.

Framework-agnostic: an adapter calls :meth:`Saga.run_call` (async bodies) or
:meth:`Saga.run_call_sync` (sync bodies in worker threads) around each tool body, and
:meth:`Saga.finish` when a run ends. The active saga and the current call live in
``contextvars`` so that async, threaded, parallel and nested calls all see them.

:class:`Saga` is assembled from one layer per concern, each built on the ones listed before it
(``verdict.py``, beside them, reads a saga through a protocol):

* ``state``     the fields, declarations, failures and calls in flight (:class:`SagaState`);
* ``lifecycle`` opening the saga and holding its run lease;
* ``outcomes``  a call's outcome: decided, written (or written behind), held and retried;
* ``refusals``  calls refused before their INTENT (name clash, no grant) or by policy;
* ``calls``     one wrapped call: INTENT, body, outcome (async and sync bodies);
* ``external``  calls whose body we cannot wrap (the adapter's fallback seams);
* ``closing``   the end of a run: fail, compensate, close or leave open.
"""

from __future__ import annotations

import contextvars

from .calls import current_call, current_idempotency_key, record_undo_data
from .closing import SagaEnding
from .state import CallFrame
from .status import FailurePolicy, FailureRecord, Grant, SagaStatus

__all__ = [
    "CallFrame",
    "FailurePolicy",
    "FailureRecord",
    "Grant",
    "Saga",
    "SagaStatus",
    "current_call",
    "current_saga",
    "current_idempotency_key",
    "record_undo_data",
]


class Saga(SagaEnding):
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


current_saga: contextvars.ContextVar[Saga | None] = contextvars.ContextVar(
    "sagacity_current_saga", default=None
)
"""The saga of the current context (set around a run; inherited by tasks and worker threads)."""
