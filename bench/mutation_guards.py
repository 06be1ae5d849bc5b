"""Mutation testing of the guards: the functions that refuse or decide before money moves (T-01).

Each mutant is one small change that cosmic-ray's operators make (a comparison flipped, a
condition negated, ``and`` for ``or``, ``True`` for ``False``, a loop that never iterates, a
number changed, an ``except`` that catches nothing, ...) inside one guard function listed in
:data:`GUARDS`. The mutant is run against that guard's own test files, in a process forked from
this one, with the mutated code swapped into the live function object (``__code__``): every
reference to the function, however it was imported, runs the mutant; nothing is written to disk.
A mutant a test fails on is *killed*; one the tests pass is a *survivor*, printed with its diff.

Exit status: 0 when every survivor is a named equivalent mutant (:data:`EQUIVALENT`, each with
why no test can tell it apart), 1 otherwise; 2 when a guard's tests fail unmutated.

Why not cosmic-ray's own runner: it writes each mutant to disk and starts a fresh test process
per mutant (~8 s of imports each on this machine), and it scopes by module, not by function.
Here cosmic-ray finds and applies the mutations (``cosmic_ray.plugins`` operators,
``cosmic_ray.mutating.mutate_code``); the fork only saves the imports and the collection's
(a mutant's tests then start in ~0.5 s).

Usage::

    pip install -e ".[test,mutation]"
    python bench/mutation_guards.py [--jobs 2] [--guard grants] [--list] [--timeout 120]
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import inspect
import io
import os
import signal
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The operators run (cosmic-ray names, without "core/"): the changes that turn a guard's decision.
# Arithmetic and bit operators are left out but for +/- (seq arithmetic): in a guard they build
# messages, and every other binary operator on a string fails at once.
OPERATORS: tuple[str, ...] = (
    "ReplaceComparisonOperator_Eq_NotEq", "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Is_IsNot", "ReplaceComparisonOperator_IsNot_Is",
    "ReplaceComparisonOperator_Lt_LtE", "ReplaceComparisonOperator_LtE_Lt",
    "ReplaceComparisonOperator_Gt_GtE", "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Lt_GtE", "ReplaceComparisonOperator_GtE_Lt",
    "ReplaceComparisonOperator_Gt_LtE", "ReplaceComparisonOperator_LtE_Gt",
    "ReplaceBinaryOperator_Add_Sub", "ReplaceBinaryOperator_Sub_Add",
    "AddNot", "ReplaceUnaryOperator_Delete_Not",
    "ReplaceAndWithOr", "ReplaceOrWithAnd",
    "ReplaceTrueWithFalse", "ReplaceFalseWithTrue",
    "ZeroIterationForLoop", "ReplaceBreakWithContinue", "ReplaceContinueWithBreak",
    "NumberReplacer", "ExceptionReplacer",
)


@dataclass(frozen=True)
class Guard:
    """One module's guard functions and the test files that defend them."""

    module: str
    """Dotted module name."""
    functions: tuple[str, ...]
    """Qualified names (``func`` or ``Class.method``) of the guard functions in it."""
    what: str
    """What they decide (printed, and listed in docs/architecture.md)."""
    tests: tuple[str, ...]
    """Test files (or node ids) run against each mutant, relative to the repository root."""


_GUARDS = "tests/guards/"
_SENSITIVE = "tests/sdk/test_sensitive_calls.py"

GUARDS: tuple[Guard, ...] = (
    Guard("sagacity_agents.core.grants",
          ("consumed_decisions", "grant_for_call", "requests_void"),
          "call-time grant: arguments hash (of the request's version: clear or committed), "
          "approved, consume-once, claims; closed-saga void",
          (f"{_GUARDS}test_call_time_grant_refusals.py", f"{_GUARDS}test_sensitive_approval_refusals.py")),
    Guard("sagacity_agents.sdk.approvals",
          ("_check_against_journal", "ApprovalDesk.decide", "ApprovalDesk.restore",
           "ApprovalDesk._opened", "_bound_args", "_check_hash", "_journaled_version"),
          "decision-time and resume-time checks of a request against the journal and snapshot; "
          "a sealed snapshot opens only under the saga's key, a version 2 request binds the "
          "committed arguments, a version 1 one holding a sensitive value and a masked snapshot "
          "that lost the value are refused",
          (f"{_GUARDS}test_approval_checks_at_decision_and_resume.py",
           f"{_GUARDS}test_sensitive_approval_refusals.py",
           "tests/approvals/test_sensitive_approvals.py")),
    Guard("sagacity_agents.core.approval_args",
          ("committed_args", "holds_sensitive", "opened_snapshot", "stored_snapshot"),
          "what an approval binds of a sensitive value (its commitment, stable across the call's "
          "entries) and how a paused run's snapshot is kept (sealed with a master key, else "
          "masked) and opened (only under the saga's key)",
          (f"{_GUARDS}test_sensitive_approval_refusals.py",
           "tests/approvals/test_sensitive_approvals.py")),
    Guard("sagacity_agents.core.chain",
          ("check_anchor", "verify_entries", "_verify_chain", "_encodes_to", "_parsed_fault",
           "verify_rows", "rows_verdict"),
          "hash-chain and link verification, anchored heads; the read-speed check from rows",
          (f"{_GUARDS}test_chain_faults.py", f"{_GUARDS}test_chain_check_from_rows.py",
           "tests/journal/test_chain_heads.py", "tests/evidence/test_verify_entry_points.py")),
    Guard("sagacity_agents.core.structure",
          ("_same_writer", "_resumed_after_pause", "_access_saga_problem"),
          "structure no run writes: an outcome answers its own INTENT under its lease, or after "
          "an approval pause under the resuming run's; the access log holds only unfenced "
          "DATA_REVEALED / DATA_ERASED naming a saga",
          (f"{_GUARDS}test_outcome_structure.py", "tests/evidence/test_entry_authenticity.py",
           "tests/sensitive/test_access_log.py")),
    Guard("sagacity_agents.core.approval_rule",
          ("approval_problem", "bound_arguments", "_trail_problem", "_decision_problem",
           "_consumed_problem", "_intent_problem", "_same_raw_call"),
          "the approval rule in verify: an irreversible call cites its approved, consumed request "
          "with the approved arguments hash; nothing runs under a rejected, voided or expired "
          "request; a request is decided, consumed and used once",
          (f"{_GUARDS}test_approval_rule.py", f"{_GUARDS}test_sensitive_approval_refusals.py")),
    Guard("sagacity_agents.core.append_rule",
          ("next_entry", "AppendRequest.checks_fence", "reopens", "late_start"),
          "the append rule: fence first, then closed saga (only a late call outcome under its "
          "INTENT's own fence follows a close), then expected tail",
          (f"{_GUARDS}test_append_fence_and_lease_refusals.py",
           "tests/in_doubt/test_late_outcome_after_close.py")),
    Guard("sagacity_agents.core.fence",
          ("_answers_own_start", "FencedJournal._fenced", "FencedJournal.append",
           "JournalView.__init__", "FencedJournal.own_tail"),
          "fencing: a run's appends carry its lease's token; only its own outcomes go late; no "
          "view over a saga's fenced journal drops the token",
          (f"{_GUARDS}test_append_fence_and_lease_refusals.py", "tests/journal/test_capabilities.py",
           "tests/in_doubt/test_late_outcome_during_close.py")),
    Guard("sagacity_agents.core.ledger",
          ("SagaLedger.awaits_outcome", "_outranks", "has_effect", "answer_of", "SagaLedger._pair"),
          "a recovery compensates from its verified snapshot only while nothing in it can still "
          "get a late outcome; a call's own outcome outranks an answer \"not run\"",
          ("tests/sdk/test_recovery_sees_late_outcomes.py", "tests/sdk/test_recovery_reads.py",
           "tests/in_doubt/test_answers_and_checks_in_the_ledger.py",
           f"{_GUARDS}test_undo_order_and_verdict.py")),
    Guard("sagacity_agents.core.lease",
          ("Lease.held", "acquire_lease"),
          "lease refusal: one run at a time, none on a closed saga",
          (f"{_GUARDS}test_append_fence_and_lease_refusals.py",)),
    Guard("sagacity_agents.core.authenticity",
          ("TagCache.check", "authenticity_fault", "untagged_after_tagged", "role_fault",
           "_late_key_problem", "TagCache.unproven", "prove_tags"),
          "entry tags (Ed25519), signed RESOLVED, and the tag's and statement's key may sign the "
          "phase and was not revoked before the entry; tags proven ahead on threads",
          (f"{_GUARDS}test_entry_tag_faults.py", "tests/evidence/test_entry_tags.py",
           f"{_GUARDS}test_key_role_faults.py", "tests/in_doubt/test_late_outcome_after_close.py",
           "tests/evidence/test_verify_entry_points.py")),
    Guard("sagacity_agents.core.identity",
          ("check_saga_id", "copied_saga_problem", "derivation_of", "Derivation.key_binding",
           "bound_tag_statement", "opened_hash_of"),
          "journal identity: reserved and empty saga ids, a saga of another journal, which key "
          "and tag derivation a saga follows",
          ("tests/evidence/test_journal_identity.py", "tests/journal/test_schema_versions.py",
           "tests/evidence/test_previous_release.py")),
    Guard("sagacity_agents.core.resolution",
          ("answer_not_yet", "_holder_problem", "_checked_undo_data"),
          "a human's answer: only once a recovery took the holder's lease over and reported the "
          "call, after its deadline; undo data canonical and holding what the undo needs",
          ("tests/sdk/test_answers_wait_for_the_holder.py",
           "tests/crash/test_resolve_with_undo_data.py")),
    Guard("sagacity_agents.core.key_roles",
          ("tag_roles", "statement_key", "KeyRoles.roles_of", "KeyRoles.boundary",
           "KeyRoles.checkpoint_problem", "read_roles"),
          "which role signs which phase (the access log: a checkpoint signer); the default "
          "roles; a revoked key's boundary; which keyring events count (an unrevoked admin's, "
          "well formed)",
          (f"{_GUARDS}test_key_role_faults.py", "tests/sensitive/test_access_log.py")),
    Guard("sagacity_agents.core.compensation",
          ("undo_order", "_declaration_for"),
          "compensation order: what may have acted, newest outcome first; which undo: the graph "
          "given, the INTENT's id and scope, never one found elsewhere",
          (f"{_GUARDS}test_undo_order_and_verdict.py", "tests/sdk/test_tenant_recovery.py",
           "tests/sdk/test_factory_tools_on_two_agents.py", "tests/sdk/test_agent_graph.py")),
    Guard("sagacity_agents.core.declarations",
          ("_claim_objects",),
          "one derived id around other captured objects without scope or declaration_id: raise",
          ("tests/sdk/test_tenant_recovery.py",)),
    Guard("sagacity_agents.core.declarations",
          ("ToolDeclaration._check_sensitivity",),
          "sensitive= refused unless names or rooted paths; a compensatable tool whose undo data "
          "would hold a sensitive value refused without a master key",
          (_SENSITIVE,)),
    Guard("sagacity_agents.core.compensation",
          ("_Walk.visit",),
          "an undo never runs on masks of erased values: reported still dirty, naming the erasure",
          (_SENSITIVE,)),
    Guard("sagacity_agents.core.protection",
          ("opened", "undo_payloads", "remember_raw_args", "_learn"),
          "what an undo or a check gets: sealed values opened, masks where nothing is stored, an "
          "erased saga refused; names inside raw argument text masked; opened values remembered",
          (_SENSITIVE,)),
    Guard("sagacity_agents.sdk.mcp.protect",
          ("McpProtection.undo_refusal",),
          "an MCP undo to a tool changed since its pin is not sent",
          ("tests/mcp/test_mcp_undo_pinned.py",)),
    Guard("sagacity_agents.core.saga.calls",
          ("_context_lost",),
          "undo data from a thread without the call's context: raise, mark the calls in flight",
          ("tests/sdk/test_undo_data_threads.py",)),
    Guard("sagacity_agents.core.erasure",
          ("erasure_refusal", "_open_refusal", "_deadline_refusal"),
          "erasure of a saga's data key: refused while open, awaiting approval, in doubt, "
          "reopened, closed dirty, or a call or undo before its deadline",
          (f"{_GUARDS}test_erasure_refusal.py",)),
    Guard("sagacity_agents.core.saga.verdict",
          ("changes_world", "SagaVerdict.failed", "SagaVerdict.blocks_output"),
          "the guardrail verdict: output withheld, effects refused after a failure",
          (f"{_GUARDS}test_undo_order_and_verdict.py",)),
)

EQUIVALENT: dict[str, str] = {
    "sagacity_agents.core.chain:_encodes_to:ReplaceOrWithAnd#0":
        "`a or b` -> `a and b`: `_encodes_to` only lets an entry skip the strict reader; "
        "returning False more often sends more entries to `_parsed_fault`, which gives the same "
        "verdict (slower, never weaker)",
    "sagacity_agents.core.structure:_resumed_after_pause:ReplaceComparisonOperator_Lt_LtE#0":
        "`intent.seq < pause` -> `<=`: `pause` is the seq of a RUN_ENDED, `intent.seq` of an "
        "INTENT: one seq is one entry, so they are never equal",
    "sagacity_agents.core.structure:_resumed_after_pause:ReplaceComparisonOperator_Lt_LtE#1":
        "`pause < here` -> `<=`: `here` is a fence, the seq of a RUN_STARTED (checked before), "
        "`pause` the seq of a RUN_ENDED: never equal",
    "sagacity_agents.core.chain:check_anchor:ReplaceComparisonOperator_Lt_LtE#0":
        "`last < anchor.seq` -> `<=`: reached only when no entry has seq anchor.seq, and `last` "
        "is the seq of an entry, so `last == anchor.seq` cannot happen",
    "sagacity_agents.core.chain:_verify_chain:ReplaceComparisonOperator_Gt_GtE#0":
        "`entry.seq > position` -> `>=`: inside `if entry.seq != position`, so equality cannot "
        "happen",
    "sagacity_agents.core.append_rule:next_entry:ReplaceTrueWithFalse#0":
        "`converted=True` -> `False`: the payload was converted by AppendRequest.build; "
        "converting a converted value again gives the same value (only slower: overhead.py)",
    "sagacity_agents.core.authenticity:authenticity_fault:NumberReplacer#3":
        "`before = ... else 0` -> `-1`: `before` is compared with `entry.seq <= before` and "
        "`entry.seq > before`, and seqs start at 1, so 0 and -1 both mean \"no entry before "
        "the keyring\"",
}
"""Equivalent mutants by id (``module:function:operator#n``), each with its reason."""


@dataclass
class Mutant:
    """One mutation of one guard function."""

    guard: Guard
    function: str
    """The guard function (qualified name) the mutation is in."""
    operator: str
    occurrence: int
    """cosmic-ray's occurrence index of ``operator`` in the module."""
    nth: int
    """Index among ``operator``'s mutations inside ``function`` (stable while it is unchanged)."""
    line: int
    source: str = field(repr=False)
    """The mutated module source."""

    @property
    def ident(self) -> str:
        return f"{self.guard.module}:{self.function}:{self.operator}#{self.nth}"

    def diff(self, original: str) -> str:
        lines = difflib.unified_diff(original.splitlines(), self.source.splitlines(), lineterm="", n=1)
        return "\n".join(list(lines)[2:])


def _qualname(node: Any) -> str | None:
    """``Class.method`` / ``func`` of the outermost definition holding ``node`` (its code object
    holds nested functions' code as constants), or ``None`` at module level."""
    from parso.python import tree

    defs = []
    while node is not None:
        if isinstance(node, (tree.Function, tree.Class)):
            defs.append(node)
        node = node.parent
    if not defs:
        return None
    outer = defs[-1]
    if isinstance(outer, tree.Class) and len(defs) > 1:
        return f"{outer.name.value}.{defs[-2].name.value}"
    return str(outer.name.value)


def mutants_of(guard: Guard) -> tuple[str, list[Mutant]]:
    """The module's source and every mutant inside ``guard``'s functions."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.mutating import mutate_code

    path = Path(importlib.util.find_spec(guard.module).origin)  # type: ignore[union-attr,arg-type]
    source = path.read_text(encoding="utf-8")
    found: list[Mutant] = []
    for name in OPERATORS:
        operator = cosmic_ray.plugins.get_operator(f"core/{name}")()
        positions = [(node, start) for node in ast_nodes(get_ast(source))
                     for start, _end in operator.mutation_positions(node)]
        per_function: dict[str, int] = {}
        for occurrence, (node, start) in enumerate(positions):
            function = _qualname(node)
            if function not in guard.functions:
                continue
            try:
                mutated = mutate_code(source, operator, occurrence)
            except AttributeError as exc:
                # cosmic-ray's ExceptionReplacer fails on `except (A, pkg.B)` (a dotted name in a
                # tuple): said, never silently dropped.
                print(f"NOT MUTATED {guard.module}:{function}:{name} (line {start[0]}): "
                      f"cosmic-ray cannot apply it here ({exc})")
                continue
            if mutated is None or mutated == source:
                continue
            nth = per_function.get(function, 0)
            per_function[function] = nth + 1
            found.append(Mutant(guard, function, name, occurrence, nth, start[0], mutated))
    return source, found


def _function_object(module: types.ModuleType, qualname: str) -> types.FunctionType:
    owner: Any = module
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    raw = inspect.getattr_static(owner, parts[-1])
    for attr in ("fget", "__func__"):
        raw = getattr(raw, attr, raw)
    return inspect.unwrap(raw)


def _swap_in(mutant: Mutant) -> None:
    """Give the live guard function the mutated code (in the forked child only)."""
    module = sys.modules[mutant.guard.module]
    namespace: dict[str, Any] = {"__name__": module.__name__, "__package__": module.__package__,
                                 "__file__": module.__file__}
    exec(compile(mutant.source, module.__file__ or "<mutant>", "exec"), namespace)  # noqa: S102
    fake = types.SimpleNamespace(**namespace)
    _function_object(module, mutant.function).__code__ = _function_object(fake, mutant.function).__code__  # type: ignore[arg-type]


def _run_tests(tests: tuple[str, ...], mutant: Mutant | None) -> int:
    """Fork; in the child swap the mutant in and run pytest; return the child's pid."""
    sys.stdout.flush()  # else the child inherits the buffer and prints it again
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 3
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        if mutant is not None:
            _swap_in(mutant)
        import pytest

        code = int(pytest.main([*_PYTEST_ARGS, *tests]))
    finally:
        os._exit(code)


_PYTEST_ARGS = ("-q", "-x", "-p", "no:cacheprovider", "--no-cov",
                # plugins imported before pytest's hook (here, in the parent) are not rewritten
                "-W", "ignore::pytest.PytestAssertRewriteWarning")


def _preload(guards: tuple[Guard, ...]) -> None:
    """Import what every test imports once, so each fork starts warm: the libraries, the guard
    modules, and (by collecting them once) the pytest plugins, conftests and test modules."""
    import agents  # noqa: F401
    import hypothesis  # noqa: F401
    import pytest

    import sagacity_agents.sdk.facade
    import sagacity_agents.stores  # noqa: F401
    for guard in guards:
        importlib.import_module(guard.module)
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["--collect-only", *_PYTEST_ARGS, *sorted({t for g in guards for t in g.tests})])


def _run_all(jobs: list[tuple[Guard, Mutant | None]], parallel: int, timeout: float) -> dict[int, str]:
    """Run each job in a forked child, ``parallel`` at once; index -> "pass"/"fail"/"timeout"."""
    outcome: dict[int, str] = {}
    running: dict[int, tuple[int, float]] = {}
    queue = list(enumerate(jobs))
    while queue or running:
        while queue and len(running) < parallel:
            index, (guard, mutant) = queue.pop(0)
            running[_run_tests(guard.tests, mutant)] = (index, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for child, (index, started) in list(running.items()):
                if now - started > timeout:
                    os.kill(child, signal.SIGKILL)
                    os.waitpid(child, 0)
                    outcome[index] = "timeout"
                    del running[child]
            time.sleep(0.05)
            continue
        if pid in running:
            index, _started = running.pop(pid)
            outcome[index] = "pass" if os.waitstatus_to_exitcode(status) == 0 else "fail"
            if len(jobs) > 20 and len(outcome) % 25 == 0:
                print(f"  ... {len(outcome)}/{len(jobs)} run", file=sys.stderr, flush=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--guard", action="append", default=[],
                        help="only guards whose module name contains this (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one mutant's tests may take; longer counts as killed")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    guards = tuple(g for g in GUARDS if not args.guard or any(s in g.module for s in args.guard))
    missing = sorted({t for g in guards for t in g.tests if not (ROOT / t).exists()})
    if missing:
        print(f"T-01: test files missing: {', '.join(missing)}")
        return 2
    started = time.monotonic()
    _preload(guards)
    sources: dict[str, str] = {}
    mutants: list[Mutant] = []
    for guard in guards:
        sources[guard.module], found = mutants_of(guard)
        mutants.extend(found)
        print(f"{guard.module}: {len(found)} mutants in {', '.join(guard.functions)}")
    if args.list:
        for m in mutants:
            print(f"  {m.ident} (line {m.line})")
        return 0
    baseline = _run_all([(g, None) for g in guards], args.jobs, args.timeout * 3)
    broken = [g.module for i, g in enumerate(guards) if baseline[i] != "pass"]
    if broken:
        print(f"T-01: the guards' tests fail unmutated ({', '.join(broken)}); fix them first")
        return 2
    outcome = _run_all([(m.guard, m) for m in mutants], args.jobs, args.timeout)
    survivors = [m for i, m in enumerate(mutants) if outcome[i] == "pass"]
    unexplained = [m for m in survivors if m.ident not in EQUIVALENT]
    for m in survivors:
        why = EQUIVALENT.get(m.ident)
        print(f"\nSURVIVED {m.ident} (line {m.line})" + (f" [equivalent: {why}]" if why else ""))
        print(m.diff(sources[m.guard.module]))
    timeouts = sum(1 for v in outcome.values() if v == "timeout")
    print(f"\nT-01: {len(mutants)} mutants in {sum(len(g.functions) for g in guards)} guard functions "
          f"of {len(guards)} modules: {len(mutants) - len(survivors)} killed ({timeouts} by timeout), "
          f"{len(survivors)} survived ({len(survivors) - len(unexplained)} named equivalent), "
          f"{time.monotonic() - started:.0f} s")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
