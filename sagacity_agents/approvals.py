"""Human approvals: what a paused irreversible call asks for, and how a decision is awaited.

An irreversible tool call pauses for a human decision bound to its exact arguments: an
:class:`ApprovalRequest` (its ``args_hash`` is :func:`args_hash` of the arguments) in the
approval store, decided with :meth:`Sagacity.approve <sagacity_agents.Sagacity.approve>` /
``reject``, the ``sagacity approvals`` commands or the web inbox (``sagacity_agents.web``), or
inline by an approver that returns a :class:`Decision`. :func:`wait_for_decision` waits for it.
``Decision`` and ``wait_for_decision`` are also on the front door.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import on_first_use
from .core.approval import ApprovalRequest, args_hash, wait_for_decision

if TYPE_CHECKING:
    from .sdk.results import Decision

__getattr__ = on_first_use(globals())  # Decision: from the Agents SDK adapter

__all__ = ["ApprovalRequest", "Decision", "args_hash", "wait_for_decision"]
