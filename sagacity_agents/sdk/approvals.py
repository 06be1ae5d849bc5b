"""Approvals on the Agents SDK: pause irreversible calls, record decisions, resume safely.

The SDK's own mechanism pauses the run (``needs_approval=True`` -> ``result.interruptions``) and
serializes it (``RunState``), but its snapshot is not authenticated: edited arguments, a recomputed
fingerprint, or a hand-written approvals block make it run what nobody approved
(sdk-notes.md, "Approvals and RunState"). So the snapshot is never the source of truth:

* pausing stores, per pending call, an approval request holding the canonical *validated*
  arguments and their SHA-256, and journals AWAITING_APPROVAL in the saga's chain;
* a decision is journaled (APPROVED / REJECTED with approver, reason and the hash decided on);
* resuming checks, failing closed on each: the request exists, is unconsumed and unexpired; the
  journal holds the decision for this request and hash; the pending call in the snapshot hashes
  to it. Approvals found inside the snapshot are discarded. Requests are consumed atomically in
  the store, then each consumption is journaled (CONSUMED); the tool wrapper runs an irreversible
  body only on a journaled APPROVED + CONSUMED pair for its call and hash (``core.grants``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, RunContextWrapper
from agents.run_state import RunState

from ..core.approval import ARGS_VERSION, ApprovalRequest, ApprovalStore, args_hash
from ..core.approval_args import (
    committed_args, committed_raw_args, holds_sensitive, opened_snapshot, sealed_request_args,
    sensitivity_of, stored_snapshot,
)
from ..core.canonical import (
    format_timestamp,
    parse_json,
    sha256_hex,
)
from ..core.data_keys import DataKeys, SagaSecrets
from ..core.entries import Phase
from ..core.evidence import Evidence, sign_decision, verified_entries
from ..core.grants import consumed_decisions
from ..core.journal import CLAIMANT_KEY, Clock, Journal, new_claimant, utc_now
from ..core.observe import begin, linked_attrs, seconds_since
from ..core.saga import Grant, Saga
from ..core.sensitive import Sensitivity, has_committed, masked, redact_text
from ..errors import (
    ApprovalError, ClaimTakenError, DataErasedError, DataKeyError, EncodingError, describe_error,
)
from .fallback import rebuild_pending_calls
from .graph import agent_graph
from .mcp.approval import definition_change, mcp_reversibility
from .pending_calls import (
    AUTO_REJECTION,
    approval_args,
    pending_call_arguments,
    reversibility_of,
    tool_of,
)
from .tools import declaration_of
from .undeclared import pending_raw_arguments

__all__ = ["ApprovalDesk", "PauseOutcome", "pending_call_arguments"]

def _strip_snapshot(state_json: dict[str, Any]) -> dict[str, Any]:
    """Remove the application context and every approval the snapshot carries.

    The SDK writes a dict context into the snapshot even with a serializer: secrets never go into
    the store; the caller passes the trusted context on resume. Approvals inside a snapshot are
    never honoured: decisions live in the journal and the approval store.
    """
    ctx = state_json.get("context")
    if isinstance(ctx, dict):
        ctx["context"] = None
        meta = ctx.get("context_meta")
        if isinstance(meta, dict):
            meta["omitted"] = True
        ctx["approvals"] = {}
        ctx.pop("function_tool_approvals", None)
    return state_json


@dataclass(frozen=True)
class PauseOutcome:
    """What :meth:`ApprovalDesk.pause` did with a run's interruptions."""

    requests: tuple[ApprovalRequest, ...]
    """New requests waiting for a human (empty: the run can go on at once)."""
    state: Any
    """The ``RunState`` with automatic decisions applied (invalid arguments rejected, consumed
    decisions reused)."""



@dataclass(frozen=True, slots=True)
class _Pending:
    """A paused call that needs a human's decision."""

    tool: str
    call_id: str | None
    args: dict[str, Any]
    """The validated arguments, in clear (sealed in the store when values are stored)."""
    raw_args: str | None
    committed: dict[str, Any]
    """``args`` with each sensitive value committed: what the request stores and hashes."""
    journaled_raw: Any
    """What AWAITING_APPROVAL journals under ``raw_args``: the raw text kept (committed when
    it holds a sensitive value), or the committed raw text of a call journaled from outside its
    body (``core.approval_rule``: its INTENT stores the same)."""
    digest: str
    """SHA-256 of ``committed`` (request version 2)."""
    kind: str | None
    """The tool's reversibility when the run paused."""
    agent: str | None
    """Which agent asked (one tool name may be on two agents)."""
    spec: Sensitivity
    """What is sensitive in the tool's values (its declaration's, else the defaults)."""



@dataclass(frozen=True, slots=True)
class _Opened:
    """The stored snapshot of a resume, opened: with what, and whether it was sealed."""

    secrets: SagaSecrets
    """The saga's secrets in this process (commit the pending calls' arguments)."""
    text: str
    """The snapshot's JSON text (clear when it was sealed; masked when it was stored masked)."""
    sealed: bool
    """It was stored sealed (``False``: masked, or plain from before values were sealed)."""


@dataclass(frozen=True, slots=True)
class _Journaled:
    """What a saga's journal records about its approval requests, by request id."""

    decisions: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """APPROVED / REJECTED: (approved?, the hash decided on)."""
    snapshots: dict[str, str] = field(default_factory=dict)
    """AWAITING_APPROVAL: the SHA-256 of the snapshot stored with the request."""
    kinds: dict[str, str | None] = field(default_factory=dict)
    """AWAITING_APPROVAL: the tool's reversibility when the run paused."""
    versions: dict[str, int] = field(default_factory=dict)
    """AWAITING_APPROVAL: the request's argument-hash version (1 when it says none)."""
    consumed: set[str] = field(default_factory=set)
    """Requests a resume consumed (CONSUMED)."""


def _check_against_journal(request: ApprovalRequest, entries: list[Any]) -> None:
    """The store's request is working state that a database writer can edit, and it is what a
    human reads before deciding (``approvals show``): its tool, call, arguments and hash must be
    those journaled (AWAITING_APPROVAL, inside the verified chain) when the run paused.

    Raises:
        ApprovalError: they are not (the request was edited in the store, or never journaled).
    """
    paused = next((e for e in entries if e.phase is Phase.AWAITING_APPROVAL
                   and isinstance(e.payload, dict) and e.payload.get("request_id") == request.request_id),
                  None)
    if paused is None:
        raise ApprovalError(f"request {request.request_id} is not journaled in saga {request.saga_id}; refusing to decide it",
                            code="REQUEST_NOT_JOURNALED")
    journaled = paused.payload
    try:
        shown = args_hash(request.args)
    except EncodingError:
        shown = None
    # One code per comparison, so a test can tell which one refused.
    if (paused.tool, paused.call_id) != (request.tool, request.call_id):
        code = "REQUEST_CALL_CHANGED"
    elif journaled.get("args_hash") != request.args_hash:
        code = "ARGS_HASH_MISMATCH_AT_DECISION"
    elif shown != request.args_hash:
        code = "REQUEST_ARGS_CHANGED"
    elif _journaled_version(journaled) != request.args_version:
        code = "REQUEST_VERSION_CHANGED"
    else:
        return
    raise ApprovalError(
        f"request {request.request_id} in the approval store (tool {request.tool!r}, call "
        f"{request.call_id}, arguments hashing to {shown}, recorded hash {request.args_hash}) is "
        f"not the one journaled at seq {paused.seq} (tool {paused.tool!r}, call {paused.call_id}, "
        f"hash {journaled.get('args_hash')}): the store was changed; refusing to decide it",
        code=code,
    )


def _journaled_version(payload: dict[str, Any]) -> int:
    """The argument-hash version an AWAITING_APPROVAL journaled (1: written before versions)."""
    version = payload.get("args_version")
    return version if type(version) is int else 1


class ApprovalDesk:
    """Creates, decides and verifies approval requests for one journal and one store.

    Args:
        journal: the saga journal (decisions are journaled in the saga's chain).
        store: the approval/snapshot store.
        ttl: seconds before a request expires (``None``: never); default 24 h.
        clock: time source.
        evidence: how a saga's journal is verified before deciding or resuming, whether pauses
            are checkpointed and decisions signed (``core.evidence``); default: the chain alone.
        data_keys: the application's data keys (``core.data_keys``), used for a saga whose
            journal view holds no secrets of its own; default: ``DataKeys.from_env()``
            (``SAGACITY_DATA_KEY``), read once.
    """

    def __init__(
        self,
        journal: Journal,
        store: ApprovalStore,
        *,
        ttl: float | None = 24 * 3600,
        clock: Clock = utc_now,
        evidence: Evidence | None = None,
        data_keys: DataKeys | None = None,
    ) -> None:
        self.data_keys = data_keys
        self.evidence = evidence
        self.journal = journal
        self.store = store
        self.ttl = ttl
        self.clock = clock

    async def secrets_for(self, saga_id: str, journal: Any = None) -> SagaSecrets:
        """The saga's secrets (``core.data_keys``): those its journal view holds (``journal``,
        the saga's own view, else this desk's; ``JournalView.secrets``), else made from
        :attr:`data_keys` and given to the view, so that what the saga journals next through it
        (the resumed call's INTENT) is committed under the same key as the request's arguments.

        Raises:
            DataKeyError: ``WRONG_MASTER_KEY``: the saga's stored key was wrapped by a master
                key this process does not hold.
            JournalError: the journal's data-key store could not be read or written.
        """
        view = self.journal if journal is None else journal
        held = getattr(view, "secrets", None)
        secrets = held.get(saga_id) if isinstance(held, dict) else None
        if secrets is None:
            if self.data_keys is None:
                self.data_keys = DataKeys.from_env()
            secrets = await self.data_keys.for_saga(view, saga_id)
            if isinstance(held, dict):
                secrets = held.setdefault(saga_id, secrets)
        return secrets

    # --- pausing --------------------------------------------------------------------------
    async def pause(self, saga: Saga, agent: Agent[Any], state: Any) -> PauseOutcome:
        """Turn a run's interruptions into approval requests.

        Invalid arguments are rejected at once (journaled REJECTED by "sagacity"); a pending call
        whose consumed decision is still unused in this saga (same call id and hash) reuses it;
        every other call gets a request and an AWAITING_APPROVAL entry. When requests were made,
        the snapshot (without application context and approvals) is stored for resume: sealed
        under the saga's data key when values are stored, masked otherwise
        (``core.approval_args``). A request (version 2) stores and hashes the committed
        arguments, and the clear ones sealed.

        Raises:
            DataKeyError: the saga's data key cannot be read (``WRONG_MASTER_KEY``).
            EvidenceError: the saga does not verify (the decisions to reuse are read from
                verified entries only, as resume reads them); nothing was reused or asked.
            JournalError: the journal could not be read or written.
        """
        graph = agent_graph(agent)
        now = self.clock()
        secrets = await self.secrets_for(saga.saga_id, saga.journal)
        unused = await self._unused_decisions(saga.saga_id)
        waiting = [call for item in state.get_interruptions()
                   if (call := await self._sort_pending(saga, graph, state, item, unused, secrets))
                   is not None]
        if not waiting:
            return PauseOutcome((), state)
        # The snapshot's hash is journaled with every request, inside the chain: resume refuses a
        # stored snapshot that differs in any byte (an injected call, edited arguments...). The
        # hash covers the stored text (sealed or masked): checked before anything is opened.
        snapshot = stored_snapshot(secrets, _strip_snapshot(state.to_json()))
        snapshot_hash = sha256_hex(snapshot.encode("utf-8"))
        requests = [await self._ask(saga, call, snapshot_hash, now, secrets) for call in waiting]
        await self.store.save_snapshot(saga.saga_id, snapshot)
        if self.evidence is not None:
            try:
                await self.evidence.checkpoint(self.journal, saga.saga_id)  # the head at the pause
            except Exception as exc:  # noqa: BLE001 - as at close: the pause stands; reported
                saga.journal_errors.append(f"checkpoint not written at the pause: {describe_error(exc)}")
        return PauseOutcome(tuple(requests), state)

    async def _unused_decisions(self, saga_id: str) -> dict[tuple[Any, Any, str, int], Any]:
        """Decisions a resume consumed and no INTENT used yet, by (tool, call id, hash): the SDK
        asked again for the same call; the journal, not memory, says so (works in any process).
        Read through the evidence check as resume reads them: under a keyring a forged, untagged
        APPROVED + CONSUMED is refused, never reused."""
        entries = await verified_entries(self.journal, saga_id, self.evidence)
        return {(d.tool, d.call_id, d.args_hash, d.version): d
                for d in consumed_decisions(entries) if d.used_by is None}

    async def _sort_pending(self, saga: Saga, graph: Any, state: Any, item: Any,
                            unused: dict[tuple[Any, Any, str, int], Any],
                            secrets: SagaSecrets) -> _Pending | None:
        """The call ``item`` waits for if it needs a human; ``None`` when it was decided at
        once: invalid arguments rejected (journaled REJECTED by "sagacity"), or an unused
        consumed decision for the same call and hash (of its version) applied again."""
        name = item.tool_name or ""
        call_id = getattr(item, "call_id", None)
        try:
            args, raw_kept = await approval_args(graph, item)
        except (ApprovalError, EncodingError) as exc:
            await self.journal.append(
                saga.saga_id, Phase.REJECTED, write_key=f"auto-reject:{uuid.uuid4().hex}",
                tool=name, call_id=call_id,
                payload={"request_id": None, "approver": "sagacity", "reason": str(exc),
                         "raw_args": pending_raw_arguments(item)},
            )
            state.reject(item, rejection_message=AUTO_REJECTION)
            return None
        spec = _sensitivity(graph, item)
        committed = committed_args(secrets, args, spec)
        digest = args_hash(committed)
        reused = unused.get((name, call_id, digest, ARGS_VERSION))
        if reused is None and committed == args:  # a version 1 decision: only without sensitive values
            reused = unused.get((name, call_id, digest, 1))
        if reused is not None:
            if reused.approved:
                state.approve(item)
            else:
                state.reject(item)
            return None
        declared = reversibility_of(tool_of(graph, item))
        journaled_raw = committed_raw_args(secrets, raw_kept, spec)
        if raw_kept is None and declared is None:
            # Journaled from outside its body: its INTENT stores the raw text, committed as a
            # whole when it holds a sensitive value; the pause journals that same commitment
            # (core.approval_rule compares them), and nothing when the text stays clear.
            raw_text = pending_raw_arguments(item)
            whole = committed_raw_args(secrets, raw_text, spec)
            journaled_raw = whole if whole != raw_text else None
        return _Pending(name, call_id, args, raw_kept, committed, journaled_raw, digest,
                        declared or mcp_reversibility(item),
                        getattr(getattr(item, "agent", None), "name", None), spec)

    async def _ask(self, saga: Saga, call: _Pending, snapshot_hash: str,
                   now: dt.datetime, secrets: SagaSecrets) -> ApprovalRequest:
        """Make the approval request for ``call``: AWAITING_APPROVAL journaled (with the
        snapshot's hash and the committed arguments), then the request stored (committed
        arguments, raw text masked, clear ones sealed when values are stored)."""
        raw_shown = call.raw_args
        if raw_shown is not None:
            raw_shown = redact_text(raw_shown, call.spec, tuple(secrets.known)) or raw_shown
        request = ApprovalRequest(
            request_id=f"apr-{uuid.uuid4().hex}",
            saga_id=saga.saga_id,
            call_id=call.call_id,
            tool=call.tool,
            args=call.committed,
            raw_args=raw_shown,
            args_hash=call.digest,
            created_at=format_timestamp(now),
            expires_at=(format_timestamp(now + dt.timedelta(seconds=self.ttl))
                        if self.ttl is not None else None),
            args_version=ARGS_VERSION,
            args_sealed=sealed_request_args(secrets, call.args, call.raw_args,
                                            call.committed != call.args or raw_shown != call.raw_args),
        )
        step = begin("approval.pause", **{
            "gen_ai.tool.name": call.tool, "gen_ai.tool.call.id": call.call_id,
            "sagacity.saga.id": saga.saga_id, "sagacity.approval.request_id": request.request_id,
            "sagacity.args.hash": call.digest, "sagacity.reversibility": call.kind,
        })
        try:
            paused = await self.journal.append(
                saga.saga_id, Phase.AWAITING_APPROVAL, write_key=f"await:{request.request_id}",
                tool=call.tool, call_id=call.call_id,
                payload={"request_id": request.request_id, "args": call.committed,
                         "raw_args": call.journaled_raw, "args_hash": call.digest,
                         "args_version": ARGS_VERSION,
                         "expires_at": request.expires_at, "snapshot_sha256": snapshot_hash,
                         "reversibility": call.kind, "agent": call.agent},
            )
        except BaseException as exc:
            if step is not None:
                step.end(describe_error(exc))
            raise
        if step is not None:
            step.sensitive["sagacity.call.args"] = masked(call.committed)
            step.end(**{"sagacity.call.seq": paused.seq})
        await self.store.create(request)
        return request

    # --- deciding -------------------------------------------------------------------------
    async def decide(
        self, request_id: str, *, approve: bool, approver: str, reason: str | None = None
    ) -> ApprovalRequest:
        """Journal an APPROVED / REJECTED entry for ``request_id`` and record it in the store.

        Deciding does not consume the request (resume does). The journal entry is written first:
        the store is never the only evidence of a decision.

        Raises:
            ApprovalError: unknown, consumed or expired request, a request with no recorded
                hash, an empty approver, a second, different decision, or a request whose tool,
                call, arguments or hash in the store differ from those journaled at the pause.
        """
        if not approver:
            raise ApprovalError("a decision needs the approver's identity", code="NO_APPROVER")
        request = await self.store.get(request_id)
        if request is None:
            raise ApprovalError(f"unknown approval request {request_id!r}", code="UNKNOWN_REQUEST")
        if request.consumed_at is not None:
            raise ApprovalError(f"approval request {request_id} was already consumed",
                                code="REQUEST_CONSUMED")
        if not request.args_hash:
            raise ApprovalError(f"approval request {request_id} has no recorded argument hash",
                                code="NO_ARGS_HASH")
        now = self.clock()
        if request.expired(now):
            raise ApprovalError(f"approval request {request_id} expired at {request.expires_at}",
                                code="REQUEST_EXPIRED")
        wanted = "approved" if approve else "rejected"
        if request.decision is not None:
            if request.decision == wanted:
                return request  # the same decision again: nothing new to record
            raise ApprovalError(
                f"approval request {request_id} was already {request.decision} by "
                f"{request.approver}; a decision cannot be changed", code="DECISION_CHANGED"
            )
        entries = await verified_entries(self.journal, request.saga_id, self.evidence)
        if any(e.phase is Phase.SAGA_CLOSED for e in entries):
            raise ApprovalError(f"saga {request.saga_id} is closed; nothing can run on this decision",
                                code="SAGA_CLOSED")
        _check_against_journal(request, entries)
        signature = self._signature(request, approve, approver)
        phase = Phase.APPROVED if approve else Phase.REJECTED
        step = begin("approval.decision", **{
            "gen_ai.tool.name": request.tool, "gen_ai.tool.call.id": request.call_id,
            "sagacity.saga.id": request.saga_id, "sagacity.approval.request_id": request_id,
            "sagacity.args.hash": request.args_hash, "sagacity.approval.decision": wanted,
            "sagacity.approval.wait_seconds": seconds_since(request.created_at, now),
            **linked_attrs(entries, request_id=request_id),
        })
        try:
            decided = await self.journal.append(
                request.saga_id, phase, write_key=f"decision:{request_id}", tool=request.tool,
                call_id=request.call_id,
                payload={"request_id": request_id, "args_hash": request.args_hash,
                         "approver": approver, "reason": reason, **signature},
            )
        except Exception as exc:
            if step is not None:
                step.end(describe_error(exc))
            raise ApprovalError(f"decision on {request_id} could not be journaled: {exc}",
                                code="DECISION_NOT_JOURNALED") from exc
        if step is not None:
            step.sensitive["sagacity.approval.approver"] = approver
            step.end(**{"sagacity.call.seq": decided.seq})
        return await self.store.decide(
            request_id, "approved" if approve else "rejected", approver, reason, now
        )

    def _signature(self, request: ApprovalRequest, approve: bool, approver: str) -> dict[str, Any]:
        """The decision's signature, ``{}`` when none is needed or allowed here.

        Raises:
            ApprovalError: an approval this host cannot sign as its own verify keyring requires:
                journaled, it would fail verification and leave the saga impossible to resume,
                recover or close (every one of them verifies first).
        """
        keyring = self.evidence.keyring if self.evidence is not None else None
        problem = self.evidence.decision_key_problem if self.evidence is not None else None
        if problem is not None:
            if approve:
                raise ApprovalError(
                    f"cannot approve {request.request_id} here: {problem}, so the approval would "
                    "not verify and the saga could no longer be resumed, recovered or closed; "
                    "approve from a host holding a decision key (nothing was journaled)",
                    code="NO_DECISION_KEY",
                )
            return {}  # an unsigned rejection verifies; one signed by a refused key would not
        if keyring is None:
            return {}
        return {"signature": sign_decision(
            keyring, saga_id=request.saga_id, request_id=request.request_id,
            call_id=request.call_id, args_hash=request.args_hash, approved=approve, approver=approver,
        )}

    # --- resuming -------------------------------------------------------------------------
    async def _journaled(self, saga_id: str) -> _Journaled:
        """What the saga's journal records about its approval requests.

        Raises:
            ApprovalError: the saga is closed.
        """
        record = _Journaled()
        for e in await verified_entries(self.journal, saga_id, self.evidence):
            if not isinstance(e.payload, dict) or not e.payload.get("request_id"):
                continue
            rid = e.payload["request_id"]
            if e.phase in (Phase.APPROVED, Phase.REJECTED):
                record.decisions[rid] = (e.phase is Phase.APPROVED, e.payload.get("args_hash") or "")
            elif e.phase is Phase.AWAITING_APPROVAL:
                record.snapshots[rid] = e.payload.get("snapshot_sha256") or ""
                record.kinds[rid] = e.payload.get("reversibility")
                record.versions[rid] = _journaled_version(e.payload)
            elif e.phase is Phase.CONSUMED:
                record.consumed.add(rid)
            elif e.phase is Phase.SAGA_CLOSED:
                raise ApprovalError(f"saga {saga_id} is closed; its approvals can no longer be used",
                                    code="SAGA_CLOSED")
        return record

    async def _journal_consumed(self, saga: Saga, request: ApprovalRequest, approved: bool,
                                at: dt.datetime) -> None:
        """Journal CONSUMED for a request the store just consumed at ``at`` (retried once, same
        key). ``consumed_at`` is on the desk's clock, as the request's ``expires_at`` is: verify
        refuses an execution under a request consumed at or after its expiry
        (``core.approval_rule``).

        Raises:
            ApprovalError: it could not be journaled: nothing will run on this decision.
        """
        # CONSUMED is a claim (core.journal): this resume's nonce, the same on its retry, so a
        # second resumer that reaches the same key gets a refusal, never this entry as its own.
        payload = {"request_id": request.request_id, "args_hash": request.args_hash,
                   "decision": "approved" if approved else "rejected",
                   "consumed_at": format_timestamp(at), CLAIMANT_KEY: new_claimant()}
        for attempt in (1, 2):
            try:
                await self.journal.append(
                    saga.saga_id, Phase.CONSUMED, write_key=f"consumed:{request.request_id}",
                    tool=request.tool, call_id=request.call_id, payload=payload,
                )
                return
            except ClaimTakenError as exc:
                raise ApprovalError(
                    f"request {request.request_id} was already consumed by another resume "
                    f"(CONSUMED seq {exc.seq}); the call will not run on it here",
                    code="CONSUMED_BY_ANOTHER",
                ) from exc
            except Exception as exc:  # noqa: BLE001 - fail closed below
                if attempt == 2:
                    raise ApprovalError(
                        f"the consumption of {request.request_id} could not be journaled ({exc}); "
                        "the call will not run on it: recover the saga",
                        code="CONSUMED_NOT_JOURNALED",
                    ) from exc

    async def restore(
        self, saga: Saga, agent: Agent[Any], context: Any = None
    ) -> tuple[Any, list[Grant]]:
        """Load the saga's snapshot, verify every pending call against the store and the
        journal, consume the requests atomically, and apply the decisions.

        Args:
            context: the trusted application context to run with (the snapshot carries none).

        Returns:
            The ``RunState`` to resume and the decisions consumed (one per decided call; each
            also journaled as CONSUMED, which is what lets an approved call run).

        Raises:
            ApprovalError: no snapshot; a sealed snapshot this process cannot open
                (``NO_DATA_KEY``, ``DATA_ERASED``); a pending call with no request (or a request
                of another saga or call); a consumed or expired request; no journaled decision
                for the request and its hash; a pending call whose arguments do not hash to the
                decided hash (``SENSITIVE_NOT_STORED`` when the masked snapshot lost the value it
                needs; ``REQUEST_VERSION_SENSITIVE`` for a request made before sensitive values
                were committed that holds one); undecided calls (listed). Nothing is consumed or
                run then.
        """
        text = await self.store.load_snapshot(saga.saga_id)
        if text is None:
            raise ApprovalError(f"saga {saga.saga_id} has no stored snapshot to resume", code="NO_SNAPSHOT")
        journaled = await self._journaled(saga.saga_id)
        snapshot_hash = sha256_hex(text.encode("utf-8"))
        keys = await self._opened(saga, text)
        try:
            state = await RunState.from_json(
                agent, _strip_snapshot(parse_json(keys.text)),
                context_override=RunContextWrapper(context=context),
            )
        except Exception as exc:  # noqa: BLE001 - a snapshot the SDK refuses is refused here too
            raise ApprovalError(
                f"the stored snapshot of saga {saga.saga_id} cannot be restored: {exc}",
                code="SNAPSHOT_UNREADABLE",
            ) from exc
        requests = await self._open_requests(saga.saga_id, journaled, snapshot_hash)
        now = self.clock()
        plan = await self._plan(saga.saga_id, agent_graph(agent), state, requests, journaled, now,
                                keys)
        await self.store.consume([r.request_id for _, r, _ in plan], now)
        grants: list[Grant] = []
        for item, request, approved in plan:
            # The journal is the record: an irreversible body runs only on a CONSUMED entry
            # (core.grants), written after the store's atomic consume, before the run goes on.
            await self._journal_consumed(saga, request, approved, now)
            grants.append(Grant(request.request_id, request.call_id, request.tool, request.args_hash, approved))
            if approved:
                state.approve(item)
            else:
                reason = (await self.store.get(request.request_id))
                message = f"Tool execution was not approved{': ' + reason.reason if reason and reason.reason else '.'}"
                state.reject(item, rejection_message=message)
        await rebuild_pending_calls(saga, agent, state)  # nested fallback calls left open
        return state, grants

    async def _opened(self, saga: Saga, stored: str) -> _Opened:
        """The stored snapshot opened with the saga's secrets (a masked or plain one as is).

        Raises:
            ApprovalError: ``DATA_ERASED`` (the saga's key was erased) or ``NO_DATA_KEY`` (sealed
                under a key this process does not hold: no or another master key).
        """
        try:
            secrets = await self.secrets_for(saga.saga_id, saga.journal)
            text, sealed = opened_snapshot(secrets, stored)
        except DataErasedError as exc:
            raise ApprovalError(f"saga {saga.saga_id}: its data key was erased, so its stored "
                                f"snapshot cannot be opened ({exc})", code="DATA_ERASED") from exc
        except DataKeyError as exc:
            raise ApprovalError(
                f"saga {saga.saga_id}: the stored snapshot is encrypted under the saga's data key, "
                f"which this process cannot open ({exc}); resume where SAGACITY_DATA_KEY holds the "
                "master key it was paused with", code="NO_DATA_KEY") from exc
        return _Opened(secrets, text, sealed)

    async def _open_requests(self, saga_id: str, journaled: _Journaled,
                             snapshot_hash: str) -> dict[str | None, ApprovalRequest]:
        """The saga's unconsumed requests by call id, each checked against the journal: never
        consumed by a resume, and paused with this very snapshot.

        Raises:
            ApprovalError: none; one the journal says was consumed; a snapshot that changed.
        """
        requests = {r.call_id: r for r in await self.store.list(saga_id) if r.consumed_at is None}
        if not requests:
            raise ApprovalError(f"saga {saga_id} has no unconsumed approval request to resume",
                                code="NOTHING_TO_RESUME")
        # The journal is the record: a request a resume consumed is never pending again, whatever
        # the store's consumed flag says now.
        revived = [r.request_id for r in requests.values() if r.request_id in journaled.consumed]
        if revived:
            raise ApprovalError(
                f"request(s) {', '.join(revived)} of saga {saga_id} were already consumed "
                "(CONSUMED in the journal); the store's consumed flag was reset",
                code="REQUEST_CONSUMED",
            )
        # The snapshot must be, byte for byte, the one journaled with the pending requests: checked
        # for every request, whatever the snapshot itself claims is pending.
        changed = [r.request_id for r in requests.values()
                   if journaled.snapshots.get(r.request_id) != snapshot_hash]
        if changed:
            raise ApprovalError(
                f"the stored snapshot of saga {saga_id} (SHA-256 {snapshot_hash}) is not the "
                f"one journaled with request(s) {', '.join(changed)}; it was changed",
                code="SNAPSHOT_CHANGED",
            )
        return requests

    async def _plan(self, saga_id: str, graph: Any, state: Any,
                    requests: dict[str | None, ApprovalRequest], journaled: _Journaled,
                    now: dt.datetime, keys: _Opened) -> list[tuple[Any, ApprovalRequest, bool]]:
        """Each pending call of the snapshot with its checked request and journaled decision
        (pending calls with invalid arguments are rejected here at once).

        Raises:
            ApprovalError: a request without a pending call, or one with no decision yet (all
                listed); a pending call its request does not cover (:meth:`_request_for`).
        """
        plan: list[tuple[Any, ApprovalRequest, bool]] = []
        undecided: list[str] = []
        for item in state.get_interruptions():
            try:
                args, _raw = await approval_args(graph, item)
            except (ApprovalError, EncodingError):
                state.reject(item, rejection_message=AUTO_REJECTION)
                continue
            request = _request_for(saga_id, graph, item, args, requests, journaled, now, keys)
            decision = journaled.decisions.get(request.request_id)
            if decision is None:
                undecided.append(request.request_id)
                continue
            approved, decided_hash = decision
            if decided_hash != request.args_hash:
                raise ApprovalError(
                    f"the journaled decision on {request.request_id} is for hash {decided_hash}, "
                    f"not {request.args_hash}", code="DECISION_HASH_MISMATCH"
                )
            plan.append((item, request, approved))
        covered = {r.request_id for _, r, _ in plan} | set(undecided)
        missing = [r.request_id for r in requests.values() if r.request_id not in covered]
        if missing:
            raise ApprovalError(
                "the stored snapshot has no pending call for request(s) " + ", ".join(missing),
                code="REQUEST_WITHOUT_CALL",
            )
        if undecided:
            raise ApprovalError(
                "cannot resume: these approval requests have no decision yet: " + ", ".join(undecided),
                code="UNDECIDED",
            )
        return plan


def _request_for(saga_id: str, graph: Any, item: Any, args: dict[str, Any],
                 requests: dict[str | None, ApprovalRequest], journaled: _Journaled,
                 now: dt.datetime, keys: _Opened) -> ApprovalRequest:
    """The unconsumed request of the pending call ``item`` (validated ``args``), checked to
    cover it exactly: same saga and tool, a recorded hash, unexpired, the tool declared as when
    the run paused, the request's version the journaled one, its definition unchanged, its
    arguments hashing to the request's (:func:`_bound_args`, :func:`_check_hash`).

    Raises:
        ApprovalError: any of these fails (each with its own code).
    """
    name = item.tool_name or ""
    call_id = getattr(item, "call_id", None)
    request = requests.get(call_id)
    if request is None or request.saga_id != saga_id or request.tool != name:
        raise ApprovalError(
            f"pending call {call_id} ({name}) has no unconsumed approval request in saga "
            f"{saga_id}", code="NO_REQUEST_FOR_CALL"
        )
    if not request.args_hash:
        raise ApprovalError(f"request {request.request_id} has no recorded hash", code="NO_ARGS_HASH")
    if request.expired(now):
        raise ApprovalError(f"request {request.request_id} expired at {request.expires_at}",
                            code="REQUEST_EXPIRED")
    kind_now = reversibility_of(tool_of(graph, item)) or mcp_reversibility(item)
    paused_kind = journaled.kinds.get(request.request_id)
    if kind_now != paused_kind:
        raise ApprovalError(
            f"tool {name!r} is declared {kind_now or 'without a saga decorator'} in the "
            f"agent given to resume, but was {paused_kind} "
            "when the run paused; resume with the same tools", code="DECLARATION_CHANGED"
        )
    if journaled.versions.get(request.request_id, 1) != request.args_version:
        raise ApprovalError(
            f"request {request.request_id} says argument-hash version {request.args_version}, "
            f"its pause journaled {journaled.versions.get(request.request_id, 1)}: the store was "
            "changed", code="REQUEST_VERSION_CHANGED")
    bound = _bound_args(request, _sensitivity(graph, item), args, keys)
    change = definition_change(request.args, bound)
    if change is not None:  # a "rug pull": refused, naming what changed
        raise ApprovalError(f"pending call {call_id} ({name}) of request {request.request_id}: "
                            f"{change}; the approval does not cover it, resume refused",
                            code="DEFINITION_CHANGED")
    _check_hash(request, f"pending call {call_id} ({name})", bound, keys)
    return request


def _bound_args(request: ApprovalRequest, spec: Sensitivity, args: dict[str, Any],
                keys: _Opened) -> Any:
    """What ``request`` binds of the pending call's clear ``args``: the committed arguments
    (version 2), or the clear ones (version 1, refused when they hold a sensitive value: their
    binding would need the clear value the journal must not keep; the human is asked again).

    Raises:
        ApprovalError: ``REQUEST_VERSION_SENSITIVE``; ``NO_DATA_KEY`` (a sensitive value and no
            key to commit it here).
    """
    if request.args_version < ARGS_VERSION:
        if holds_sensitive(request.args, spec) or holds_sensitive(args, spec):
            raise ApprovalError(
                f"request {request.request_id} was made before sensitive values were committed "
                "(argument-hash version 1) and its arguments hold one: its binding needs the "
                "clear value, which is no longer kept; void it and ask again",
                code="REQUEST_VERSION_SENSITIVE")
        return args
    try:
        return committed_args(keys.secrets, args, spec)
    except DataKeyError as exc:
        raise ApprovalError(f"request {request.request_id}: the pending call's sensitive values "
                            f"cannot be committed here ({exc})", code="NO_DATA_KEY") from exc


def _check_hash(request: ApprovalRequest, what: str, bound: Any, keys: _Opened) -> None:
    """Refuse unless ``bound`` (:func:`_bound_args`) hashes to the request's hash.

    Raises:
        ApprovalError: ``SENSITIVE_NOT_STORED`` (a masked snapshot lost a value the request
            committed: resuming would run the tool with its mask), else
            ``ARGS_HASH_MISMATCH_AT_RESUME``.
    """
    digest = args_hash(bound)
    if digest == request.args_hash:
        return
    if not keys.sealed and has_committed(request.args):
        raise ApprovalError(
            f"{what} of request {request.request_id}: its arguments held a sensitive value, and "
            "the stored snapshot keeps only its mask (no master data key when the run paused, "
            "SAGACITY_DATA_KEY); resuming would run the tool with the mask. Refused: void the "
            "request and run the call again", code="SENSITIVE_NOT_STORED")
    raise ApprovalError(
        f"{what} in the snapshot does not match request {request.request_id}: its arguments hash "
        f"to {digest}, the request to {request.args_hash}", code="ARGS_HASH_MISMATCH_AT_RESUME")


def _sensitivity(graph: Any, item: Any) -> Sensitivity:
    """What is sensitive in the paused call ``item``'s values: its tool's declaration's, else
    the defaults (an MCP tool, a tool nobody declared)."""
    tool = tool_of(graph, item)
    return sensitivity_of(declaration_of(tool) if tool is not None else None)
