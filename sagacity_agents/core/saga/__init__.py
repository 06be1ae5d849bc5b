"""The live saga package: what an adapter imports (:class:`Saga`, its statuses and failure
records, the context variables that carry the saga and the running call across tasks and threads,
:func:`record_undo_data`). How the saga is built, one module per concern: ``saga.py``."""

from .saga import (
    CallFrame,
    FailurePolicy,
    FailureRecord,
    Grant,
    Saga,
    SagaStatus,
    carry_context,
    current_call,
    current_idempotency_key,
    current_saga,
    record_undo_data,
)

__all__ = [
    "CallFrame",
    "FailurePolicy",
    "FailureRecord",
    "Grant",
    "Saga",
    "SagaStatus",
    "carry_context",
    "current_call",
    "current_idempotency_key",
    "current_saga",
    "record_undo_data",
]
