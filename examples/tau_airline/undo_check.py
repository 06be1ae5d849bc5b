"""Self-test of the undo functions on every recorded conversation.

For every database-changing call *k* (a successful call of a mutating tool)
of every recorded conversation, on a fresh store:

1. run the conversation's calls up to and including call *k*, capturing each
   mutating call's undo data;
2. undo the compensatable calls in reverse order (irreversible calls, i.e.
   ``cancel_reservation`` and ``send_certificate``, are kept: they stand for
   approved calls executed before a failure);
3. check the business invariants (:mod:`.invariants`) against the snapshot
   taken before step 1, excluding the reservations and users the kept calls
   touched, and check that compensation settled nothing twice on those
   excluded entities (see :func:`settlement_violations`).

Run from the repository root::

    python -m examples.tau_airline.undo_check [--data PATH] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .invariants import check_invariants
from .recordings import Conversation, load_conversations
from .replay import ExecutedCall, execute_calls, touched_by
from .store import AirlineStore, DataNotFoundError
from .tools import COMPENSATIONS

__all__ = ["UndoCase", "check_conversation", "main", "settlement_violations", "undo_check"]

Snapshot = Mapping[str, Mapping[str, Mapping[str, Any]]]


@dataclass
class UndoCase:
    """One prefix of a conversation, executed then compensated.

    Attributes:
        conversation: Conversation label.
        last_position: Position of call *k*, the last call executed.
        executed: Number of calls executed.
        compensated: ``(tool, description)`` of each undo, in undo order.
        kept: Names of the kept irreversible calls.
        excluded_reservations: Reservations touched by kept calls.
        excluded_users: Users touched by kept calls.
        violations: Invariant and settlement violations (empty = ok).
        users_identical: Whether every non-excluded user is restored
            exactly, including the order of payment methods and reservations.
    """

    conversation: str
    last_position: int
    executed: int
    compensated: list[tuple[str, str]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    excluded_reservations: set[str] = field(default_factory=set)
    excluded_users: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    users_identical: bool = True


def _compensate(store: AirlineStore, executed: Sequence[ExecutedCall]) -> list[tuple[str, str]]:
    """Undo the compensatable calls in reverse order.

    The arguments and undo data go through a JSON round trip first, as they
    would when a journal stores them.

    Args:
        store: The store after the calls.
        executed: The executed calls, in order.

    Returns:
        ``(tool, description)`` per undo, in undo order.
    """
    done = []
    for item in reversed(executed):
        if item.compensatable:
            undo = COMPENSATIONS[item.call.name]
            args, undo_data = json.loads(json.dumps([item.call.arguments, item.undo_data]))
            done.append((item.call.name, undo(store, args, item.output, undo_data)))
    return done


def _expected_methods(
    before: Snapshot, user_id: str, kept: Iterable[ExecutedCall]
) -> dict[str, tuple]:
    """Payment methods an excluded user should have once compensation is done.

    Starting from the user's methods before the run: a kept
    ``send_certificate`` adds its certificate; a kept ``cancel_reservation``
    leaves charged (refund pending, "5 to 7 business days") whatever the run
    had charged to that reservation before the cancellation: its refunds of
    entries added during the run lower that gift card's balance or remove
    that used-up certificate.  Everything else the run charged must have been
    credited back.

    Returns:
        ``{payment_id: (source, amount)}``.
    """
    methods = before["users"][user_id]["payment_methods"]
    expected = {pid: (m.get("source"), m.get("amount")) for pid, m in methods.items()}
    for item in kept:
        data = item.undo_data
        if data["user_id"] != user_id:
            continue
        if item.call.name == "send_certificate":
            expected[data["payment_id"]] = ("certificate", data["amount"])
            continue
        old = before["reservations"].get(data["reservation_id"], {}).get("payment_history", [])
        for refund in data["refunds"][len(old) :]:
            source, amount = expected.get(refund["payment_id"], (None, None))
            if source == "gift_card":
                expected[refund["payment_id"]] = (source, amount + refund["amount"])
            elif source == "certificate":
                del expected[refund["payment_id"]]
    return expected


def settlement_violations(
    before: Snapshot,
    pre_compensation: Mapping[str, Mapping[str, Any] | None],
    after: Snapshot,
    kept: Sequence[ExecutedCall],
    excluded_users: Iterable[str],
) -> list[str]:
    """Check that compensation did not settle a second time what kept calls settled.

    * on a reservation touched by a kept call, compensation adds no payment
      entry and does not change its status;
    * an excluded user's payment methods are exactly those of
      :func:`_expected_methods` (no double credit, nothing left uncredited).

    Args:
        before: Snapshot before the run.
        pre_compensation: The reservations touched by kept calls (id to
            reservation or ``None``) as they were before compensation.
        after: Snapshot after compensation.
        kept: The executed irreversible calls.
        excluded_users: Users touched by kept calls.

    Returns:
        Violations, prefixed ``"[settled]"``.
    """
    violations = []
    for rid in sorted(pre_compensation):
        old, new = pre_compensation[rid], after["reservations"].get(rid)
        if old is None:
            continue
        if new is None or new["payment_history"] != old["payment_history"]:
            violations.append(f"[settled] compensation changed the payment history of {rid}")
        elif new.get("status") != old.get("status"):
            violations.append(f"[settled] compensation changed the status of {rid}")
    for user_id in sorted(excluded_users):
        expected = _expected_methods(before, user_id, kept)
        methods = after["users"][user_id]["payment_methods"]
        actual = {pid: (m.get("source"), m.get("amount")) for pid, m in methods.items()}
        if actual != expected:
            diff = {
                pid: (expected.get(pid), actual.get(pid))
                for pid in expected.keys() | actual.keys()
                if expected.get(pid) != actual.get(pid)
            }
            violations.append(
                f"[settled] user {user_id}: (expected, actual) payment methods {diff}"
            )
    return violations


def _users_identical(before: Snapshot, after: Snapshot, excluded: set[str]) -> bool:
    """Whether non-excluded users are restored exactly, payment-method order included."""
    for user_id, user in before["users"].items():
        restored = after["users"].get(user_id)
        if user_id in excluded:
            continue
        if restored != user or list(restored["payment_methods"]) != list(user["payment_methods"]):
            return False
    return True


def _run_case(
    conversation: Conversation, last_position: int, data_dir: Path | None, before: Snapshot
) -> UndoCase:
    """Execute a conversation prefix, compensate it and check the invariants.

    Args:
        conversation: The recorded conversation.
        last_position: Position of the last call to execute.
        data_dir: The data folder.
        before: Snapshot of a fresh store (read only; shared between cases).

    Returns:
        The checked case.
    """
    case = UndoCase(conversation.label, last_position, last_position + 1)
    with AirlineStore(data_dir) as store:
        executed = execute_calls(store, conversation.calls[: last_position + 1])
        kept = [item for item in executed if item.irreversible]
        for item in kept:
            reservations, users = touched_by(item)
            case.excluded_reservations |= reservations
            case.excluded_users |= users
            case.kept.append(item.call.name)
        pre_compensation = {rid: store.get_reservation(rid) for rid in case.excluded_reservations}
        case.compensated = _compensate(store, executed)
        after = store.snapshot()
    case.violations = check_invariants(
        before, after, case.excluded_reservations, case.excluded_users
    ) + settlement_violations(before, pre_compensation, after, kept, case.excluded_users)
    case.users_identical = _users_identical(before, after, case.excluded_users)
    return case


def _changing_positions(conversation: Conversation, data_dir: Path | None) -> list[int]:
    """Positions of the conversation's successful database-changing calls."""
    with AirlineStore(data_dir) as store:
        executed = execute_calls(store, conversation.calls)
    return [item.call.position for item in executed if item.changed_database]


def _initial_snapshot(data_dir: Path | None) -> Snapshot:
    """Snapshot of a fresh store (identical for every fresh store)."""
    with AirlineStore(data_dir) as store:
        return store.snapshot()


def check_conversation(
    conversation: Conversation,
    data_dir: str | Path | None = None,
    initial: Snapshot | None = None,
) -> list[UndoCase]:
    """Run the undo check for every database-changing call of a conversation.

    Args:
        conversation: A recorded conversation.
        data_dir: The ``tau-airline`` data folder (``None``: default).
        initial: Snapshot of a fresh store, if already taken (it is the same
            for every fresh store, so callers checking many conversations
            pass it to save time); it is not modified.

    Returns:
        One :class:`UndoCase` per database-changing call (none if the
        conversation changes nothing).
    """
    resolved = None if data_dir is None else Path(data_dir)
    positions = _changing_positions(conversation, resolved)
    if positions and initial is None:
        initial = _initial_snapshot(resolved)
    return [_run_case(conversation, position, resolved, initial) for position in positions]


@dataclass
class UndoCheckReport:
    """Outcome of :func:`undo_check`.

    Attributes:
        conversations: Number of conversations examined.
        cases: All cases.
        seconds: Wall-clock duration.
    """

    conversations: int = 0
    cases: list[UndoCase] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def violations(self) -> list[tuple[UndoCase, str]]:
        """All violations with their case."""
        return [(case, v) for case in self.cases for v in case.violations]


def undo_check(
    data_dir: str | Path | None = None, conversations: Iterable[Conversation] | None = None
) -> UndoCheckReport:
    """Run the undo check over conversations.

    Args:
        data_dir: The ``tau-airline`` data folder (``None``: default).
        conversations: Which conversations (default: all 150).

    Returns:
        The report.

    Raises:
        DataNotFoundError: If the data folder is missing.
    """
    started = time.perf_counter()
    if conversations is None:
        conversations = load_conversations(data_dir)
    report = UndoCheckReport()
    initial = _initial_snapshot(None if data_dir is None else Path(data_dir))
    for conversation in conversations:
        report.conversations += 1
        report.cases.extend(check_conversation(conversation, data_dir, initial))
    report.seconds = time.perf_counter() - started
    return report


def format_report(report: UndoCheckReport, verbose: bool = False) -> str:
    """Render an undo-check report as text.

    Args:
        report: The report.
        verbose: Also describe every case (undos run, calls kept).

    Returns:
        Multi-line text.
    """
    cases = report.cases
    with_changes = len({c.conversation for c in cases})
    undos = sum(len(c.compensated) for c in cases)
    kept = sum(len(c.kept) for c in cases)
    identical = sum(1 for c in cases if c.users_identical)
    lines = [
        f"τ-bench airline undo check: {report.conversations} conversations, {with_changes} with "
        f"database-changing calls, {len(cases)} cases (one per such call), {report.seconds:.2f} s",
        f"  summed over cases: calls executed {sum(c.executed for c in cases)}, "
        f"undos run {undos}, irreversible calls kept {kept}",
        f"  cases with exclusions (kept irreversible calls): {sum(1 for c in cases if c.kept)}",
        f"  cases whose non-excluded users are restored byte-identical: {identical}/{len(cases)}",
        f"  violations: {len(report.violations)}",
    ]
    for case, violation in report.violations:
        lines.append(f"    {case.conversation} up to call {case.last_position}: {violation}")
    if verbose:
        for case in cases:
            lines.append(f"  {case.conversation} up to call {case.last_position}:")
            if case.kept:
                lines.append(
                    f"    kept {', '.join(case.kept)}; excluded reservations "
                    f"{sorted(case.excluded_reservations)}, users {sorted(case.excluded_users)}"
                )
            for tool, description in case.compensated:
                lines.append(f"    undo {tool}: {description}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        0 without violations, 1 with violations, 2 if data is missing.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="tau-airline data folder")
    parser.add_argument("--verbose", action="store_true", help="describe every case")
    args = parser.parse_args(argv)
    try:
        report = undo_check(args.data)
    except DataNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(format_report(report, verbose=args.verbose))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
