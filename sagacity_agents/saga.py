"""The saga itself, for adapters to other agent frameworks and for advanced use.

An application on the Agents SDK needs none of this: :class:`~sagacity_agents.Sagacity` and
:class:`~sagacity_agents.SagaRunHooks` drive a :class:`Saga` for it. An adapter drives one
directly (its calls journaled, its :func:`compensate` run) and describes each tool with a
:class:`ToolDeclaration` of some :class:`Reversibility`; a failed call is a
:class:`FailureRecord`, an undo run a :class:`CompensationItem` of a
:class:`CompensationReport`. :func:`call_idempotency_key` is a forward call's idempotency key
(the same in every process that reads the journal; sent to MCP servers).
:class:`CheckResult` is what a far-side check (``check=`` of a declaration) answers about a call
left in doubt, given a :class:`CheckContext` (``core.checks``).

From the Agents SDK adapter (imported on first use): :class:`SagaStream` (what
``Sagacity.run_streamed`` returns), :func:`saga_trace` (an SDK trace around a saga),
:class:`McpPolicy` (the policy of ``protect_mcp_server``) and :class:`SagaRecovered`
(the reason recorded when ``Sagacity.recover`` finishes a saga; also in ``errors``).

:func:`carry_context` wraps a function a tool body hands to a thread or an executor so that
``record_undo_data`` and ``current_idempotency_key`` called there find the body's call.

:class:`Recovery` is recovery as a service of the core (select, recover, resolve, close a saga
left behind, verifying it once), what ``Sagacity.recover`` drives; an adapter binds its own
declarations to it. :class:`Recovered` is what one recovery returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import on_first_use
from .core.checks import CheckContext, CheckResult
from .core.compensation import CompensationItem, CompensationReport, compensate
from .core.declarations import Reversibility, ToolDeclaration
from .core.recovery import Recovered, Recovery
from .core.saga import FailureRecord, Saga, carry_context
from .core.undo import call_idempotency_key

if TYPE_CHECKING:
    from .sdk.mcp import McpPolicy
    from .sdk.results import SagaRecovered
    from .sdk.streaming import SagaStream
    from .sdk.tracing import saga_trace

__getattr__ = on_first_use(globals())

__all__ = [
    "CheckContext",
    "CheckResult",
    "CompensationItem",
    "CompensationReport",
    "FailureRecord",
    "McpPolicy",
    "Recovered",
    "Recovery",
    "Reversibility",
    "Saga",
    "SagaRecovered",
    "SagaStream",
    "ToolDeclaration",
    "call_idempotency_key",
    "carry_context",
    "compensate",
    "saga_trace",
]
