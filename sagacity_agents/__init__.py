"""sagacity-agents: saga semantics for OpenAI Agents SDK tool calls.

Every wrapped tool call is journaled in a tamper-evident hash chain (INTENT before the body,
EXECUTED / REFUSED / FAILED after); when a call fails, the effects already made are undone in
reverse order by the undos the developer declared; irreversible calls wait for a human approval
bound to their exact arguments.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core.approval import ApprovalRequest, ApprovalStore, args_hash, wait_for_decision
from .core.chain import (
    ChainFault,
    ChainHead,
    VerifyResult,
    heads_from_json,
    heads_of,
    heads_to_json,
    verify_entries,
    verify_journal,
)
from .core.checkpoints import Checkpoint, CheckpointStore
from .core.compensation import CompensationItem, CompensationReport, compensate
from .core.declarations import Reversibility, ToolDeclaration, Verdict
from .core.undo import CompensationContext, call_idempotency_key, idempotency_key
from .core.entries import JournalEntry, Phase
from .core.evidence import Evidence
from .core.journal import Journal
from .backends.directory.checkpoints import DirectoryCheckpointStore
from .backends.memory.approvals import InMemoryApprovalStore
from .backends.memory.journal import InMemoryJournal
from .core.signing import Keyring
from .core.saga import (
    FailurePolicy, FailureRecord, Saga, SagaStatus, current_idempotency_key, record_undo_data,
)
from .backends.postgres.approvals import PostgresApprovalStore
from .backends.postgres.checkpoints import PostgresCheckpointStore
from .backends.postgres.journal import PostgresJournal
from .backends.postgres.setup import PostgresDatabase
from .backends.sqlite.approvals import SqliteApprovalStore
from .backends.sqlite.journal import SqliteJournal
from .core.saga.verdict import SagaVerdict
from .errors import (
    ApprovalError,
    ClaimTakenError,
    ConfigurationError,
    DeclarationError,
    EncodingError,
    EvidenceError,
    JournalClosedError,
    JournalConflictError,
    JournalError,
    JournalWriteError,
    LeaseLostError,
    SagacityError,
    SagaFailedError,
    SagaStateError,
    SignatureError,
)

# The Agents SDK adapter is imported on first use, so core-only users (the CLI's journal
# commands, an auditor verifying an export) do not pay for importing the SDK.
_SDK_NAMES = {
    "Decision": ".sdk.results",
    "HooksNotEnteredError": ".sdk.hooks",
    "McpPolicy": ".sdk.mcp",
    "SagaRecovered": ".sdk.results",
    "SagaResult": ".sdk.results",
    "SagaRunHooks": ".sdk.hooks",
    "RunLeaseLostError": ".sdk.hooks",
    "SagaStopped": ".sdk.hooks",
    "SagaStream": ".sdk.streaming",
    "Sagacity": ".sdk.facade",
    "StreamAbandoned": ".sdk.results",
    "compensable": ".sdk.tools",
    "irreversible": ".sdk.tools",
    "nested_agent_tool": ".sdk.fallback",
    "no_undo": ".sdk.tools",
    "protect_mcp_server": ".sdk.mcp",
    "protect_tool": ".sdk.fallback",
    "read_only": ".sdk.tools",
    "saga_output_guardrail": ".sdk.guardrails",
    "saga_tool_guardrail": ".sdk.guardrails",
    "saga_trace": ".sdk.tracing",
}

if TYPE_CHECKING:
    from .sdk.facade import Sagacity
    from .sdk.fallback import nested_agent_tool, protect_tool
    from .sdk.guardrails import saga_output_guardrail, saga_tool_guardrail
    from .sdk.mcp import McpPolicy, protect_mcp_server
    from .sdk.hooks import HooksNotEnteredError, RunLeaseLostError, SagaRunHooks, SagaStopped
    from .sdk.results import Decision, SagaRecovered, SagaResult, StreamAbandoned
    from .sdk.streaming import SagaStream
    from .sdk.tools import compensable, irreversible, no_undo, read_only
    from .sdk.tracing import saga_trace


def __getattr__(name: str) -> Any:
    module = _SDK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'sagacity_agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

__version__ = "0.1.0"

__all__ = [
    "ApprovalError",
    "ApprovalRequest",
    "ApprovalStore",
    "ChainFault",
    "ChainHead",
    "Checkpoint",
    "CheckpointStore",
    "ClaimTakenError",
    "CompensationContext",
    "CompensationItem",
    "CompensationReport",
    "ConfigurationError",
    "Decision",
    "DeclarationError",
    "DirectoryCheckpointStore",
    "EncodingError",
    "Evidence",
    "EvidenceError",
    "FailurePolicy",
    "FailureRecord",
    "HooksNotEnteredError",
    "InMemoryApprovalStore",
    "InMemoryJournal",
    "Journal",
    "JournalClosedError",
    "JournalConflictError",
    "JournalEntry",
    "JournalError",
    "JournalWriteError",
    "Keyring",
    "LeaseLostError",
    "McpPolicy",
    "Phase",
    "PostgresApprovalStore",
    "PostgresCheckpointStore",
    "PostgresDatabase",
    "PostgresJournal",
    "Reversibility",
    "RunLeaseLostError",
    "Saga",
    "SagaFailedError",
    "SagaRecovered",
    "SagaResult",
    "SagaRunHooks",
    "SagaStateError",
    "SagaStatus",
    "SagaStopped",
    "SagaStream",
    "SagaVerdict",
    "Sagacity",
    "SagacityError",
    "SignatureError",
    "SqliteApprovalStore",
    "SqliteJournal",
    "StreamAbandoned",
    "ToolDeclaration",
    "Verdict",
    "VerifyResult",
    "args_hash",
    "call_idempotency_key",
    "compensable",
    "compensate",
    "current_idempotency_key",
    "heads_from_json",
    "heads_of",
    "heads_to_json",
    "idempotency_key",
    "irreversible",
    "nested_agent_tool",
    "no_undo",
    "protect_mcp_server",
    "protect_tool",
    "read_only",
    "record_undo_data",
    "saga_output_guardrail",
    "saga_tool_guardrail",
    "saga_trace",
    "verify_entries",
    "verify_journal",
    "wait_for_decision",
]
