"""Approvals checked from the journal alone, whatever the keys: the structure rule's sibling.

An irreversible body runs only on a decision the journal records (``core.grants``): a pause
journals AWAITING_APPROVAL (the request, its canonical arguments and their SHA-256), a human's
APPROVED or REJECTED names the request and the hash decided on, a resume journals CONSUMED once
the store consumed the request, and the call's INTENT names the request it uses up
(``payload["request_id"]``) and says the call is irreversible (``payload["reversibility"]``).
A writer with database access can edit and re-seal those entries with the documented hash rule;
this module refuses, before anything acts on a saga (``verify``, resume, recovery), every
journal in which an execution is not covered by its decision:

* **An irreversible call cites its approval.** An INTENT journaled ``irreversible``, or one of a
  call that paused as irreversible (an AWAITING_APPROVAL of the same tool and call id, journaled
  ``irreversible``, before it), names a request; an INTENT naming a request is held to it
  whatever its reversibility says.
* **It follows the APPROVED decision of that request, of the same call**, and the CONSUMED entry
  a resume wrote for it; no REJECTED decision, no REQUEST_VOIDED (a recovery voided it), and
  no consumption at or after the request's expiry (``expires_at`` of its AWAITING_APPROVAL,
  against ``consumed_at`` of its CONSUMED, both written with the approval desk's clock; a
  CONSUMED without ``consumed_at``, written before it was recorded, is not checked for expiry).
* **Its arguments are the approved ones.** The SHA-256 of the INTENT's canonical arguments (of
  its canonical raw arguments for a call journaled from outside its body, with the pinned MCP
  definition the request covered; :func:`bound_arguments`) equals the APPROVED entry's
  ``args_hash``; so does the CONSUMED entry's. The arguments are taken as stored: for a request
  of version 2 (``args_version``) they hold commitments in place of sensitive values, and so did
  the hash the human approved (``core.approval_args``), so no key is needed. A call journaled
  from outside its body whose raw text held a sensitive value stores that text committed as a
  whole: it must then carry the very commitment its pause journaled (``raw_args``).
* **A request is decided once, consumed once and used once.** A second decision, a decision
  after the request was voided, a second CONSUMED, a CONSUMED whose decision or hash
  is not the journaled decision's, and a second INTENT naming one request are refused.

Decisions the library writes without a request (arguments that do not validate, rejected at once:
``request_id`` ``None``) are not requests and are passed over. Without a keyring this is a net
against edits that break the approval trail; a forger who rewrites the trail consistently (the
pause, the decision and the call together) is refused with a keyring only, for the decision
signature he cannot make (``core.evidence``; docs/threat-model.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import EncodingError
from .canonical import canonical_bytes, parse_json, sha256_hex, to_canonical_value
from .entries import EntryLike, Phase
from .sensitive import is_committed

__all__ = ["approval_problem", "bound_arguments", "raw_args_value"]

# Module constants: ``Phase.X`` goes through the enum's metaclass, and verify reads every entry.
_INTENT, _AWAITING, _APPROVED, _REJECTED, _CONSUMED, _VOIDED = (
    Phase.INTENT, Phase.AWAITING_APPROVAL, Phase.APPROVED, Phase.REJECTED, Phase.CONSUMED,
    Phase.REQUEST_VOIDED)
_DECISIONS = (_APPROVED, _REJECTED)
_WATCHED = frozenset({_AWAITING, _APPROVED, _REJECTED, _CONSUMED, _VOIDED})
"""The phases besides INTENT the rule reads (an INTENT is read only when it names a request or
says it is irreversible)."""

IRREVERSIBLE = "irreversible"
"""The ``reversibility`` an INTENT and an AWAITING_APPROVAL journal for an irreversible tool
(``core.declarations.Reversibility.IRREVERSIBLE``)."""


def raw_args_value(raw_args: str) -> dict[str, Any]:
    """The canonical value of a call's raw argument text, as an approval hash covers it
    (``{"$unparsable": text}`` when it is not a JSON object: no approval can match it).

    Args:
        raw_args: the model's raw argument text (``""`` counts as ``"{}"``).
    """
    try:
        value = parse_json(raw_args or "{}")
        if isinstance(value, dict):
            converted: dict[str, Any] = to_canonical_value(value)
            return converted
    except EncodingError:
        pass
    return {"$unparsable": raw_args}


def bound_arguments(intent: Mapping[str, Any], paused: Any) -> Any:
    """What the approval of the call journaled by ``intent`` (an INTENT's payload) is bound to.

    A wrapped call's validated arguments (``args``). A call journaled from outside its body
    (``args`` empty, ``raw_args`` text: a fallback or MCP call) is bound to its canonical raw
    arguments, and an MCP call to those with the tool's pinned definition (``paused``: the
    ``args`` of the request's AWAITING_APPROVAL, ``{"arguments", "mcp_tool"}`` for an MCP call).
    """
    args = intent.get("args")
    raw = intent.get("raw_args")
    if args or not isinstance(raw, str):
        return args if args is not None else {}
    value = raw_args_value(raw)
    if isinstance(paused, dict) and set(paused) == {"arguments", "mcp_tool"}:
        return {"arguments": value, "mcp_tool": paused["mcp_tool"]}
    return value


def _same_raw_call(intent: Mapping[str, Any], paused: Mapping[str, Any], approved_hash: Any) -> bool:
    """Whether ``intent`` (a call journaled from outside its body) ran with the very raw text
    its version 2 request paused on, when that text held a sensitive value: both entries then
    store it committed as a whole (``core.sensitive``), so its parsed arguments cannot be hashed
    from the journal; equal commitments (HMAC of the whole text under the saga's key) say the
    text is the same, hence its arguments, and the pause journaled the approved hash."""
    raw = intent.get("raw_args")
    return (paused.get("args_version") == 2 and not intent.get("args") and is_committed(raw)
            and raw == paused.get("raw_args") and paused.get("args_hash") == approved_hash)


def _hash_of(value: Any) -> str | None:
    try:
        return sha256_hex(canonical_bytes(value))
    except EncodingError:
        return None


class _Request:
    """What the journal says, so far in the pass, about one approval request."""

    __slots__ = ("consumed", "decision", "paused", "used", "voided")

    def __init__(self) -> None:
        self.paused: EntryLike | None = None
        self.decision: EntryLike | None = None
        self.consumed: EntryLike | None = None
        self.voided: EntryLike | None = None
        self.used: int | None = None


def _payload(entry: EntryLike) -> Mapping[str, Any]:
    payload = entry.payload
    return payload if isinstance(payload, dict) else {}


def _request_id(payload: Mapping[str, Any]) -> str | None:
    rid = payload.get("request_id")
    return rid if isinstance(rid, str) and rid else None


def approval_problem(entries: Sequence[EntryLike]) -> tuple[int, str] | None:
    """The first entry (lowest seq) that breaks the approval rule (module doc).

    Args:
        entries: one saga's entries in ``seq`` order, already chain-verified (``core.chain``):
            the entries, or the fields of their verified rows (``chain.verify_rows``).

    Returns:
        ``(seq, why)`` of the first such entry, or ``None`` when every execution is covered by
        its decision.
    """
    requests: dict[str, _Request] = {}
    paused_irreversible: set[tuple[Any, Any]] = set()
    for entry in entries:
        phase = entry.phase
        if phase is _INTENT:
            payload = entry.payload
            if not isinstance(payload, dict) or (
                    "request_id" not in payload and payload.get("reversibility") != IRREVERSIBLE
                    and not paused_irreversible):
                continue  # the usual call: no approval involved (verify pays this per INTENT)
            problem = _intent_problem(entry, payload, requests, paused_irreversible)
        elif phase in _WATCHED:
            problem = _trail_problem(entry, requests, paused_irreversible)
        else:
            continue
        if problem is not None:
            return entry.seq, problem
    return None


def _trail_problem(entry: EntryLike, requests: dict[str, _Request],
                   paused_irreversible: set[tuple[Any, Any]]) -> str | None:
    """Why ``entry`` (a pause, decision, consumption or voiding) breaks the rule, or ``None``;
    records it for the entries after it."""
    payload = _payload(entry)
    rid = _request_id(payload)
    if rid is None:
        return None  # a decision made without a request (invalid arguments): nothing runs on it
    request = requests.setdefault(rid, _Request())
    phase = entry.phase
    if phase is _AWAITING:
        if request.paused is None:
            request.paused = entry
        if payload.get("reversibility") == IRREVERSIBLE:
            paused_irreversible.add((entry.tool, entry.call_id))
        return None
    if phase in _DECISIONS:
        return _decision_problem(entry, rid, request)
    if phase is _VOIDED:
        request.voided = request.voided or entry
        return None
    return _consumed_problem(entry, payload, rid, request)


def _decision_problem(entry: EntryLike, rid: str, request: _Request) -> str | None:
    if request.decision is not None:
        return (f"a second decision on request {rid} (decided at seq {request.decision.seq}): "
                "a decision cannot be changed or repeated")
    # (A decision after a CONSUMED is a second one: a CONSUMED follows its decision.)
    if request.voided is not None:
        return f"a decision on request {rid} after it was voided (seq {request.voided.seq})"
    request.decision = entry
    return None


def _consumed_problem(entry: EntryLike, payload: Mapping[str, Any], rid: str,
                      request: _Request) -> str | None:
    if request.consumed is not None:
        return (f"request {rid} consumed a second time (first CONSUMED at seq "
                f"{request.consumed.seq}): a request is consumed at most once")
    request.consumed = entry
    if request.voided is not None:
        return f"CONSUMED of request {rid}, voided at seq {request.voided.seq}"
    decision = request.decision
    if decision is None:
        return f"CONSUMED of request {rid}, which has no journaled decision before it"
    said = "approved" if decision.phase is _APPROVED else "rejected"
    if payload.get("decision") != said:
        return (f"CONSUMED of request {rid} says {payload.get('decision')!r}, but its decision "
                f"at seq {decision.seq} is {said}")
    decided_hash = _payload(decision).get("args_hash")
    if payload.get("args_hash") != decided_hash:
        return (f"CONSUMED of request {rid} is for arguments hash {payload.get('args_hash')}, "
                f"its decision at seq {decision.seq} for {decided_hash}")
    return None


def _intent_problem(entry: EntryLike, payload: Mapping[str, Any], requests: dict[str, _Request],
                    paused_irreversible: set[tuple[Any, Any]]) -> str | None:
    """Why the INTENT ``entry`` runs a call its decision does not cover, or ``None``."""
    rid = _request_id(payload)
    if rid is None:
        if payload.get("reversibility") == IRREVERSIBLE:
            return "an irreversible call's INTENT names no approval request"
        if (entry.tool, entry.call_id) in paused_irreversible:
            return ("INTENT of a call that paused as irreversible names no approval request "
                    f"(journaled {payload.get('reversibility')!r})")
        if "request_id" in payload:
            return f"INTENT names request {payload['request_id']!r}, which is not a request id"
        return None
    request = requests.get(rid) or _Request()
    decision = request.decision
    if decision is None:
        return f"INTENT runs under request {rid}, which has no decision before it"
    if decision.phase is _REJECTED:
        return f"INTENT runs under request {rid}, REJECTED at seq {decision.seq}"
    if decision.tool != entry.tool or decision.call_id != entry.call_id:
        return (f"INTENT ({entry.tool!r}, call {entry.call_id!r}) runs under request {rid}, "
                f"approved at seq {decision.seq} for another call ({decision.tool!r}, call "
                f"{decision.call_id!r})")
    if request.voided is not None:
        return f"INTENT runs under request {rid}, voided at seq {request.voided.seq}"
    consumed = request.consumed
    if consumed is None:
        return f"INTENT runs under request {rid}, approved at seq {decision.seq} but never consumed"
    if request.used is not None:
        return f"request {rid} already used by INTENT seq {request.used}: an approval runs one call"
    request.used = entry.seq
    paused = _payload(request.paused) if request.paused is not None else {}
    expires, at = paused.get("expires_at"), _payload(consumed).get("consumed_at")
    if isinstance(expires, str) and isinstance(at, str) and at >= expires:
        return f"INTENT runs under request {rid}, consumed at {at}, after it expired at {expires}"
    approved_hash = _payload(decision).get("args_hash")
    digest = _hash_of(bound_arguments(payload, paused.get("args")))
    if digest != approved_hash and not _same_raw_call(payload, paused, approved_hash):
        return (f"INTENT's arguments hash to {digest}, but request {rid} was approved at seq "
                f"{decision.seq} for arguments hash {approved_hash}")
    return None
