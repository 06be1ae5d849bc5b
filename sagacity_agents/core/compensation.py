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
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClaimTakenError, DataKeyError, JournalWriteError, LeaseLostError, describe_error
from .canonical import canonical_bytes
from .data_keys import SagaSecrets
from .declarations import (
    Reversibility, ToolDeclaration, interchangeable, is_ambiguous, unresolved_declaration,
)
from .entries import JournalEntry, Phase
from .evidence import Evidence, verified_entries
from .identity import Derivation, derivation_of, journal_id_of
from .journal import CLAIMANT_KEY, Journal, new_claimant
from .ledger import SagaLedger, UndoState
from .lease import intent_in_doubt_note
from .observe_undo import begin_undo, end_undo
from .protection import erased_reason, held_secrets, undo_payloads
from .undo import (
    CompensationContext,
    StopSignal,
    UndoRun,
    late_end_writer,
    lost_undo_data,
    mark_in_doubt,
    missing_undo_needs,
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

    def __str__(self) -> str:
        """``send_email (call e1): no undo declared``: the tool, the model's call id, the detail."""
        return f"{self.tool} (call {self.call_id})" + (f": {self.detail}" if self.detail else "")


class DirtyItems(tuple[CompensationItem, ...]):
    """:attr:`CompensationReport.still_dirty`: a tuple of items whose ``str()`` is one line per
    item, labelled with the list it comes from (``not undone: send_email (call e1): no undo
    declared``), so ``print(report.still_dirty)`` reads as the README shows it."""

    labels: tuple[str, ...]
    """Each item's list: ``undo failed``, ``not undone``, ``kept (irreversible)``, ``in doubt``."""

    def __new__(cls, labelled: Any = ()) -> DirtyItems:
        """``labelled``: ``(label, item)`` pairs, in order."""
        pairs = list(labelled)
        made = super().__new__(cls, [item for _, item in pairs])
        made.labels = tuple(label for label, _ in pairs)
        return made

    def __str__(self) -> str:
        if not self:
            return "()"  # nothing dirty prints as the empty tuple it equals
        return "\n".join(f"{label}: {item}" for label, item in zip(self.labels, self))


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
    contradicted: tuple[CompensationItem, ...] = ()
    """Calls answered "not run" (a human's RESOLVED, a check's CHECKED) whose own outcome
    landed after all (``core.ledger.Contradiction``, read from the journal, never written): the
    outcome stands and the call is undone (or reported) like any effect. ``seq`` is the
    outcome's; ``detail`` says ``the answer "not run" (seq A) was contradicted by the call's
    own outcome (seq N)``."""
    read_seq: int = field(default=0, compare=False)
    """The last seq of the entries the walk acted on (its verified snapshot; 0: none): an
    entry after it was not seen, so whoever closes the saga on this report checks that only
    its own entries followed (``core.saga.closing``). Not in :meth:`to_dict`."""

    @property
    def still_dirty(self) -> DirtyItems:
        """Everything that may still be in the world: failed, no-undo, kept and in-doubt, by
        seq; printed one labelled line per item (:class:`DirtyItems`)."""
        labelled = [(label, item) for label, items in (
            ("undo failed", self.failed), ("not undone", self.no_undo),
            ("kept (irreversible)", self.kept_irreversible), ("in doubt", self.in_doubt),
        ) for item in items]
        return DirtyItems(sorted(labelled, key=lambda pair: pair[1].seq))

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
            "contradicted": rows(self.contradicted),
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
    by_agent: Mapping[tuple[str | None, str], ToolDeclaration] | None = None, scope: Any = None,
) -> tuple[ToolDeclaration | None, str | None]:
    """The declaration whose undo compensates an INTENT of ``tool`` journaled with ``decl_id``
    and ``scope`` by ``agent``, or ``None`` and why not (the wrong undo must never run).

    Only declarations bound on the saga count (the agent graph given, and each call's own
    declaration noted as it starts, ``Saga.note_declaration``), never one this process made
    elsewhere: a recovery given tenant A's agent must not run A's undo on tenant B's calls.
    Each must have the INTENT's scope (``None`` when it journals none). First the one bound
    for the INTENT's (agent, tool), if it has the journaled id; else the one declaration of the
    saga with that id (several different ones, e.g. one factory's tools on agents the INTENT's
    agent does not name: refused, not guessed; one bound only for other agents while the
    INTENT's agent has nothing bound at all, i.e. is not in the graph given: refused too, its
    tool may be another one built alike); else an adapter's word on an id it knows
    (:func:`unresolved_declaration`: an undo that only fails saying why)."""
    by_agent = by_agent or {}
    scope = scope if isinstance(scope, str) else None
    bound = by_agent.get((agent, tool)) if isinstance(agent, str) else None
    if bound is not None and bound.scope == scope and (
            bound.declaration_id == decl_id or not isinstance(decl_id, str)):
        return bound, None
    if isinstance(decl_id, str):
        pool = [d for d in (*by_agent.values(), *declarations.values()) if d.declaration_id == decl_id]
    else:  # journals written before ids: by tool name, if only one declaration has it
        pool = [d for (_, name), d in by_agent.items() if name == tool]
        pool += [d for name, d in declarations.items() if name == tool]
    other_scopes = sorted({repr(d.scope) for d in pool if d.scope != scope})
    found: list[ToolDeclaration] = []
    for decl in pool:
        if decl.scope == scope and not any(interchangeable(decl, known) for known in found):
            found.append(decl)
    if not found and other_scopes:
        return None, (f"declaration {decl_id} with scope {scope!r} is not in the agent graph "
                      f"given here (it declares that id only with scope {', '.join(other_scopes)}); "
                      "the undo is not guessed: recover with the agent built for that scope "
                      "(recover --all --app takes a callable given the saga's scope)")
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
    return unresolved_declaration(decl_id), None


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

    A call is walked when its outcome says its effect may exist (``core.ledger.has_effect``):
    EXECUTED; FAILED with undo data recorded by the body before it failed (its change may have
    happened; the undo acts on the world as it is); RESOLVED by a human, or CHECKED by a
    far-side check, as having run (undone with the answer's ``undo_data``, result ``None``).
    The call's own outcome outranks an answer "not run" (``core.ledger``): such a call is
    walked with its outcome's result and undo data. The walk is in reverse ``seq`` of those
    outcomes (the saga rule: undo the newest effect first, design.md "Compensation").

    Args:
        ledger: the saga's verified ledger.

    Returns:
        The ledger's call records (``core.ledger``), newest outcome first.
    """
    return sorted(ledger.compensable(), key=lambda call: call.outcome.seq, reverse=True)


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
    secrets: SagaSecrets | None = None,
) -> CompensationReport:
    """Undo the saga's EXECUTED compensatable effects in reverse sequence and report.

    Args:
        journal: where the saga's entries are read from and the undo entries written to.
        saga_id: the saga to compensate.
        declarations: tool name (as journaled) -> declaration holding the undo. An INTENT's
            declaration id and scope pick its undo here or in ``agent_declarations`` (never
            elsewhere in this process, never by tool name; an INTENT without an id: by name).
            None found: reported failed ("no undo registered").
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
        secrets: the saga's secrets (``core.data_keys.SagaSecrets``): each undo gets the
            call's sealed values in clear, and masks for values stored nowhere
            (``core.protection.opened``); ``None``: those ``journal`` holds for the saga (a
            writer's view), else masks only. A call whose values were erased, or cannot be
            opened here, is not undone (never on masks): reported failed, still dirty, naming
            the erasure.

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
    walk = _Walk(journal, saga_id, claimant or new_claimant(), stop)
    walk.secrets = secrets if secrets is not None else held_secrets(journal, saga_id)
    walk.derivation = derivation_of(ledger.entries, await journal_id_of(journal))
    walk.in_doubt.extend(
        CompensationItem(e.seq, e.tool, e.call_id,
                         intent_in_doubt_note(e, ledger.entries) + _check_note(e, ledger.entries))
        for e in ledger.in_doubt()
    )
    for call in undo_order(ledger):
        if not walk.settled(ledger, call, retry_timed_out):
            await walk.visit(call, declarations, agent_declarations)
    return walk.report(ledger)


_STOPPED = ("undo not run: compensation was stopped before it (its caller was cancelled); "
            "`recover` runs it")


class _Walk:
    """One pass of :func:`compensate`: the report's lists as the walk fills them, and what each
    undo needs (the journal, the saga, this pass's claimant nonce, the stop signal)."""

    def __init__(self, journal: Journal, saga_id: str, claimant: str, stop: StopSignal | None) -> None:
        self.journal = journal
        self.saga_id = saga_id
        self.claimant = claimant
        self.stop = stop
        self.derivation = Derivation()
        """How the saga's undo keys are derived (``core.identity``)."""
        self.secrets: SagaSecrets | None = None
        """The saga's secrets: what opens the values each undo gets (``core.protection``)."""
        self.undone: list[CompensationItem] = []
        self.failed: list[CompensationItem] = []
        self.kept: list[CompensationItem] = []
        self.no_undo: list[CompensationItem] = []
        self.in_doubt: list[CompensationItem] = []

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def settled(self, ledger: SagaLedger, call: Any, retry_timed_out: bool) -> bool:
        """Report ``call`` if no undo is to run for it now (kept irreversible, without undo,
        read-only, already undone, in doubt, or the walk stopped); ``True`` when it was."""
        assert call.outcome is not None
        kind = (call.intent.payload or {}).get("reversibility")
        item = _item(call)
        if kind == Reversibility.IRREVERSIBLE.value:
            self.kept.append(item)
            return True
        if kind == Reversibility.NO_UNDO.value:
            self.no_undo.append(item)
            return True
        if kind == "undeclared":  # a tool nobody declared ran: its effect is unknown
            self.no_undo.append(_item(call, "no undo declared"))
            return True
        if kind != Reversibility.COMPENSATABLE.value:
            return True  # read-only
        lost = lost_undo_data(call.outcome.payload)
        if lost is not None:  # never run an undo without its data: still dirty, said why
            self.no_undo.append(_item(call, f"undo not run: {lost}; the effect may exist"))
            return True
        state, said = ledger.undo_state(call)
        if state is UndoState.UNDONE:
            self.undone.append(item)
        elif state is UndoState.IN_DOUBT:
            self.in_doubt.append(_item(call, "COMPENSATING without outcome"))
        elif state is UndoState.TIMED_OUT and (not retry_timed_out or self.stopped()):
            self.in_doubt.append(_item(call, _in_doubt_detail(said)))
        elif self.stopped():
            self.failed.append(_item(call, _STOPPED))
        else:
            return False
        return True

    async def visit(self, call: Any, declarations: Mapping[str, ToolDeclaration],
                    agent_declarations: Mapping[tuple[str | None, str], ToolDeclaration] | None,
                    ) -> None:
        """Undo one call the walk has not settled: find its declaration, open its values (an
        erased saga's call is reported, never undone on masks), check its undo data, run."""
        intent_payload = call.intent.payload or {}
        decl, unsure = _declaration_for(declarations, call.intent.tool or "",
                                        intent_payload.get("declaration"),
                                        intent_payload.get("agent"), agent_declarations,
                                        intent_payload.get("scope"))
        try:  # what the undo acts on, in clear
            clear = undo_payloads(self.secrets, call.intent, call.outcome)
        except DataKeyError as exc:
            self.failed.append(_item(call, erased_reason(exc, self.saga_id)))
            return
        if not self.lacks_undo_data(call, decl, clear[1]):
            await self.undo(call, decl, unsure, clear)

    def lacks_undo_data(self, call: Any, decl: ToolDeclaration | None,
                        payload: dict[str, Any]) -> bool:
        """Report ``call`` failed (still dirty), its undo not run (not even claimed), when its undo data
        lacks a key its declaration's ``undo_needs`` names; ``True`` when it was. A call a
        human answered "ran" has only the undo data given with the answer. ``payload``: the
        outcome's payload as the undo gets it (``core.protection.opened``)."""
        if decl is None or not decl.undo_needs:
            return False
        if call.outcome.phase not in (Phase.RESOLVED, Phase.CHECKED) and "undo_data" not in payload:
            return False  # the call's own outcome: its undo reads what it journaled (a result)
        missing = missing_undo_needs(decl.undo_needs, payload.get("undo_data"))
        if not missing:
            return False
        how = (f"`sagacity saga resolve {self.saga_id} {call.intent.seq} --ran --undo-data JSON` "
               "was answered without it" if call.outcome.phase is Phase.RESOLVED
               else "its outcome journaled none")
        # Failed, not "no undo": the saga stays open (COMPENSATION_FAILED) until the data is
        # given and a recovery runs the undo.
        self.failed.append(_item(call, (
            f"undo not run: it needs undo data {', '.join(missing)} ({how}); give it with "
            "--undo-data, or undo the effect by hand")))
        return True

    async def undo(self, call: Any, decl: ToolDeclaration | None, unsure: str | None,
                   clear: tuple[dict[str, Any], dict[str, Any]]) -> None:
        """Claim the undo of ``call`` (COMPENSATING), run it, journal how it ended, report it;
        one observed step per undo, begun before its claim so that its entries carry its span.
        ``clear``: the INTENT's and the outcome's payloads as the undo gets them."""
        seq = call.outcome.seq
        decl_id = (call.intent.payload or {}).get("declaration")
        key = self.derivation.undo_key(self.saga_id, seq)
        attempt = len(call.attempts) + 1
        claim = {"target_seq": seq, "idempotency_key": key, "attempt": attempt,
                 CLAIMANT_KEY: self.claimant}
        step = begin_undo(self.saga_id, call.intent, seq, key, attempt, decl_id)
        before = (len(self.undone), len(self.failed), len(self.in_doubt))
        try:
            start = await self._claim(call, f"undo:{seq}:{attempt}:start", claim)
            if start is None:
                return
            outcome_payload: dict[str, Any] = {"target_seq": seq, "compensating_seq": start.seq}
            end_key = f"undo:{seq}:{attempt}:end"
            run = UndoRun()
            error = self._why_not_run(call, decl, decl_id, unsure)
            if error is None:
                assert decl is not None and decl.undo is not None
                run = await self._run(call, decl, key, attempt, end_key, outcome_payload, clear)
                if run.error is not None:
                    error = describe_error(run.error)
            if run.stopped is not None:
                assert decl is not None
                detail = await mark_in_doubt(self.journal, self.saga_id, call.intent,
                                             outcome_payload, run, decl.undo_timeout, attempt)
                self.in_doubt.append(_item(call, detail))
                return
            await self._journal_end(call, end_key, outcome_payload, error)
        finally:
            end_undo(step, before, self.undone, self.failed, self.in_doubt)

    async def _claim(self, call: Any, write_key: str, claim: dict[str, Any]) -> JournalEntry | None:
        """The COMPENSATING entry this pass wrote, or ``None`` (reported) when it holds no claim."""
        try:
            return await _claim_undo(self.journal, self.saga_id, write_key, call.intent, claim)
        except LeaseLostError:
            raise  # another run holds the saga now: the rest of the walk is theirs
        except ClaimTakenError as taken:
            # Another writer (a second recovery, another task) claimed this undo first: it is
            # theirs to run and to journal; running it here too would apply it twice.
            self.in_doubt.append(_item(
                call, f"undo claimed by another writer (COMPENSATING seq {taken.seq}); not run here: "
                "its outcome is theirs to journal, recover again to read it"))
        except Exception as exc:  # noqa: BLE001 - record intent before acting: no entry, no undo
            self.failed.append(_item(
                call, f"undo not run: COMPENSATING could not be journaled ({describe_error(exc)})"))
        return None

    def _why_not_run(self, call: Any, decl: ToolDeclaration | None, decl_id: Any,
                     unsure: str | None) -> str | None:
        """Why the claimed undo is not run (the error journaled), or ``None`` to run it."""
        if self.stopped():  # set while the claim was written: not started
            return _STOPPED
        if decl is not None and decl.undo is not None:
            return None
        if unsure is not None:
            return f"undo not run: {unsure}"
        if isinstance(decl_id, str) and is_ambiguous(decl_id):
            return (f"declaration {decl_id} names several different tools in this process "
                    "(one factory or lambdas); the undo is not guessed: give each tool its "
                    "own id with compensable(..., declaration_id=...)")
        scope = (call.intent.payload or {}).get("scope")
        return (f"no undo registered for tool {call.intent.tool!r} in the agent graph given"
                + (f" (declaration {decl_id}" if decl_id else "")
                + (f", scope {scope!r})" if decl_id and scope is not None else ")" if decl_id else "")
                + "; the undo is not looked up elsewhere in this process")

    async def _run(self, call: Any, decl: ToolDeclaration, key: str, attempt: int, end_key: str,
                   outcome_payload: dict[str, Any],
                   clear: tuple[dict[str, Any], dict[str, Any]]) -> UndoRun:
        """Run the declaration's undo under its timeout; a late end is journaled under
        ``end_key``. This walk's own cancellation marks the attempt in doubt, then propagates."""
        assert decl.undo is not None
        ctx = _context(self.saga_id, call, key, self.derivation, clear)
        late = late_end_writer(self.journal, self.saga_id, end_key, call.intent, outcome_payload)
        try:
            return await run_undo(decl.undo, ctx, timeout=decl.undo_timeout, stop=self.stop,
                                  on_late_end=late)
        except asyncio.CancelledError:
            # This walk's own task was cancelled: the undo was abandoned; say so, then stop.
            await mark_in_doubt(self.journal, self.saga_id, call.intent, outcome_payload,
                                UndoRun(stopped="cancelled"), decl.undo_timeout, attempt)
            raise

    async def _journal_end(self, call: Any, end_key: str, outcome_payload: dict[str, Any],
                           error: str | None) -> None:
        """Journal COMPENSATED or COMPENSATION_FAILED and report it; an outcome that cannot be
        journaled leaves the undo in doubt."""
        phase = Phase.COMPENSATED if error is None else Phase.COMPENSATION_FAILED
        if error is not None:
            outcome_payload["error"] = error
        try:
            await self.journal.append(
                self.saga_id,
                phase,
                write_key=end_key,
                tool=call.intent.tool,
                call_id=call.intent.call_id,
                payload=outcome_payload,
            )
        except Exception as exc:  # noqa: BLE001 - the undo's outcome is known here, not in the journal
            note = f"undo {'ran' if error is None else 'failed'} but its outcome could not be journaled ({describe_error(exc)})"
            self.in_doubt.append(_item(call, note))
            return
        given = _given_undo_data(call)
        if error is None:
            self.undone.append(_item(call, given))
        else:
            self.failed.append(_item(call, f"{error}; {given}" if given else error))

    def report(self, ledger: SagaLedger) -> CompensationReport:
        by_seq = lambda items: tuple(sorted(items, key=lambda i: i.seq))  # noqa: E731
        entries = ledger.entries
        return CompensationReport(
            contradicted=tuple(_item(c) for c in ledger.calls.values() if c.contradiction),
            undone=tuple(self.undone),
            failed=tuple(self.failed),
            kept_irreversible=by_seq(self.kept),
            no_undo=by_seq(self.no_undo),
            in_doubt=by_seq(self.in_doubt),
            approved_not_run=approved_never_run(entries),
            read_seq=entries[-1].seq if entries else 0,
        )


def _item(call: Any, detail: str = "") -> CompensationItem:
    """The report line of ``call``: its outcome's seq, tool and call id; a call whose own
    outcome contradicted an answer "not run" says so (``core.ledger.Contradiction``)."""
    if call.contradiction is not None:
        detail = f"{detail}; {call.contradiction.describe()}" if detail else call.contradiction.describe()
    return CompensationItem(call.outcome.seq, call.intent.tool, call.intent.call_id, detail)


def _check_note(intent: JournalEntry, entries: list[JournalEntry]) -> str:
    """What the latest far-side check of a call still in doubt said (it could not tell), for
    the human who answers next; ``""`` when none ran."""
    checks = [e for e in entries if e.phase is Phase.CHECKED and isinstance(e.payload, dict)
              and e.payload.get("target_seq") == intent.seq]
    if not checks:
        return ""
    payload = checks[-1].payload
    error = payload.get("error")
    return (f"; its far-side check ({payload.get('checker')}, CHECKED seq {checks[-1].seq}) "
            f"could not tell" + (f": {error}" if error else ""))


def _given_undo_data(call: Any) -> str:
    """The report's note on undo data a human (RESOLVED) or a far-side check (CHECKED) gave
    for a call whose own outcome is missing: shown with the undo's line, so whoever reads the
    report sees what the undo acted on; ``""`` for a call's own outcome."""
    outcome = call.outcome
    payload = outcome.payload if isinstance(outcome.payload, dict) else {}
    if outcome.phase not in (Phase.RESOLVED, Phase.CHECKED) or payload.get("undo_data") is None:
        return ""
    who = payload.get("resolver") or payload.get("checker")
    return (f"with undo data from {outcome.phase.value} seq {outcome.seq} ({who}): "
            f"{canonical_bytes(payload['undo_data']).decode()}")


def _context(saga_id: str, call: Any, key: str, derivation: Derivation,
             clear: tuple[dict[str, Any], dict[str, Any]]) -> CompensationContext:
    """What the undo is given: the call's journaled arguments, result and undo data, sensitive
    values in clear (``clear``: the INTENT's and outcome's payloads, ``core.protection``)."""
    intent_payload, outcome_payload = clear
    return CompensationContext(
        saga_id=saga_id,
        seq=call.outcome.seq,
        tool=call.intent.tool or "",
        call_id=call.intent.call_id,
        args=intent_payload.get("args") or {},
        result=_journaled_result(outcome_payload),
        undo_data=outcome_payload.get("undo_data"),
        idempotency_key=key,
        raw_args=intent_payload.get("raw_args"),
        call_idempotency_key=derivation.call_key(saga_id, call.intent.seq),
        intent_seq=call.intent.seq,
    )


def approved_never_run(entries: list[JournalEntry]) -> tuple[CompensationItem, ...]:
    """Approved requests no INTENT used, as report lines: consumed by a resume that never ran
    the call, or never consumed at all (approved, then the saga was recovered: REQUEST_VOIDED,
    or is being closed). ``seq``: the request's CONSUMED, else REQUEST_VOIDED, else APPROVED."""
    approved: dict[str, JournalEntry] = {}
    settled: dict[str, int] = {}  # request id -> seq of its CONSUMED or REQUEST_VOIDED
    used: set[str] = set()
    for e in entries:
        rid = e.payload.get("request_id") if isinstance(e.payload, dict) else None
        if not isinstance(rid, str) or not rid:
            continue
        if e.phase is Phase.APPROVED:
            approved.setdefault(rid, e)
        elif e.phase in (Phase.CONSUMED, Phase.REQUEST_VOIDED):
            settled.setdefault(rid, e.seq)
        elif e.phase is Phase.INTENT:
            used.add(rid)
    return tuple(
        CompensationItem(settled.get(rid, e.seq), e.tool, e.call_id,
                         f"approved (request {rid}) but never ran: no INTENT"
                         + (" (consumed by a resume)" if _consumed(entries, rid) else ""))
        for rid, e in approved.items() if rid not in used
    )


def _consumed(entries: list[JournalEntry], rid: str) -> bool:
    return any(e.phase is Phase.CONSUMED and isinstance(e.payload, dict)
               and e.payload.get("request_id") == rid for e in entries)
