"""Compensation: undo the EXECUTED effects of a failed saga in reverse sequence.

The journal is the only input: what ran, with which arguments, result and undo data, is read from
the saga's entries, so compensation works the same in the process that ran the tools and in one
that recovers the saga later. Rules (design.md, "Compensation"):

* only EXECUTED entries of compensatable tools are undone, newest first;
* each undo is bracketed by COMPENSATING and COMPENSATED / COMPENSATION_FAILED entries;
* a failing undo is journaled and the walk goes on (partial cleanup beats none);
* an INTENT with no outcome, or a COMPENSATING with no outcome, is *in doubt*: never acted on,
  always reported;
* an entry already COMPENSATED is never undone again; a COMPENSATION_FAILED one is retried with
  the same idempotency key;
* each undo runs under its declaration's ``undo_timeout`` (``core.undo.run_undo``). One that
  outlasts it, or that the walk stops waiting for because its caller was cancelled, may have
  acted: its attempt gets an *in-doubt mark* (COMPENSATION_FAILED with ``in_doubt: true``,
  ``timed_out`` or ``cancelled``, write key ``undo:SEQ:ATTEMPT:in-doubt``), it is reported in
  doubt, and the next recovery retries it with the same idempotency key (unlike a COMPENSATING
  with no outcome at all, which waits for a human). If it ends after all (a sync undo cannot be
  killed), its real end is journaled under the attempt's own end key ``undo:SEQ:ATTEMPT:end``,
  marked ``after_in_doubt``: stored once, and read as that attempt's outcome. A COMPENSATED
  from any attempt means undone, so neither order of a late end and a recovery's retry undoes
  twice or counts twice (:meth:`SagaLedger.undo_state`);
* a walk told to stop (:class:`~.undo.StopSignal`: its caller was cancelled) starts no further
  undo; those it did not start are reported failed ("not run"), for ``recover``;
* COMPENSATING is a *claim* (``core.journal``): it carries this pass's claimant nonce, so of two
  writers that read the same ledger (two recoveries, two tasks) only the one whose COMPENSATING
  landed runs the undo; the other gets :class:`~sagacity_agents.errors.ClaimTakenError`, skips
  that undo and reports it in doubt ("claimed by another writer").
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ClaimTakenError, JournalWriteError, LeaseLostError, describe_error
from .declarations import (
    Reversibility, ToolDeclaration, declaration_by_id, interchangeable, is_ambiguous,
)
from .entries import JournalEntry, Phase
from .evidence import Evidence, verified_entries
from .grants import consumed_decisions
from .journal import CLAIMANT_KEY, Journal, new_claimant
from .ledger import SagaLedger, UndoState, resolved_ran
from .lease import intent_in_doubt_note
from .observe_undo import begin_undo, end_undo
from .undo import (
    CompensationContext,
    StopSignal,
    UndoRun,
    idempotency_key,
    late_end_writer,
    lost_undo_data,
    mark_in_doubt,
    run_undo,
)

__all__ = [
    "CompensationItem",
    "CompensationReport",
    "SagaLedger",
    "UndoState",
    "compensate",
    "undo_order",
]


@dataclass(frozen=True, slots=True)
class CompensationItem:
    """One line of a compensation report."""

    seq: int
    """Sequence number of the entry the line is about (the EXECUTED or in-doubt INTENT entry)."""
    tool: str | None
    """Tool name."""
    call_id: str | None
    """The model's call id."""
    detail: str = ""
    """Why the entry is on this list (error text for failed undos)."""


@dataclass(frozen=True, slots=True)
class CompensationReport:
    """What compensation did and what is still dirty. Every list is in journal order."""

    undone: tuple[CompensationItem, ...] = ()
    """Effects whose undo ran and returned (now or in an earlier compensation)."""
    failed: tuple[CompensationItem, ...] = ()
    """Effects whose undo raised or is missing: still in the world."""
    kept_irreversible: tuple[CompensationItem, ...] = ()
    """Executed irreversible calls: approved, kept on purpose."""
    no_undo: tuple[CompensationItem, ...] = ()
    """Executed calls of tools declared without an undo, or whose undo data could not be
    journaled (``core.undo.lost_undo_data``; never undone blind): still in the world."""
    in_doubt: tuple[CompensationItem, ...] = ()
    """INTENTs (or COMPENSATINGs) with no outcome: an effect may exist; needs a human."""
    approved_not_run: tuple[CompensationItem, ...] = ()
    """Approved calls whose decision a resume consumed (CONSUMED) but that never ran (no INTENT
    used it: the process stopped in between, or the run failed first). Nothing happened; named
    so nobody assumes the approved effect exists. ``seq`` is the CONSUMED entry's."""

    @property
    def still_dirty(self) -> tuple[CompensationItem, ...]:
        """Everything that may still be in the world: failed, no-undo, kept and in-doubt."""
        items = self.failed + self.no_undo + self.kept_irreversible + self.in_doubt
        return tuple(sorted(items, key=lambda i: i.seq))

    @property
    def clean(self) -> bool:
        """True when nothing is failed, in doubt, or without undo (kept irreversible effects
        are intended and do not count)."""
        return not (self.failed or self.no_undo or self.in_doubt)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (journaled in SAGA_CLOSED and printed by the CLI)."""

        def rows(items: tuple[CompensationItem, ...]) -> list[dict[str, Any]]:
            return [
                {"seq": i.seq, "tool": i.tool, "call_id": i.call_id, "detail": i.detail} for i in items
            ]

        return {
            "undone": rows(self.undone),
            "failed": rows(self.failed),
            "kept_irreversible": rows(self.kept_irreversible),
            "no_undo": rows(self.no_undo),
            "in_doubt": rows(self.in_doubt),
            "approved_not_run": rows(self.approved_not_run),
        }


def _journaled_result(payload: dict[str, Any]) -> Any:
    """The journaled result, as bytes again when the body returned bytes (``result_type``)."""
    result = payload.get("result")
    if payload.get("result_type") == "bytes" and isinstance(result, str):
        try:
            return base64.b64decode(result, validate=True)
        except ValueError:
            return result  # not base64 (written by hand): given as journaled
    return result


def _declaration_for(
    declarations: Mapping[str, ToolDeclaration], tool: str, decl_id: Any, agent: Any = None,
    by_agent: Mapping[tuple[str | None, str], ToolDeclaration] | None = None,
) -> tuple[ToolDeclaration | None, str | None]:
    """The declaration whose undo compensates an INTENT of ``tool`` journaled with ``decl_id``
    by ``agent``, or ``None`` and why not (M-03: the wrong undo must never run).

    First the declaration bound for the INTENT's (agent, tool), if it has the journaled id; else
    the one declaration of the saga with that id (several different ones, e.g. one factory's
    tools on agents the INTENT's agent does not name: refused, not guessed; one bound only for
    other agents while the INTENT's agent has nothing bound at all, i.e. is not in the graph
    given: refused too, its tool may be another one built alike); else, when the saga bound
    none, the one this process made under the id (:func:`declaration_by_id`). A run binds each
    call's own declaration under its agent as the call starts (``Saga.note_declaration``), so
    compensation in the process that ran the calls finds the right one."""
    by_agent = by_agent or {}
    bound = by_agent.get((agent, tool)) if isinstance(agent, str) else None
    if bound is not None and (bound.declaration_id == decl_id or not isinstance(decl_id, str)):
        return bound, None
    if isinstance(decl_id, str):
        pool = [d for d in (*by_agent.values(), *declarations.values()) if d.declaration_id == decl_id]
    else:  # journals written before ids: by tool name, if only one declaration has it
        pool = [d for (_, name), d in by_agent.items() if name == tool]
        pool += [d for name, d in declarations.items() if name == tool]
    found: list[ToolDeclaration] = []
    for decl in pool:
        if not any(interchangeable(decl, known) for known in found):
            found.append(decl)
    if len(found) == 1:
        elsewhere = sorted({a for (a, name), d in by_agent.items()
                            if a != agent and interchangeable(d, found[0])}, key=str)
        if isinstance(agent, str) and elsewhere and not any(
                a == agent for (a, _name) in by_agent):
            # The INTENT's agent is not in the graph this walk was given (an agent run inside
            # a tool body, met only at run time) and the one declaration with this id is
            # another agent's: its tool may be a different one built alike. Not guessed.
            return None, (f"the journaled agent {agent!r} is not in the agent graph given here; "
                          f"declaration {decl_id} is bound only for {', '.join(map(repr, elsewhere))}, "
                          "whose tool may not be the one that ran; the undo is not guessed: "
                          "recover with an agent graph that has that agent, or give each tool "
                          "its own id (compensable(..., declaration_id=...), "
                          "protect_tool(..., declaration_id=...))")
        return found[0], None
    if found:
        return None, (f"{len(found)} different declarations of this saga share "
                      + (f"declaration {decl_id}" if isinstance(decl_id, str) else f"tool name {tool!r}")
                      + f" and none is bound for the journaled agent {agent!r}; the undo is not "
                      "guessed (a wrong undo is worse than none): recover with the agent graph "
                      "that ran it, or give each tool its own id with "
                      "compensable(..., declaration_id=...)")
    if not isinstance(decl_id, str):
        return None, None
    return declaration_by_id(decl_id), None


async def _claim_undo(
    journal: Journal, saga_id: str, write_key: str, intent: JournalEntry, claim: dict[str, Any]
) -> JournalEntry:
    """Journal the COMPENSATING claim; a storage failure is retried once with the same key and
    nonce (a lost acknowledgement returns the stored entry: the claim is this writer's)."""
    for attempt in (1, 2):
        try:
            return await journal.append(
                saga_id, Phase.COMPENSATING, write_key=write_key, tool=intent.tool,
                call_id=intent.call_id, payload=claim,
            )
        except JournalWriteError as exc:
            if attempt == 2 or type(exc) is not JournalWriteError:  # claims and closes: final
                raise
    raise AssertionError("unreachable")


def _in_doubt_detail(mark: JournalEntry | None) -> str:
    payload = mark.payload if mark is not None and isinstance(mark.payload, dict) else {}
    how = "timed out" if payload.get("timed_out") else "was cancelled"
    return (f"undo {how} (COMPENSATING seq {payload.get('compensating_seq')}) and has not ended "
            "since; it may have acted: `recover` retries it with the same idempotency key")


def undo_order(ledger: SagaLedger) -> list[Any]:
    """The calls compensation walks, in the order it walks them: newest outcome first.

    A call is walked when its outcome says its effect may exist: EXECUTED; FAILED with undo
    data recorded by the body before it failed (its change may have happened; the undo acts on
    the world as it is); RESOLVED by a human as having run. The walk is in reverse ``seq`` of
    those outcomes (the saga rule: undo the newest effect first, design.md "Compensation").

    Args:
        ledger: the saga's verified ledger.

    Returns:
        The ledger's call records (``core.ledger``), newest outcome first.
    """
    executed = [
        (c.outcome.seq, c) for c in ledger.calls.values()
        if c.outcome is not None and (
            c.outcome.phase is Phase.EXECUTED
            or (c.outcome.phase is Phase.FAILED and isinstance(c.outcome.payload, dict)
                and "undo_data" in c.outcome.payload)
            or (c.outcome.phase is Phase.RESOLVED and resolved_ran(c.outcome))
        )
    ]
    return [call for _seq, call in sorted(executed, key=lambda pair: pair[0], reverse=True)]


async def compensate(
    journal: Journal,
    saga_id: str,
    declarations: Mapping[str, ToolDeclaration],
    *,
    evidence: Evidence | None = None,
    claimant: str | None = None,
    stop: StopSignal | None = None,
    retry_timed_out: bool = True,
    agent_declarations: Mapping[tuple[str | None, str], ToolDeclaration] | None = None,
    ledger: SagaLedger | None = None,
) -> CompensationReport:
    """Undo the saga's EXECUTED compensatable effects in reverse sequence and report.

    Args:
        journal: where the saga's entries are read from and the undo entries written to.
        saga_id: the saga to compensate.
        declarations: tool name (as journaled) -> declaration holding the undo. An INTENT that
            journals a declaration id is undone by the declaration with that id (from
            ``declarations``, else the one made in this process, :func:`declaration_by_id`),
            never by another tool of the same name; an INTENT without one (journals written
            before ids existed) by the declaration of its tool name. A compensatable entry with
            no such declaration is reported as failed ("no undo registered").
        evidence: how the saga's entries are verified first (default: the hash chain alone).
        claimant: this writer's claim nonce, journaled in every COMPENSATING it writes (default:
            a fresh one per call, :func:`~sagacity_agents.core.journal.new_claimant`). Two
            concurrent calls must not share one.
        stop: set (by another task) to stop the walk: the undo running is no longer waited for
            (journaled in doubt, ``cancelled``) and no further undo starts (those are reported
            failed, "not run").
        retry_timed_out: retry undos whose latest attempt timed out or was cancelled (a
            recovery); ``False`` reports them in doubt without running them again (a second
            pass of the same run, which just gave up on them).
        agent_declarations: (agent name, tool name) -> declaration. An INTENT that journals its
            agent is undone by the declaration bound for its (agent, tool) when that one has the
            journaled id; when several different declarations share the id and none is bound
            for the INTENT's agent, the undo is not run (reported failed, still dirty).
        ledger: the saga's ledger, verified by the caller just now (``evidence`` then unused);
            ``None``: read and verified here.

    Returns:
        The report. Undos that raise are journaled as COMPENSATION_FAILED and listed under
        ``failed``; the walk goes on. An undo that outlasts its declaration's ``undo_timeout``
        (seconds) is journaled in doubt (an in-doubt mark, see the module notes) and listed
        under ``in_doubt``; the walk goes on. An undo whose COMPENSATING key another writer
        claimed first is not run and is listed under ``in_doubt`` ("claimed by another
        writer"): its outcome is that writer's to journal; a later recovery reads it.

    Raises:
        EvidenceError: the saga's entries do not verify: no undo is run, nothing is written.
        JournalError: the journal could not be read. A COMPENSATING entry that cannot be written
            means that undo is not run (listed as failed); an undo whose outcome cannot be
            written is listed in doubt; the walk goes on in both cases.
        LeaseLostError: ``journal`` is a saga's fenced view (``core.fence``) and another run took
            the saga's lease over: the walk stops before the next undo (the undo that ran is
            journaled late); the rest is the other run's.
        asyncio.CancelledError: the calling task was cancelled; the undo running was abandoned
            and journaled in doubt (best effort) first.
    """
    # Undo only what verified evidence says happened: an edited EXECUTED entry could aim an
    # undo at someone else's booking.
    if ledger is None:
        ledger = SagaLedger(await verified_entries(journal, saga_id, evidence))
    claimant = claimant or new_claimant()
    undone: list[CompensationItem] = []
    failed: list[CompensationItem] = []
    kept: list[CompensationItem] = []
    no_undo: list[CompensationItem] = []
    in_doubt = [
        CompensationItem(e.seq, e.tool, e.call_id, intent_in_doubt_note(e, ledger.entries))
        for e in ledger.in_doubt()
    ]
    for call in undo_order(ledger):
        assert call.outcome is not None
        intent_payload = call.intent.payload or {}
        kind = intent_payload.get("reversibility")
        item = CompensationItem(call.outcome.seq, call.intent.tool, call.intent.call_id)
        if kind == Reversibility.IRREVERSIBLE.value:
            kept.append(item)
            continue
        if kind == Reversibility.NO_UNDO.value:
            no_undo.append(item)
            continue
        if kind == "undeclared":  # a tool nobody declared ran: its effect is unknown (M-01)
            no_undo.append(CompensationItem(item.seq, item.tool, item.call_id, "no undo declared"))
            continue
        if kind != Reversibility.COMPENSATABLE.value:
            continue  # read-only
        lost = lost_undo_data(call.outcome.payload)
        if lost is not None:  # never run an undo without its data: still dirty, said why
            no_undo.append(CompensationItem(item.seq, item.tool, item.call_id,
                                            f"undo not run: {lost}; the effect may exist"))
            continue
        state, said = ledger.undo_state(call)
        if state is UndoState.UNDONE:
            undone.append(item)
            continue
        if state is UndoState.IN_DOUBT:
            in_doubt.append(
                CompensationItem(item.seq, item.tool, item.call_id, "COMPENSATING without outcome")
            )
            continue
        if state is UndoState.TIMED_OUT and (not retry_timed_out or (stop and stop.is_set())):
            in_doubt.append(CompensationItem(item.seq, item.tool, item.call_id, _in_doubt_detail(said)))
            continue
        if stop is not None and stop.is_set():
            failed.append(CompensationItem(
                item.seq, item.tool, item.call_id,
                "undo not run: compensation was stopped before it (its caller was cancelled); "
                "`recover` runs it"))
            continue
        decl_id = intent_payload.get("declaration")
        decl, unsure = _declaration_for(declarations, call.intent.tool or "", decl_id,
                                        intent_payload.get("agent"), agent_declarations)
        key = idempotency_key(saga_id, call.outcome.seq)
        attempt = len(call.attempts) + 1
        claim = {"target_seq": call.outcome.seq, "idempotency_key": key, "attempt": attempt,
                 CLAIMANT_KEY: claimant}
        # One observed step per undo, begun before its claim so that its entries carry its span.
        step = begin_undo(saga_id, call.intent, call.outcome.seq, key, attempt, decl_id)
        before = (len(undone), len(failed), len(in_doubt))
        try:
            try:
                start = await _claim_undo(journal, saga_id, f"undo:{call.outcome.seq}:{attempt}:start",
                                          call.intent, claim)
            except LeaseLostError:
                raise  # another run holds the saga now: the rest of the walk is theirs
            except ClaimTakenError as taken:
                # Another writer (a second recovery, another task) claimed this undo first: it is
                # theirs to run and to journal; running it here too would apply it twice.
                in_doubt.append(CompensationItem(
                    item.seq, item.tool, item.call_id,
                    f"undo claimed by another writer (COMPENSATING seq {taken.seq}); not run here: "
                    "its outcome is theirs to journal, recover again to read it",
                ))
                continue
            except Exception as exc:  # noqa: BLE001 - record intent before acting: no entry, no undo
                failed.append(CompensationItem(
                    item.seq, item.tool, item.call_id,
                    f"undo not run: COMPENSATING could not be journaled ({describe_error(exc)})",
                ))
                continue
            outcome_payload: dict[str, Any] = {"target_seq": call.outcome.seq, "compensating_seq": start.seq}
            end_key = f"undo:{call.outcome.seq}:{attempt}:end"
            error: str | None = None
            run = UndoRun()
            if stop is not None and stop.is_set():  # set while the claim was written: not started
                error = ("undo not run: compensation was stopped before it (its caller was "
                         "cancelled); `recover` runs it")
            elif decl is None or decl.undo is None:
                error = f"no undo registered for tool {call.intent.tool!r} in this process" + (
                    f" (declaration {decl_id})" if decl_id else "")
                if unsure is not None:
                    error = f"undo not run: {unsure}"
                elif isinstance(decl_id, str) and is_ambiguous(decl_id):
                    error = (f"declaration {decl_id} names several different tools in this process "
                             "(one factory or lambdas); the undo is not guessed: give each tool its "
                             "own id with compensable(..., declaration_id=...)")
            else:
                outcome_payload_ctx = call.outcome.payload or {}
                ctx = CompensationContext(
                    saga_id=saga_id,
                    seq=call.outcome.seq,
                    tool=call.intent.tool or "",
                    call_id=call.intent.call_id,
                    args=intent_payload.get("args") or {},
                    result=_journaled_result(outcome_payload_ctx),
                    undo_data=outcome_payload_ctx.get("undo_data"),
                    idempotency_key=key,
                    raw_args=intent_payload.get("raw_args"),
                )
                late = late_end_writer(journal, saga_id, end_key, call.intent, outcome_payload)
                try:
                    run = await run_undo(decl.undo, ctx, timeout=decl.undo_timeout, stop=stop,
                                         on_late_end=late)
                except asyncio.CancelledError:
                    # This walk's own task was cancelled: the undo was abandoned; say so, then stop.
                    await mark_in_doubt(journal, saga_id, call.intent, outcome_payload,
                                        UndoRun(stopped="cancelled"), decl.undo_timeout, attempt)
                    raise
                if run.error is not None:
                    error = describe_error(run.error)
            if run.stopped is not None:
                assert decl is not None
                detail = await mark_in_doubt(journal, saga_id, call.intent, outcome_payload, run,
                                             decl.undo_timeout, attempt)
                in_doubt.append(CompensationItem(item.seq, item.tool, item.call_id, detail))
                continue
            phase = Phase.COMPENSATED if error is None else Phase.COMPENSATION_FAILED
            if error is not None:
                outcome_payload["error"] = error
            try:
                await journal.append(
                    saga_id,
                    phase,
                    write_key=end_key,
                    tool=call.intent.tool,
                    call_id=call.intent.call_id,
                    payload=outcome_payload,
                )
            except Exception as exc:  # noqa: BLE001 - the undo's outcome is known here, not in the journal
                note = f"undo {'ran' if error is None else 'failed'} but its outcome could not be journaled ({describe_error(exc)})"
                in_doubt.append(CompensationItem(item.seq, item.tool, item.call_id, note))
                continue
            if error is None:
                undone.append(item)
            else:
                failed.append(CompensationItem(item.seq, item.tool, item.call_id, error))
        finally:
            end_undo(step, before, undone, failed, in_doubt)
    by_seq = lambda items: tuple(sorted(items, key=lambda i: i.seq))  # noqa: E731
    return CompensationReport(
        undone=tuple(undone),
        failed=tuple(failed),
        kept_irreversible=by_seq(kept),
        no_undo=by_seq(no_undo),
        in_doubt=by_seq(in_doubt),
        approved_not_run=approved_never_run(ledger.entries),
    )


def approved_never_run(entries: list[JournalEntry]) -> tuple[CompensationItem, ...]:
    """Approved, consumed decisions no INTENT used (``core.grants``), as report lines."""
    by_request = {e.payload.get("request_id"): e.seq for e in entries
                  if e.phase is Phase.CONSUMED and isinstance(e.payload, dict)}
    return tuple(
        CompensationItem(by_request.get(d.request_id, 0), d.tool, d.call_id,
                         f"approved (request {d.request_id}) and consumed, but never ran: no INTENT")
        for d in consumed_decisions(entries) if d.approved and d.used_by is None
    )
