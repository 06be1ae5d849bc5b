"""Business invariants of the airline database after a compensated run.

They compare a snapshot taken before the run (``AirlineStore.snapshot()``)
with one taken after compensation:

1. every user's payment methods are as before: the same ids, sources and
   gift-card/certificate amounts;
2. every reservation that existed before has its previous flights, cabin,
   passengers, bags, insurance and status;
3. no reservation created during the run is active (it is cancelled or gone)
   and no user lists a reservation the run created that is active (or that
   no longer exists);
4. for every reservation and payment id, the payment-history entries added
   during the run sum to zero.

Reservations and users touched by approved, executed irreversible calls are
excluded (their effects are kept on purpose).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["RESERVATION_FIELDS", "check_invariants"]

Snapshot = Mapping[str, Mapping[str, Mapping[str, Any]]]

#: Reservation fields that invariant 2 compares.
RESERVATION_FIELDS: tuple[str, ...] = (
    "flights",
    "cabin",
    "passengers",
    "total_baggages",
    "nonfree_baggages",
    "insurance",
    "status",
)
_EPSILON = 1e-6


def _payment_signature(methods: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple]:
    """Reduce payment methods to ``{id: (source, amount or None)}``."""
    return {pid: (m.get("source"), m.get("amount")) for pid, m in methods.items()}


def _check_payment_methods(before: Snapshot, after: Snapshot, excluded: set[str]) -> list[str]:
    """Invariant 1: users' payment methods (ids, sources, balances) unchanged."""
    violations = []
    for user_id, user_before in before["users"].items():
        if user_id in excluded:
            continue
        user_after = after["users"].get(user_id)
        if user_after == user_before:
            continue
        if user_after is None:
            violations.append(f"[1] user {user_id} no longer exists")
            continue
        old = _payment_signature(user_before["payment_methods"])
        new = _payment_signature(user_after["payment_methods"])
        for pid in sorted(old.keys() - new.keys()):
            violations.append(f"[1] user {user_id}: payment method {pid} {old[pid]} is missing")
        for pid in sorted(new.keys() - old.keys()):
            violations.append(f"[1] user {user_id}: payment method {pid} {new[pid]} was added")
        for pid in sorted(old.keys() & new.keys()):
            if old[pid] != new[pid]:
                violations.append(
                    f"[1] user {user_id}: payment method {pid} was {old[pid]}, is {new[pid]}"
                )
    return violations


def _check_old_reservations(before: Snapshot, after: Snapshot, excluded: set[str]) -> list[str]:
    """Invariant 2: pre-existing reservations keep their business fields."""
    violations = []
    for reservation_id, old in before["reservations"].items():
        if reservation_id in excluded:
            continue
        new = after["reservations"].get(reservation_id)
        if new == old:
            continue
        if new is None:
            violations.append(f"[2] reservation {reservation_id} no longer exists")
            continue
        for field in RESERVATION_FIELDS:
            if old.get(field) != new.get(field):
                violations.append(
                    f"[2] reservation {reservation_id}: {field} was {old.get(field)!r}, "
                    f"is {new.get(field)!r}"
                )
    return violations


def _check_new_reservations(
    before: Snapshot, after: Snapshot, excluded_reservations: set[str], excluded_users: set[str]
) -> list[str]:
    """Invariant 3: reservations created by the run are inactive and not listed as active."""
    violations = []
    created = after["reservations"].keys() - before["reservations"].keys()
    for reservation_id in sorted(created - excluded_reservations):
        if after["reservations"][reservation_id].get("status") != "cancelled":
            violations.append(f"[3] reservation {reservation_id} created during the run is active")
    for user_id, user in after["users"].items():
        if user_id in excluded_users:
            continue
        old_ids = set(before["users"].get(user_id, {}).get("reservations", ()))
        for reservation_id in user.get("reservations", ()):
            if reservation_id in old_ids or reservation_id in excluded_reservations:
                continue
            reservation = after["reservations"].get(reservation_id)
            if reservation is None:
                violations.append(
                    f"[3] user {user_id} lists reservation {reservation_id}, which does not exist"
                )
            elif reservation.get("status") != "cancelled":
                violations.append(
                    f"[3] user {user_id} lists active reservation {reservation_id} "
                    "created during the run"
                )
    return violations


def _sums_by_payment(history: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Sum payment-history amounts per payment id."""
    sums: dict[str, float] = defaultdict(float)
    for entry in history:
        sums[entry["payment_id"]] += entry["amount"]
    return sums


def _check_payment_histories(before: Snapshot, after: Snapshot, excluded: set[str]) -> list[str]:
    """Invariant 4: entries added during the run sum to zero per reservation and payment id.

    "Added" is measured as the difference of the per-payment-id sums, so a
    charge whose entry was removed counts as undone, like one matched by a
    refund entry.
    """
    violations = []
    for reservation_id, reservation in after["reservations"].items():
        if reservation_id in excluded:
            continue
        old = before["reservations"].get(reservation_id, {}).get("payment_history", [])
        if reservation.get("payment_history", []) == old:
            continue
        old_sums = _sums_by_payment(old)
        new_sums = _sums_by_payment(reservation.get("payment_history", []))
        for payment_id in sorted(old_sums.keys() | new_sums.keys()):
            added = new_sums.get(payment_id, 0) - old_sums.get(payment_id, 0)
            if abs(added) > _EPSILON:
                violations.append(
                    f"[4] reservation {reservation_id}: payment entries added for {payment_id} "
                    f"sum to {added:g}, not 0"
                )
    return violations


def check_invariants(
    before_snapshot: Snapshot,
    after_snapshot: Snapshot,
    excluded_reservations: Iterable[str] = frozenset(),
    excluded_users: Iterable[str] = frozenset(),
) -> list[str]:
    """Check the four business invariants between two snapshots.

    Args:
        before_snapshot: ``AirlineStore.snapshot()`` taken before the run.
        after_snapshot: ``AirlineStore.snapshot()`` taken after compensation.
        excluded_reservations: Reservation ids touched by kept irreversible
            calls (not checked by invariants 2-4).
        excluded_users: User ids touched by kept irreversible calls (not
            checked by invariants 1 and 3).

    Returns:
        Human-readable violations, each prefixed with its invariant number
        (``"[1] ..."``); empty when all invariants hold.
    """
    excluded_reservations = set(excluded_reservations)
    excluded_users = set(excluded_users)
    return [
        *_check_payment_methods(before_snapshot, after_snapshot, excluded_users),
        *_check_old_reservations(before_snapshot, after_snapshot, excluded_reservations),
        *_check_new_reservations(
            before_snapshot, after_snapshot, excluded_reservations, excluded_users
        ),
        *_check_payment_histories(before_snapshot, after_snapshot, excluded_reservations),
    ]
