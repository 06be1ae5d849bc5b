"""Replay GPT-4o's recorded τ-bench airline conversations through the saga layer.

Every recorded conversation becomes a :class:`~.script.Script`: each recorded assistant turn is
one step of the SDK's ``ScriptedModel`` (original call ids, rewritten where reused, and original
argument strings), and each user message is the next ``Sagacity.run`` of the same saga
(``saga_id=...``, ``close=False``), fed the history so far. The tools are our own implementation
over a fresh SQLite store (:mod:`.agent_tools`). The saga is closed with ``close_saga`` at the
end. Modes:

* ``clean``: irreversible calls are approved inline by the harness's approver. Every call must be
  journaled once, every chain verify, every saga end COMPLETED and the database end exactly as
  the same replay with unwrapped tools leaves it (plain ``function_tool``, plain ``Runner.run``).
  Each conversation runs three times, interleaved, to measure the saga layer's cost: unwrapped,
  with an in-memory journal and with a SQLite journal;
* ``inject``: for every conversation and every database-changing call k in it (a call of one of
  the 7 mutating tools), a replay where call k raises before its effect (default STOP policy).
  The saga must end COMPENSATED, its report listing the irreversible calls kept, and the four
  business invariants must hold against the database as it was before the saga's first run,
  excluding the reservations and users that executed irreversible calls touched (read from the
  journal's EXECUTED entries of ``cancel_reservation`` / ``send_certificate``, and printed). On
  those, compensation must not settle anything a second time
  (:func:`.undo_check.settlement_violations`);
* ``approvals``: irreversible calls pause (AWAITING_APPROVAL); a second actor approves every
  other request and rejects the rest through ``Sagacity.approve`` / ``Sagacity.reject``
  (:func:`second_actor_approves`: alternating, starting with an approval in the recordings file's
  even-numbered conversations and with a rejection in the odd ones), then ``Sagacity.resume``
  goes on. Approved calls must run exactly once
  (one INTENT, one outcome) and rejected ones never; the database must equal a direct replay of
  the conversation's calls without the rejected ones.

Run from the repository root::

    python -m examples.tau_airline.harness [--data PATH] [--mode clean|inject|approvals|all]
        [--journal memory|sqlite] [--limit N] [--conversations 34.0,15] [--json OUT]

Exit status: 0 when every check holds, 1 otherwise, 2 when the data is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents import Agent, Runner, set_tracing_disabled

from sagacity_agents import Decision, Sagacity, SagaStatus
from sagacity_agents.backends import InMemoryJournal, JournalEntry, Phase, SqliteJournal

from .agent_tools import InjectedFailure, make_tools, plain_tools
from .invariants import check_invariants
from .recordings import RecordedCall
from .replay import ExecutedCall, execute_calls, touched_by
from .script import Script, load_scripts
from .store import AirlineStore, DataNotFoundError, resolve_data_dir
from .tools import IRREVERSIBLE, MUTATING
from .undo_check import settlement_violations

__all__ = [
    "MODES",
    "ModeStats",
    "Summary",
    "main",
    "run_harness",
    "second_actor_approves",
    "select_scripts",
]

MODES = ("clean", "inject", "approvals")
JOURNALS = ("memory", "sqlite")
MAX_TURNS = 100
"""Model calls allowed per run (the longest recorded user turn has 27 assistant turns)."""
INLINE_APPROVER = "harness-approver"
SECOND_ACTOR = "second-actor"

Snapshot = dict[str, dict[str, dict[str, Any]]]


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass
class ModeStats:
    """Figures and findings of one mode (one journal, for the clean mode).

    Every list of findings must be empty, and every ``*_equal`` / ``chains_verified`` count
    must equal its total, for the run to pass.
    """

    name: str
    journal: str
    conversations: int = 0
    sagas: int = 0
    calls: int = 0
    database_changing_calls: int = 0
    refused_calls: int = 0
    refused_database_changing_calls: int = 0
    injected_failures: int = 0
    sagas_completed: int = 0
    sagas_compensated: int = 0
    undos_run: int = 0
    irreversible_kept: int = 0
    approvals_asked: int = 0
    runs_paused: int = 0
    approvals_granted: int = 0
    approvals_rejected: int = 0
    approvals_executed: int = 0
    chains_verified: int = 0
    double_executions: int = 0
    databases_compared: int = 0
    databases_equal: int = 0
    seconds: float = 0.0
    invariant_violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    exclusions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check of the mode held."""
        return (
            not self.invariant_violations
            and not self.problems
            and self.double_executions == 0
            and self.chains_verified == self.sagas
            and self.databases_equal == self.databases_compared
        )


@dataclass
class Summary:
    """Everything a harness run found; :meth:`to_dict` is the ``--json`` output."""

    data: str
    journal: str
    conversations: int = 0
    calls: int = 0
    database_changing_calls: int = 0
    rewritten_ids: int = 0
    conversations_with_rewritten_ids: int = 0
    appended_final_messages: int = 0
    trailing_user_messages: int = 0
    modes: list[ModeStats] = field(default_factory=list)
    unwrapped_seconds: float | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every mode passed."""
        return all(mode.ok for mode in self.modes)

    def mode(self, name: str, journal: str | None = None) -> ModeStats:
        """The stats of mode ``name`` (and ``journal``, for the clean mode)."""
        return next(m for m in self.modes if m.name == name and journal in (None, m.journal))

    def timing(self) -> dict[str, float] | None:
        """Clean-mode time without and with the saga layer, and their ratios."""
        if self.unwrapped_seconds is None:
            return None
        figures = {"unwrapped_s": self.unwrapped_seconds}
        for mode in self.modes:
            if mode.name == "clean":
                figures[f"saga_{mode.journal}_s"] = mode.seconds
                figures[f"ratio_{mode.journal}"] = (
                    mode.seconds / self.unwrapped_seconds if self.unwrapped_seconds else 0.0
                )
        return figures

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form."""
        modes = []
        for mode in self.modes:
            item = asdict(mode)
            item["ok"] = mode.ok
            modes.append(item)
        return {
            "ok": self.ok,
            "data": self.data,
            "journal": self.journal,
            "conversations": self.conversations,
            "calls": self.calls,
            "database_changing_calls": self.database_changing_calls,
            "script": {
                "rewritten_ids": self.rewritten_ids,
                "conversations_with_rewritten_ids": self.conversations_with_rewritten_ids,
                "appended_final_messages": self.appended_final_messages,
                "trailing_user_messages_without_run": self.trailing_user_messages,
            },
            "timing": self.timing(),
            "seconds": self.seconds,
            "modes": modes,
        }


# ---------------------------------------------------------------------------------------------
# reading a saga's journal
# ---------------------------------------------------------------------------------------------

_OUTCOMES = (Phase.EXECUTED, Phase.REFUSED, Phase.FAILED)


@dataclass
class JournalFacts:
    """What one saga's journal says about its calls and approvals."""

    intents: dict[str, JournalEntry] = field(default_factory=dict)
    intent_counts: Counter[str] = field(default_factory=Counter)
    outcomes: dict[str, list[JournalEntry]] = field(default_factory=lambda: defaultdict(list))
    asked: list[str] = field(default_factory=list)
    approved: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, entries: Iterable[JournalEntry]) -> JournalFacts:
        """Index a saga's entries by call id."""
        facts = cls()
        by_phase = {Phase.AWAITING_APPROVAL: facts.asked, Phase.APPROVED: facts.approved,
                    Phase.REJECTED: facts.rejected}
        for entry in entries:
            call_id = entry.call_id or ""
            if entry.phase is Phase.INTENT:
                facts.intents.setdefault(call_id, entry)
                facts.intent_counts[call_id] += 1
            elif entry.phase in _OUTCOMES:
                facts.outcomes[call_id].append(entry)
            elif entry.phase in by_phase:
                by_phase[entry.phase].append(call_id)
        return facts

    def phase_of(self, call_id: str) -> Phase | None:
        """The outcome phase of a call (``None`` if it has none)."""
        outcomes = self.outcomes.get(call_id)
        return outcomes[0].phase if outcomes else None

    def executed_irreversible(self, script: Script) -> list[ExecutedCall]:
        """The EXECUTED irreversible calls, rebuilt from their journal entries."""
        positions = {call.call_id: call.position for call in script.calls}
        kept = []
        for call_id, intent in self.intents.items():
            if intent.tool not in IRREVERSIBLE or self.phase_of(call_id) is not Phase.EXECUTED:
                continue
            payload = self.outcomes[call_id][0].payload
            recorded = RecordedCall(positions.get(call_id, -1), call_id, intent.tool,
                                    intent.payload["args"], "", None)
            kept.append(ExecutedCall(recorded, payload["result"], payload.get("undo_data")))
        return sorted(kept, key=lambda item: item.call.position)


# ---------------------------------------------------------------------------------------------
# one replay
# ---------------------------------------------------------------------------------------------


def _agent(script: Script, tools: list[Any], instructions: str) -> Agent[Any]:
    return Agent(name="airline", instructions=instructions, model=script.model(), tools=tools)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def replay_unwrapped(script: Script, store: AirlineStore, instructions: str) -> float:
    """Replay with plain tools and plain ``Runner.run`` (no saga layer); returns seconds."""
    agent = _agent(script, plain_tools(make_tools(store)), instructions)
    history: list[Any] = []
    started = time.perf_counter()
    for turn in script.turns:
        result = await Runner.run(agent, [*history, _user(turn.user)], max_turns=MAX_TURNS)
        history = result.to_input_list()
    return time.perf_counter() - started


def second_actor_approves(script: Script, request_number: int) -> bool:
    """The approvals mode's deterministic decision on the ``request_number``-th (0-based)
    approval request of a conversation: alternate, starting with an approval when the
    conversation's position in the recordings file is even and with a rejection when it is odd
    (so conversations with a single irreversible call see both outcomes across the file)."""
    return (script.index + request_number) % 2 == 0


async def _approve_inline(request: Any) -> Decision:
    return Decision(True, INLINE_APPROVER, "clean replay: the recorded model's call is approved")


@dataclass
class SagaReplay:
    """How one saga replay ended."""

    saga_id: str
    status: SagaStatus
    facts: JournalFacts
    verified: bool
    report: Any
    seconds: float
    decisions: dict[str, bool] = field(default_factory=dict)
    pauses: int = 0
    """Runs (``run`` or ``resume``) that returned AWAITING_APPROVAL."""
    delivered: list[str] = field(default_factory=list)
    """Call ids of the requests those results carried."""


async def replay_saga(
    script: Script,
    store: AirlineStore,
    sagacity: Sagacity,
    saga_id: str,
    instructions: str,
    *,
    injector: Callable[[str, str], None] | None = None,
    inline_approvals: bool = True,
) -> SagaReplay:
    """Replay a conversation as one saga: one ``Sagacity.run`` per user message.

    Args:
        injector: passed to :func:`.agent_tools.make_tools` (``inject`` mode).
        inline_approvals: approve irreversible calls inline (clean, inject); otherwise they pause
            and a second actor approves every other one and rejects the rest (approvals mode).

    Returns:
        The outcome; the run stops at the first run that does not leave the saga OPEN.
    """
    agent = _agent(script, make_tools(store, injector), instructions)
    approver = _approve_inline if inline_approvals else None
    positions = {call.call_id: call.position for call in script.calls}
    decisions: dict[str, bool] = {}
    delivered: list[str] = []
    pauses = 0
    history: list[Any] = []
    status = SagaStatus.OPEN
    report = None
    started = time.perf_counter()
    for turn in script.turns:
        result = await sagacity.run(agent, [*history, _user(turn.user)], saga_id=saga_id,
                                    close=False, approver=approver, max_turns=MAX_TURNS)
        while result.status is SagaStatus.AWAITING_APPROVAL:
            pauses += 1
            delivered += [request.call_id for request in result.approvals]
            for request in sorted(result.approvals, key=lambda r: positions[r.call_id]):
                approve = second_actor_approves(script, len(decisions))
                decisions[request.call_id] = approve
                if approve:
                    await sagacity.approve(request.request_id, approver=SECOND_ACTOR,
                                           reason="every other request is approved")
                else:
                    await sagacity.reject(request.request_id, approver=SECOND_ACTOR,
                                          reason="every other request is rejected")
            result = await sagacity.resume(saga_id, agent, close=False, max_turns=MAX_TURNS)
        status, report = result.status, result.report
        if status is not SagaStatus.OPEN:
            break
        history = result.run_result.to_input_list()
    if status is SagaStatus.OPEN:
        status = await sagacity.close_saga(saga_id)
    seconds = time.perf_counter() - started
    facts = JournalFacts.read(await sagacity.journal.entries(saga_id))
    verified = all(chain.ok for chain in await sagacity.verify(saga_id))
    return SagaReplay(saga_id, status, facts, verified, report, seconds, decisions, pauses,
                      delivered)


def _check_calls(stats: ModeStats, replay: SagaReplay, script: Script, expected: Sequence[str],
                 where: str) -> None:
    """Common journal checks: each expected call journaled once with one outcome, chain ok."""
    facts = replay.facts
    stats.sagas += 1
    stats.seconds += replay.seconds
    stats.chains_verified += replay.verified
    if not replay.verified:
        stats.problems.append(f"{where}: hash chain does not verify")
    names = {call.call_id: call.name for call in script.calls}
    for call_id, count in facts.intent_counts.items():
        outcomes = len(facts.outcomes.get(call_id, ()))
        if count > 1 or outcomes > 1:
            stats.double_executions += 1
            stats.problems.append(
                f"{where}: call {call_id} has {count} INTENTs, {outcomes} outcomes")
        elif outcomes == 0:
            stats.problems.append(f"{where}: call {call_id} has no outcome (in doubt)")
    journaled, wanted = set(facts.intents), set(expected)
    if journaled != wanted:
        stats.problems.append(
            f"{where}: journaled calls differ from the expected ones: missing "
            f"{sorted(wanted - journaled)}, unexpected {sorted(journaled - wanted)}"
        )
    for call_id in facts.intents:
        name = names.get(call_id, "")
        refused = facts.phase_of(call_id) is Phase.REFUSED
        stats.calls += 1
        stats.refused_calls += refused
        if name in MUTATING:
            stats.database_changing_calls += 1
            stats.refused_database_changing_calls += refused
    stats.approvals_asked += len(facts.asked)
    stats.runs_paused += replay.pauses
    stats.approvals_granted += len(facts.approved)
    stats.approvals_rejected += len(facts.rejected)
    stats.approvals_executed += sum(facts.phase_of(c) is Phase.EXECUTED for c in facts.approved)
    stats.undos_run += len(replay.report.undone) if replay.report else 0
    stats.irreversible_kept += len(replay.report.kept_irreversible) if replay.report else 0


def _compare_databases(stats: ModeStats, where: str, ours: Snapshot, reference: Snapshot,
                       reference_name: str) -> None:
    stats.databases_compared += 1
    if ours == reference:
        stats.databases_equal += 1
        return
    differing = [
        f"{kind} {key}"
        for kind in ("users", "reservations")
        for key in sorted(ours[kind].keys() | reference[kind].keys())
        if ours[kind].get(key) != reference[kind].get(key)
    ]
    stats.problems.append(f"{where}: database differs from {reference_name}: {differing[:10]}")


# ---------------------------------------------------------------------------------------------
# modes
# ---------------------------------------------------------------------------------------------


class Harness:
    """Runs the modes over a list of scripts and fills a :class:`Summary`."""

    def __init__(self, data_dir: Path, journal: str, workdir: Path,
                 on_progress: Callable[[str, str], None] | None = None) -> None:
        self.data_dir = data_dir
        self.journal = journal
        self.workdir = workdir
        self.instructions = (data_dir / "policy.md").read_text(encoding="utf-8")
        self.on_progress = on_progress or (lambda mode, label: None)
        with AirlineStore(data_dir) as fresh:
            self.initial: Snapshot = fresh.snapshot()

    def store(self) -> AirlineStore:
        """A fresh store: the database as it is before any saga's first run."""
        return AirlineStore(self.data_dir)

    def sagacity(self, journal: str, name: str) -> Sagacity:
        """A facade over a new journal: in memory, or a new SQLite file in the work folder."""
        if journal == "memory":
            return Sagacity(InMemoryJournal())
        return Sagacity(SqliteJournal(self.workdir / f"{name}.db"))

    # -- clean ---------------------------------------------------------------------------------
    async def clean(self, scripts: Sequence[Script], summary: Summary) -> None:
        """Clean mode with both journals, interleaved with the unwrapped replay for timing."""
        stats = {journal: ModeStats("clean", journal) for journal in JOURNALS}
        facades = {journal: self.sagacity(journal, "clean") for journal in JOURNALS}
        unwrapped = 0.0
        try:
            for script in scripts:
                with self.store() as store:
                    unwrapped += await replay_unwrapped(script, store, self.instructions)
                    reference = store.snapshot()
                for journal in JOURNALS:
                    with self.store() as store:
                        replay = await replay_saga(script, store, facades[journal],
                                                   f"clean-{script.key}", self.instructions)
                        after = store.snapshot()
                    self._check_clean(stats[journal], script, replay, after, reference)
                self.on_progress("clean", script.label)
        finally:
            for facade in facades.values():
                await facade.aclose()
        summary.unwrapped_seconds = unwrapped
        summary.modes.extend(stats.values())

    def _check_clean(self, stats: ModeStats, script: Script, replay: SagaReplay,
                     after: Snapshot, reference: Snapshot) -> None:
        where = f"clean/{stats.journal} {script.label}"
        stats.conversations += 1
        _check_calls(stats, replay, script, [c.call_id for c in script.calls], where)
        if replay.status is SagaStatus.COMPLETED:
            stats.sagas_completed += 1
        else:
            stats.problems.append(f"{where}: saga ended {replay.status.value}, not COMPLETED")
        irreversible = [c.call_id for c in script.calls if c.name in IRREVERSIBLE]
        if sorted(replay.facts.approved) != sorted(irreversible) or replay.facts.rejected:
            stats.problems.append(f"{where}: approvals {replay.facts.approved} != {irreversible}")
        _compare_databases(stats, where, after, reference, "the unwrapped replay")

    # -- inject --------------------------------------------------------------------------------
    async def inject(self, scripts: Sequence[Script], summary: Summary) -> None:
        """Injected-failure mode: one saga per database-changing call."""
        stats = ModeStats("inject", self.journal)
        facade = self.sagacity(self.journal, "inject")
        try:
            for script in scripts:
                targets = [call for call in script.calls if call.name in MUTATING]
                stats.conversations += 1
                for target in targets:
                    await self._inject_one(stats, facade, script, target)
                    self.on_progress("inject", f"{script.label} call {target.position}")
        finally:
            await facade.aclose()
        summary.modes.append(stats)

    async def _inject_one(self, stats: ModeStats, facade: Sagacity, script: Script,
                          target: Any) -> None:
        where = f"inject {script.label} call {target.position} ({target.name})"
        fired: list[Snapshot] = []

        with self.store() as store:

            def injector(tool: str, call_id: str) -> None:
                if call_id == target.call_id:
                    fired.append(store.snapshot())  # the database just before compensation
                    raise InjectedFailure(f"injected failure in {tool} (call {call_id})")

            replay = await replay_saga(script, store, facade,
                                       f"inject-{script.key}-{target.position}",
                                       self.instructions, injector=injector)
            after = store.snapshot()
        stats.injected_failures += len(fired)
        expected = [c.call_id for c in script.calls if c.position <= target.position]
        _check_calls(stats, replay, script, expected, where)
        if len(fired) != 1:
            stats.problems.append(f"{where}: the failure fired {len(fired)} times")
            return
        if replay.facts.phase_of(target.call_id) is not Phase.FAILED:
            stats.problems.append(f"{where}: the injected call is not journaled FAILED")
        if replay.status is SagaStatus.COMPENSATED:
            stats.sagas_compensated += 1
        else:
            stats.problems.append(f"{where}: saga ended {replay.status.value}, not COMPENSATED")
        kept = replay.facts.executed_irreversible(script)
        report_kept = replay.report.kept_irreversible if replay.report else ()
        reported = sorted(item.call_id for item in report_kept)
        if reported != sorted(item.call.call_id for item in kept):
            stats.problems.append(f"{where}: report lists kept {reported}, journal executed "
                                  f"{[item.call.call_id for item in kept]}")
        reservations: set[str] = set()
        users: set[str] = set()
        for item in kept:
            touched_reservations, touched_users = touched_by(item)
            reservations |= touched_reservations
            users |= touched_users
        if kept:
            stats.exclusions.append({
                "case": where,
                "kept": [f"{item.call.name} {item.call.call_id}" for item in kept],
                "reservations": sorted(reservations),
                "users": sorted(users),
            })
        pre_compensation = {rid: fired[0]["reservations"].get(rid) for rid in reservations}
        violations = check_invariants(self.initial, after, reservations, users)
        violations += settlement_violations(self.initial, pre_compensation, after, kept, users)
        stats.invariant_violations += [f"{where}: {violation}" for violation in violations]

    # -- approvals -----------------------------------------------------------------------------
    async def approvals(self, scripts: Sequence[Script], summary: Summary) -> None:
        """Approvals mode: pause, a second actor approves every other request, resume."""
        stats = ModeStats("approvals", self.journal)
        facade = self.sagacity(self.journal, "approvals")
        try:
            for script in scripts:
                with self.store() as store:
                    replay = await replay_saga(script, store, facade, f"approvals-{script.key}",
                                               self.instructions, inline_approvals=False)
                    after = store.snapshot()
                self._check_approvals(stats, script, replay, after)
                self.on_progress("approvals", script.label)
        finally:
            await facade.aclose()
        summary.modes.append(stats)

    def _check_approvals(self, stats: ModeStats, script: Script, replay: SagaReplay,
                         after: Snapshot) -> None:
        where = f"approvals {script.label}"
        facts = replay.facts
        stats.conversations += 1
        rejected = {call_id for call_id, approve in replay.decisions.items() if not approve}
        _check_calls(stats, replay, script,
                     [c.call_id for c in script.calls if c.call_id not in rejected], where)
        if replay.status is SagaStatus.COMPLETED:
            stats.sagas_completed += 1
        else:
            stats.problems.append(f"{where}: saga ended {replay.status.value}, not COMPLETED")
        irreversible = [c.call_id for c in script.calls if c.name in IRREVERSIBLE]
        if not facts.asked == replay.delivered == irreversible:
            stats.problems.append(f"{where}: journaled requests {facts.asked}, requests returned "
                                  f"AWAITING_APPROVAL {replay.delivered}, irreversible calls "
                                  f"{irreversible}")
        for call_id, approve in replay.decisions.items():
            ran = facts.intent_counts.get(call_id, 0), len(facts.outcomes.get(call_id, ()))
            if approve and ran != (1, 1):
                stats.problems.append(
                    f"{where}: approved call {call_id} ran {ran} (INTENT, outcome)")
            if not approve and ran != (0, 0):
                stats.problems.append(f"{where}: rejected call {call_id} ran {ran}")
        if sorted(facts.approved) != sorted(c for c, a in replay.decisions.items() if a) or \
                sorted(facts.rejected) != sorted(rejected):
            stats.problems.append(f"{where}: journaled decisions differ from the second actor's")
        skipped = {c.position for c in script.calls if c.call_id in rejected}
        with self.store() as store:
            execute_calls(store, [c for c in script.conversation.calls
                                  if c.position not in skipped])
            reference = store.snapshot()
        _compare_databases(stats, where, after, reference,
                           "a direct replay without the rejected calls")


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------


def select_scripts(scripts: Sequence[Script], keys: Iterable[str] | None = None,
                   limit: int | None = None) -> list[Script]:
    """Pick conversations: ``keys`` like ``"34.0"`` (task 34 trial 0) or ``"34"`` (all trials).

    Raises:
        ValueError: a key matches no conversation.
    """
    chosen = list(scripts)
    if keys:
        wanted = [key.strip() for key in keys if key.strip()]
        chosen = []
        for key in wanted:
            hits = [s for s in scripts if s.key == key or str(s.conversation.task_id) == key]
            if not hits:
                raise ValueError(f"no recorded conversation {key!r} (use TASK or TASK.TRIAL)")
            chosen += [s for s in hits if s not in chosen]
    return chosen[:limit] if limit is not None else chosen


async def run_harness(
    data_dir: str | Path | None = None,
    modes: Iterable[str] = MODES,
    *,
    journal: str = "memory",
    keys: Iterable[str] | None = None,
    limit: int | None = None,
    on_progress: Callable[[str, str], None] | None = None,
) -> Summary:
    """Replay the chosen conversations in the chosen modes and check everything.

    Args:
        data_dir: The ``tau-airline`` folder (``None``: ``../shared/tau-airline``).
        modes: Any of :data:`MODES` (clean always measures both journals).
        journal: ``memory`` or ``sqlite``, for the inject and approvals modes.
        keys: Conversations to replay (see :func:`select_scripts`); all by default.
        limit: Replay only the first ``limit`` chosen conversations.
        on_progress: Called as ``(mode, item)`` after each replay (or clean-mode triple).

    Returns:
        The summary (``summary.ok`` tells whether every check held).

    Raises:
        DataNotFoundError: If the data folder is missing.
    """
    set_tracing_disabled(True)
    resolved = resolve_data_dir(data_dir)
    scripts = select_scripts(load_scripts(resolved), keys, limit)
    summary = Summary(str(resolved), journal)
    summary.conversations = len(scripts)
    summary.calls = sum(len(s.calls) for s in scripts)
    summary.database_changing_calls = sum(c.name in MUTATING for s in scripts for c in s.calls)
    summary.rewritten_ids = sum(s.rewritten_ids for s in scripts)
    summary.conversations_with_rewritten_ids = sum(bool(s.rewritten_ids) for s in scripts)
    summary.appended_final_messages = sum(s.appended_final for s in scripts)
    summary.trailing_user_messages = sum(s.dropped_user_messages for s in scripts)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tau-harness-") as workdir:
        harness = Harness(resolved, journal, Path(workdir), on_progress)
        for mode in MODES:
            if mode in modes:
                await getattr(harness, mode)(scripts, summary)
    summary.seconds = time.perf_counter() - started
    return summary


def progress_total(scripts: Sequence[Script], modes: Iterable[str]) -> int:
    """Number of ``on_progress`` calls a run makes (for the progress bar)."""
    modes = set(modes)
    total = len(scripts) * (("clean" in modes) + ("approvals" in modes))
    if "inject" in modes:
        total += sum(c.name in MUTATING for s in scripts for c in s.calls)
    return total


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------

_ROWS: tuple[tuple[str, str], ...] = (
    ("conversations", "conversations"),
    ("sagas", "sagas (replays)"),
    ("calls", "calls journaled"),
    ("database_changing_calls", "database-changing calls"),
    ("refused_calls", "refused calls (all tools)"),
    ("refused_database_changing_calls", "refused database-changing calls"),
    ("injected_failures", "injected failures"),
    ("sagas_completed", "sagas COMPLETED"),
    ("sagas_compensated", "sagas COMPENSATED"),
    ("undos_run", "undos run"),
    ("irreversible_kept", "irreversible effects kept (reports)"),
    ("approvals_asked", "approvals asked"),
    ("runs_paused", "runs paused (AWAITING_APPROVAL)"),
    ("approvals_granted", "approvals granted"),
    ("approvals_rejected", "approvals rejected"),
    ("approvals_executed", "approved calls executed"),
    ("chains_verified", "chains verified"),
    ("double_executions", "double executions"),
    ("databases_equal", "databases equal to the reference"),
)


def render(summary: Summary, console: Any, verbose: bool = False) -> None:
    """Print the summary as rich tables, then every finding."""
    from rich.table import Table

    table = Table(title="τ-bench airline replay through the saga layer")
    table.add_column("")
    for mode in summary.modes:
        table.add_column(f"{mode.name}\n({mode.journal})", justify="right")
    for attr, label in _ROWS:
        cells = []
        for mode in summary.modes:
            value = getattr(mode, attr)
            if attr == "chains_verified":
                value = f"{value}/{mode.sagas}"
            elif attr == "databases_equal":
                value = f"{value}/{mode.databases_compared}" if mode.databases_compared else "-"
            cells.append(str(value))
        table.add_row(label, *cells)
    table.add_row("invariant violations",
                  *[str(len(m.invariant_violations)) for m in summary.modes])
    table.add_row("other problems", *[str(len(m.problems)) for m in summary.modes])
    table.add_row("seconds (saga replays)", *[f"{m.seconds:.2f}" for m in summary.modes])
    table.add_row("result", *["[green]ok[/]" if m.ok else "[red]FAILED[/]" for m in summary.modes])
    console.print(table)
    console.print(
        f"{summary.conversations} conversations, {summary.calls} recorded calls, "
        f"{summary.database_changing_calls} database-changing; scripts: "
        f"{summary.rewritten_ids} call ids rewritten in "
        f"{summary.conversations_with_rewritten_ids} conversations, "
        f"{summary.appended_final_messages} final messages appended, "
        f"{summary.trailing_user_messages} trailing user messages without a run"
    )
    timing = summary.timing()
    if timing:
        line = f"clean mode time: without the saga layer {timing['unwrapped_s']:.2f} s"
        for journal in JOURNALS:
            if f"saga_{journal}_s" in timing:
                line += (f"; with it, {journal} journal {timing[f'saga_{journal}_s']:.2f} s "
                         f"(x{timing[f'ratio_{journal}']:.2f})")
        console.print(line)
    for mode in summary.modes:
        if mode.exclusions:
            title = (f"{mode.name}: {len(mode.exclusions)} cases with kept irreversible calls; "
                     "excluded from invariants 1-4 (from the journal)")
            excl = Table(title=title, show_lines=False)
            for column in ("case", "kept (EXECUTED)", "reservations", "users"):
                excl.add_column(column)
            for item in mode.exclusions:
                excl.add_row(item["case"], ", ".join(item["kept"]),
                             ", ".join(item["reservations"]), ", ".join(item["users"]))
            console.print(excl)
        for title, findings in (("invariant violations", mode.invariant_violations),
                                ("problems", mode.problems)):
            if findings:
                console.print(f"[red]{mode.name} ({mode.journal}): {len(findings)} {title}[/]")
                for finding in findings if verbose else findings[:50]:
                    console.print(f"  {finding}", markup=False)
    console.print(f"total {summary.seconds:.1f} s; "
                  + ("[green]all checks hold[/]" if summary.ok else "[red]some checks FAILED[/]"))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Returns:
        0 when every check holds, 1 otherwise, 2 when the data folder is missing.
    """
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="tau-airline data folder")
    parser.add_argument("--mode", choices=[*MODES, "all"], default="all")
    parser.add_argument("--journal", choices=JOURNALS, default="memory",
                        help="journal of the inject and approvals modes (clean measures both)")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations only")
    parser.add_argument("--conversations", default=None,
                        help="comma-separated TASK.TRIAL or TASK, e.g. 34.0,15")
    parser.add_argument("--json", type=Path, default=None, help="write the summary as JSON")
    parser.add_argument("--verbose", action="store_true", help="print every finding")
    args = parser.parse_args(argv)
    modes = MODES if args.mode == "all" else (args.mode,)
    keys = args.conversations.split(",") if args.conversations else None
    console = Console()
    if not console.is_terminal:  # a log file: wide enough for the tables
        console = Console(width=160)
    logging.getLogger("openai.agents").addHandler(logging.NullHandler())
    logging.getLogger("openai.agents").propagate = False
    try:
        scripts = select_scripts(load_scripts(args.data), keys, args.limit)
    except DataNotFoundError as exc:
        console.print(str(exc), markup=False)
        return 2
    except ValueError as exc:
        parser.error(str(exc))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[item]}"))
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("replaying", total=progress_total(scripts, modes), item="")

        def on_progress(mode: str, item: str) -> None:
            progress.update(task, advance=1, description=mode, item=item)

        summary = asyncio.run(run_harness(args.data, modes, journal=args.journal, keys=keys,
                                          limit=args.limit, on_progress=on_progress))
    render(summary, console, verbose=args.verbose)
    if args.json is not None:
        args.json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
        console.print(f"JSON summary written to {args.json}")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
