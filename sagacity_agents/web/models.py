"""The REST API's bodies, as pydantic models: FastAPI publishes them in the OpenAPI schema
(``GET /openapi.json`` of the app)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "ApprovalOut", "ApprovalPage", "CountOut", "DecisionIn", "DecisionOut", "EntryOut", "ErrorBody",
    "ErrorOut", "MeOut", "SagaDetailOut", "SagaOut", "SagaPage", "VerifyOut",
]


class ErrorBody(BaseModel):
    """An error: a stable ``code`` (see ``web/decisions.py``) and a message for people."""

    code: str
    message: str
    approver: str | None = None
    decision: str | None = None
    decided_at: str | None = None
    args_hash: str | None = None
    expires_at: str | None = None


class ErrorOut(BaseModel):
    """Every error response: ``{"error": {...}}``."""

    error: ErrorBody


class ApprovalOut(BaseModel):
    """An approval request. ``args`` are the canonical validated arguments the tool would
    receive; ``raw_args`` the model's text where it differs; ``args_hash`` their SHA-256."""

    request_id: str
    saga_id: str
    call_id: str | None
    tool: str
    reversibility: str | None = None
    args: dict[str, Any]
    raw_args: str | None
    args_clear: bool = Field(False, description="``args`` hold the clear sensitive values (this "
                             "server holds the saga's data key); false: each is its mask")
    args_version: int = Field(1, description="2: ``args_hash`` covers the committed arguments "
                              "(sensitive values as keyed commitments); 1: the clear ones")
    args_hash: str
    canonical_json: str | None = None
    hash_ok: bool | None = None
    created_at: str
    expires_at: str | None
    age_seconds: float | None
    expires_in_seconds: float | None
    state: Literal["pending", "approved", "rejected", "consumed", "expired"]
    decision: str | None
    approver: str | None
    reason: str | None
    decided_at: str | None
    consumed_at: str | None
    hidden_characters: list[str] = Field(
        default_factory=list, description="invisible, control or reordering code points in the "
        "request's values (e.g. 'U+202E RIGHT-TO-LEFT OVERRIDE'): the inbox shows them escaped "
        "and warns; a client showing the values to a person should too")


class ApprovalPage(BaseModel):
    """One page of requests, oldest first; ``next_offset`` is ``None`` on the last page."""

    items: list[ApprovalOut]
    offset: int
    limit: int
    total: int
    next_offset: int | None


class DecisionIn(BaseModel):
    """A decision: the hash the approver was shown, and why (required to reject)."""

    args_hash: str = Field(min_length=64, max_length=64)
    reason: str | None = Field(default=None, max_length=2000)


class DecisionOut(BaseModel):
    """The request after the decision; ``changed`` is false for a double submit."""

    request: ApprovalOut
    changed: bool


class CountOut(BaseModel):
    """How many requests wait for a decision."""

    pending: int


class MeOut(BaseModel):
    """The caller, and the CSRF token its POSTs carry (``X-CSRF-Token``)."""

    identity: str
    csrf_token: str


class SagaOut(BaseModel):
    """A saga as listed (status from its last entry, unverified)."""

    saga_id: str
    status: str
    entry_count: int
    first_recorded_at: str
    last_recorded_at: str
    last_phase: str


class SagaPage(BaseModel):
    """One page of sagas, oldest first; ``next_offset`` is ``None`` on the last page."""

    items: list[SagaOut]
    offset: int
    limit: int
    next_offset: int | None


class EntryOut(BaseModel):
    """A journal entry as stored."""

    seq: int
    phase: str
    tool: str | None
    call_id: str | None
    write_key: str
    recorded_at: str
    prev_hash: str
    hash: str
    payload: Any = None


class SagaDetailOut(BaseModel):
    """A saga: its status from its whole chain, its requests."""

    saga_id: str
    status: str
    entry_count: int
    requests: list[ApprovalOut]


class VerifyOut(BaseModel):
    """A saga's verification (chain, and checkpoints and decision signatures when configured)."""

    saga_id: str
    ok: bool
    entries: int
    head: str | None
    bad_seq: int | None
    fault: str | None
    detail: str
