"""sagacity-agents: saga semantics for OpenAI Agents SDK tool calls.

Every wrapped tool call is journaled in a tamper-evident hash chain (INTENT before the body,
EXECUTED / REFUSED / FAILED after); when a call fails, the effects already made are undone in
reverse order by the undos the developer declared; irreversible calls wait for a human approval
bound to their exact arguments.

The front door is the twenty names of ``__all__``: what an application needs to declare tools,
run a saga and read how it ended. The rest has a second door (docs/api.md):
``sagacity_agents.backends`` (journals and stores), ``.evidence`` (verification), ``.approvals``,
``.guardrails``, ``.saga`` (adapters and advanced use), ``.errors`` (every exception),
``.testing``, ``.web`` and ``.otel``. Every other module of the package is internal.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._lazy import on_first_use
from .core.approval import wait_for_decision
from .core.declarations import Verdict
from .core.saga import FailurePolicy, SagaStatus, current_idempotency_key, record_undo_data
from .core.undo import CompensationContext, idempotency_key
from .errors import SagacityError

# The Agents SDK adapter is imported on first use (``_lazy``), so core-only users (the CLI's
# journal commands, an auditor verifying an export) do not pay for importing the SDK.
if TYPE_CHECKING:
    from .sdk.facade import Sagacity
    from .sdk.fallback import nested_agent_tool, protect_tool
    from .sdk.hooks import SagaRunHooks
    from .sdk.mcp import protect_mcp_server
    from .sdk.results import Decision, SagaResult
    from .sdk.tools import compensable, irreversible, no_undo, read_only

_DOORS = {
    "sagacity_agents.approvals": ("ApprovalRequest", "args_hash"),
    "sagacity_agents.backends": (
        "ApprovalStore", "CheckpointStore", "DirectoryCheckpointStore", "InMemoryApprovalStore",
        "InMemoryJournal", "Journal", "JournalEntry", "Phase", "PostgresApprovalStore",
        "PostgresCheckpointStore", "PostgresDatabase", "PostgresJournal", "SqliteApprovalStore",
        "SqliteJournal",
    ),
    "sagacity_agents.errors": (
        "ApprovalError", "ClaimTakenError", "ConfigurationError", "DeclarationError",
        "EncodingError", "EvidenceError", "HooksNotEnteredError", "JournalClosedError",
        "JournalConflictError", "JournalError", "JournalWriteError", "LeaseLostError",
        "RunLeaseLostError", "SagaFailedError", "SagaRecovered", "SagaStateError", "SagaStopped",
        "SignatureError", "StreamAbandoned",
    ),
    "sagacity_agents.evidence": (
        "ChainFault", "ChainHead", "Checkpoint", "Evidence", "Keyring", "VerifyResult",
        "heads_from_json", "heads_of", "heads_to_json", "verify_entries", "verify_journal",
    ),
    "sagacity_agents.guardrails": ("SagaVerdict", "saga_output_guardrail", "saga_tool_guardrail"),
    "sagacity_agents.saga": (
        "CompensationItem", "CompensationReport", "FailureRecord", "McpPolicy", "Reversibility",
        "Saga", "SagaStream", "ToolDeclaration", "call_idempotency_key", "compensate", "saga_trace",
    ),
}

_MOVED = {name: door for door, names in _DOORS.items() for name in names}
"""The names that left the top level, each with its new door. They stay importable from here, with
a DeprecationWarning, for one release; then they go."""


_first_use = on_first_use(globals())


def __getattr__(name: str) -> Any:
    door = _MOVED.get(name)
    if door is None:
        return _first_use(name)
    # Not cached in globals(): every access from a new place warns.
    warnings.warn(
        f"sagacity_agents.{name} is deprecated and leaves the top level in the next release: "
        f"import it from {door} (from {door} import {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(door), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "CompensationContext",
    "Decision",
    "FailurePolicy",
    "SagaResult",
    "SagaRunHooks",
    "SagaStatus",
    "Sagacity",
    "SagacityError",
    "Verdict",
    "compensable",
    "current_idempotency_key",
    "idempotency_key",
    "irreversible",
    "nested_agent_tool",
    "no_undo",
    "protect_mcp_server",
    "protect_tool",
    "read_only",
    "record_undo_data",
    "wait_for_decision",
]
