"""sagacity-agents: saga semantics for OpenAI Agents SDK tool calls.

Every wrapped tool call is journaled in a tamper-evident hash chain (INTENT before the body,
EXECUTED / REFUSED / FAILED after); when a call fails, the effects already made are undone in
reverse order by the undos the developer declared; irreversible calls wait for a human approval
bound to their exact arguments.
"""

from __future__ import annotations

from .core.chain import ChainFault, VerifyResult, verify_entries, verify_journal
from .core.compensation import (
    CompensationContext,
    CompensationItem,
    CompensationReport,
    compensate,
    idempotency_key,
)
from .core.declarations import Reversibility, ToolDeclaration, Verdict
from .core.entries import JournalEntry, Phase
from .core.journal import Journal
from .core.memory_journal import InMemoryJournal
from .core.saga import FailurePolicy, FailureRecord, Saga, SagaStatus, record_undo_data
from .core.sqlite_journal import SqliteJournal
from .errors import (
    ApprovalError,
    ConfigurationError,
    DeclarationError,
    EncodingError,
    JournalError,
    JournalWriteError,
    SagacityError,
    SagaFailedError,
    SagaStateError,
)
from .sdk.fallback import nested_agent_tool, protect_tool
from .sdk.facade import SagaResult, SagaStream, Sagacity, StreamAbandoned
from .sdk.hooks import HooksNotEnteredError, SagaRunHooks, SagaStopped
from .sdk.tools import compensable, irreversible, no_undo, read_only

__version__ = "0.1.0"

__all__ = [
    "ApprovalError",
    "ChainFault",
    "CompensationContext",
    "CompensationItem",
    "CompensationReport",
    "ConfigurationError",
    "DeclarationError",
    "EncodingError",
    "FailurePolicy",
    "FailureRecord",
    "HooksNotEnteredError",
    "InMemoryJournal",
    "Journal",
    "JournalEntry",
    "JournalError",
    "JournalWriteError",
    "Phase",
    "Reversibility",
    "Saga",
    "SagaFailedError",
    "SagaResult",
    "SagaRunHooks",
    "SagaStateError",
    "SagaStatus",
    "SagaStopped",
    "SagaStream",
    "Sagacity",
    "SagacityError",
    "SqliteJournal",
    "StreamAbandoned",
    "ToolDeclaration",
    "Verdict",
    "VerifyResult",
    "compensable",
    "compensate",
    "idempotency_key",
    "irreversible",
    "nested_agent_tool",
    "no_undo",
    "protect_tool",
    "read_only",
    "record_undo_data",
    "verify_entries",
    "verify_journal",
]
