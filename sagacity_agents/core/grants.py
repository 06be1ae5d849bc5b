"""What the journal allows an irreversible call to do: a consumed, approved, unused decision.

Rule (docs/architecture.md, "Runs, leases and the end of a saga"): an irreversible body runs
only when the saga's journal holds, for that call (tool and call id) and the SHA-256 of the
arguments the body is about to receive,

* a CONSUMED entry (journaled when a resume consumed the decision),
* an APPROVED entry for the same request and the same hash, and
* no INTENT that already ran under that request (an INTENT of an irreversible call names the
  request it used in ``payload["request_id"]``).

Nothing in memory counts: a ``RunState`` approved through the SDK's own API (``approve``,
``always_approve``), a snapshot with a hand-written approvals block, or a grant held by another
process's objects are all worthless here. Reading the journal makes the check work across
processes; the run lease (``core.lease``) keeps a second process from racing this read against
the INTENT write, and :class:`~sagacity_agents.core.saga.Saga` does the same for tasks of its own
process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .entries import JournalEntry, Phase

__all__ = ["ConsumedDecision", "GrantCheck", "consumed_decisions", "grant_for_call", "requests_void"]


@dataclass(frozen=True, slots=True)
class ConsumedDecision:
    """A decision a resume consumed for one paused call, as the journal records it."""

    request_id: str
    """The approval request."""
    tool: str | None
    """Tool of the paused call."""
    call_id: str | None
    """The model's call id of the paused call."""
    args_hash: str
    """SHA-256 of the canonical arguments decided on."""
    approved: bool
    """True when a matching APPROVED entry (same request, same hash) is in the journal."""
    used_by: int | None
    """Sequence number of the INTENT that ran under it (``None``: not used yet)."""
    version: int = 1
    """The request's argument-hash version, as its AWAITING_APPROVAL journaled it
    (``core.approval.ApprovalRequest.args_version``): 2 covers the committed arguments."""


def consumed_decisions(entries: Sequence[JournalEntry]) -> list[ConsumedDecision]:
    """Every CONSUMED decision of a saga, oldest first.

    Args:
        entries: the saga's entries in ``seq`` order.
    """
    approved: set[tuple[str, str]] = set()
    used: dict[str, int] = {}
    versions: dict[str, int] = {}
    consumed: list[JournalEntry] = []
    for e in entries:
        payload = e.payload if isinstance(e.payload, dict) else {}
        rid = payload.get("request_id")
        if not isinstance(rid, str) or not rid:
            continue
        if e.phase is Phase.AWAITING_APPROVAL:
            versions.setdefault(rid, _version(payload))
        elif e.phase is Phase.APPROVED:
            approved.add((rid, str(payload.get("args_hash") or "")))
        elif e.phase is Phase.CONSUMED:
            consumed.append(e)
        elif e.phase is Phase.INTENT:
            used.setdefault(rid, e.seq)
    decisions = []
    for e in consumed:
        payload = e.payload
        rid, digest = payload["request_id"], str(payload.get("args_hash") or "")
        decisions.append(ConsumedDecision(
            rid, e.tool, e.call_id, digest,
            (rid, digest) in approved and payload.get("decision") == "approved", used.get(rid),
            versions.get(rid, 1),
        ))
    return decisions


def _version(payload: dict[str, object]) -> int:
    """The argument-hash version an AWAITING_APPROVAL journaled (1 when it says none)."""
    version = payload.get("args_version")
    return version if type(version) is int else 1


NO_DECISION = "no consumed approval"
"""How :func:`grant_for_call`'s reason starts when the journal holds no decision for the call."""


class GrantCheck(NamedTuple):
    """What :func:`grant_for_call` decided."""

    request_id: str | None
    """The request the call may run under (``None``: it may not run)."""
    why: str
    """Why it may not ("" when it may)."""
    code: str | None
    """Which check refused: ``NO_CONSUMED_APPROVAL``, ``ARGS_HASH_MISMATCH_AT_CALL``,
    ``REQUEST_VERSION_SENSITIVE``, ``NOT_APPROVED`` or ``APPROVAL_ALREADY_USED`` (``None`` when
    it may run)."""


def grant_for_call(
    entries: Sequence[JournalEntry], *, tool: str, call_id: str | None, args_hash: str,
    claimed: frozenset[str] | set[str] = frozenset(), committed_hash: str | None = None,
) -> GrantCheck:
    """Find the decision that lets this irreversible call run.

    Args:
        entries: the saga's entries in ``seq`` order.
        tool: the call's tool name.
        call_id: the model's call id.
        args_hash: SHA-256 of the canonical arguments the body is about to receive: what a
            version 1 request (``core.approval``) is bound to.
        claimed: request ids already taken by calls of this process whose INTENT may not be
            journaled yet.
        committed_hash: SHA-256 of those arguments committed as the call's INTENT will store
            them (``core.approval_args.committed_args``): what a version 2 request is bound to;
            ``None``: the saga commits nothing here (its entries hold the clear arguments), so
            ``args_hash`` is what its INTENT will hash to.

    Returns:
        ``(request_id, "", None)`` when the call may run; ``(None, why, code)`` when it may not
        (``why`` starts with "no consumed approval" when the journal holds none for this call).
        With several decisions for the call, the newest is reported.
    """
    mine = [d for d in consumed_decisions(entries) if d.tool == tool and d.call_id == call_id]
    if not mine:
        return GrantCheck(None, f"{NO_DECISION} for this call in this saga's journal",
                          "NO_CONSUMED_APPROVAL")
    problems: list[GrantCheck] = []
    for d in reversed(mine):
        expected = committed_hash if d.version >= 2 and committed_hash is not None else args_hash
        if d.version < 2 and committed_hash is not None and committed_hash != args_hash:
            # Its INTENT will store the committed arguments, which cannot hash to a version 1
            # (clear) hash: verify would refuse the saga. Ask again.
            problems.append(GrantCheck(None, f"request {d.request_id} was made before sensitive "
                                       "values were committed and these arguments hold one",
                                       "REQUEST_VERSION_SENSITIVE"))
        elif d.args_hash != expected:
            problems.append(GrantCheck(None, f"arguments hash {expected} does not match the approved "
                                       f"hash {d.args_hash} (request {d.request_id})",
                                       "ARGS_HASH_MISMATCH_AT_CALL"))
        elif not d.approved:
            problems.append(GrantCheck(None, f"request {d.request_id} was rejected (or has no "
                                       "APPROVED entry for this hash)", "NOT_APPROVED"))
        elif d.used_by is not None or d.request_id in claimed:
            where = f" (INTENT seq {d.used_by})" if d.used_by is not None else ""
            problems.append(GrantCheck(None, f"approval {d.request_id} was already used{where}",
                                       "APPROVAL_ALREADY_USED"))
        else:
            return GrantCheck(d.request_id, "", None)
    return problems[0]


def requests_void(entries: Sequence[JournalEntry]) -> str | None:
    """Why no approval request of this saga can be used any more, or ``None`` while one can.

    ``"saga closed"`` once SAGA_CLOSED is journaled (nothing runs in the saga again), ``"saga
    failed"`` once SAGA_FAILED is (no approved call runs after a failure: the saga is compensated,
    never resumed). The store still holds such a request undecided; listings show it as void,
    never as pending.

    Args:
        entries: the saga's entries in ``seq`` order.
    """
    phases = {e.phase for e in entries}
    if Phase.SAGA_CLOSED in phases:
        return "saga closed"
    if Phase.SAGA_FAILED in phases:
        return "saga failed"
    return None
