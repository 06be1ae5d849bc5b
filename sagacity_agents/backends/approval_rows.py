"""An :class:`~sagacity_agents.core.approval.ApprovalRequest` as a row of the
``sagacity_approval_requests`` table, the same in the SQLite and the PostgreSQL backends
(``args`` stored as the RFC 8785 text its hash covers: the committed arguments of a request of
version 2, ``args_version``; the clear ones sealed in ``args_sealed``)."""

from __future__ import annotations

from typing import Any

from ..core.approval import ApprovalRequest
from ..core.canonical import canonical_bytes, parse_json

__all__ = ["REQUEST_COLUMNS", "request_from_row", "request_to_row"]


REQUEST_COLUMNS = (
    "request_id",
    "saga_id",
    "call_id",
    "tool",
    "args",
    "raw_args",
    "args_hash",
    "created_at",
    "expires_at",
    "decision",
    "approver",
    "reason",
    "decided_at",
    "consumed_at",
    "args_version",
    "args_sealed",
)
"""Columns of ``sagacity_approval_requests`` holding an :class:`ApprovalRequest`, in row order."""


def request_from_row(row: tuple[Any, ...]) -> ApprovalRequest:
    """Rebuild a request from a row of :data:`REQUEST_COLUMNS` (``args`` as canonical JSON text)."""
    data = dict(zip(REQUEST_COLUMNS, row, strict=True))
    data["args"] = parse_json(data["args"])
    return ApprovalRequest(**data)


def request_to_row(request: ApprovalRequest) -> tuple[Any, ...]:
    """The row of :data:`REQUEST_COLUMNS` storing ``request`` (``args`` as RFC 8785 text)."""
    data = request.to_dict()
    data["args"] = canonical_bytes(request.args).decode("utf-8")
    return tuple(data[c] for c in REQUEST_COLUMNS)
