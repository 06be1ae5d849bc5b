"""A live saga: the scope tool wrappers journal into, and the end-of-run decision.

The names an adapter uses are exported here: :class:`Saga`, its statuses and failure records,
the context variables that carry the saga and the running call across tasks and threads, and
:func:`record_undo_data`.
"""

from .saga import (
    CallFrame,
    FailurePolicy,
    FailureRecord,
    Grant,
    Saga,
    SagaStatus,
    current_call,
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
    "current_call",
    "current_saga",
    "record_undo_data",
]
