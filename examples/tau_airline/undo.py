"""Compensations (undo functions) for the compensatable airline tools.

Each undo has the signature ``undo(store, args, result, undo_data) -> str``:

* ``args``: the tool call's arguments,
* ``result``: the tool's (successful) output,
* ``undo_data``: the before-state the tool passed to its ``record`` callback,

and returns a one-line description of what it did (for a journal or report).

An undo acts on the database *as it is now*, not as it was right after the
call:

* money is credited back as a delta (a gift card gets back exactly what the
  call debited; a used-up certificate is re-created with its previous amount),
  so undoing several calls in reverse order composes;
* an update's charge is reversed by appending the opposite payment-history
  entry (so the entries the run added sum to zero per payment id) and, for a
  gift card, crediting the balance;
* a reservation that a *later*, approved ``cancel_reservation`` cancelled is
  left alone: the cancellation already appended a refund for every payment
  entry, including the charge being undone, so crediting it again would pay
  twice.  Its fields are not rewound either: it is kept as the irreversible
  call left it (README, task 34 and task 15).  A booking whose reservation was
  cancelled later is likewise kept (cancelled, so inactive);
* an update made on a reservation that was *already* cancelled (the tools do
  not check the status) was not covered by that cancellation's refunds, so it
  is reversed like any other update.

Every undo runs in one store transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .store import AirlineStore, atomic

__all__ = [
    "undo_book_reservation",
    "undo_update_reservation_baggages",
    "undo_update_reservation_flights",
    "undo_update_reservation_passengers",
]


def _cancelled_later(reservation: Mapping[str, Any], undo_data: Mapping[str, Any]) -> bool:
    """Tell whether a reservation was cancelled after the call being undone.

    Args:
        reservation: The reservation as it is now.
        undo_data: The call's undo data (``status_before``; absent for a
            booking, whose reservation did not exist before).

    Returns:
        ``True`` if it is cancelled now but was not cancelled before the call.
    """
    return (
        reservation.get("status") == "cancelled" and undo_data.get("status_before") != "cancelled"
    )


def _credit_gift_card(store: AirlineStore, user_id: str, payment_id: str, amount: Any) -> bool:
    """Add ``amount`` back to a gift card's balance (negative debits).

    Args:
        store: The airline store.
        user_id: The card's owner.
        payment_id: The gift card id.
        amount: The amount to credit.

    Returns:
        ``True`` if the card exists and was credited.
    """
    user = store.get_user(user_id)
    method = None if user is None else user["payment_methods"].get(payment_id)
    if method is None or method.get("source") != "gift_card":
        return False
    method["amount"] += amount
    store.put_user(user_id, user)
    return True


def _reverse_update_charge(
    store: AirlineStore, reservation: dict[str, Any], undo_data: Mapping[str, Any]
) -> str:
    """Reverse an update's charge: opposite history entry plus gift-card credit.

    Args:
        store: The airline store.
        reservation: The reservation as it is now (modified, not saved).
        undo_data: The update's undo data (``payment_id``, ``payment_source``,
            ``amount``, ``user_id``).

    Returns:
        A description of the money movement ("" if nothing was charged).
    """
    amount = undo_data["amount"]
    if not amount:
        return ""
    payment_id = undo_data["payment_id"]
    reservation["payment_history"].append({"payment_id": payment_id, "amount": -amount})
    text = f"; appended reversing entry {payment_id} {-amount:+}"
    gift_card = undo_data["payment_source"] == "gift_card"
    if gift_card and _credit_gift_card(store, undo_data["user_id"], payment_id, amount):
        text += f", gift card balance {amount:+}"
    return text


def _undo_update(
    store: AirlineStore, undo_data: Mapping[str, Any], fields: Mapping[str, Any], what: str
) -> str:
    """Common undo of the three update tools.

    Args:
        store: The airline store.
        undo_data: The update's undo data.
        fields: Reservation fields to restore (name to previous value).
        what: Short name of the update, for the description.

    Returns:
        A one-line description.
    """
    reservation_id = undo_data["reservation_id"]
    reservation = store.get_reservation(reservation_id)
    if reservation is None:
        return f"{what} of {reservation_id}: reservation no longer exists, nothing to undo"
    if _cancelled_later(reservation, undo_data):
        return (
            f"{what} of {reservation_id}: kept; the reservation was cancelled afterwards and "
            "that cancellation already refunded every payment entry"
        )
    reservation.update({k: _copy(v) for k, v in fields.items()})
    money = _reverse_update_charge(store, reservation, undo_data)
    store.put_reservation(reservation_id, reservation)
    return f"{what} of {reservation_id}: restored {', '.join(fields)}{money}"


def _copy(value: Any) -> Any:
    """Deep-copy plain JSON data."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@atomic
def undo_update_reservation_flights(
    store: AirlineStore, args: Mapping[str, Any], result: str, undo_data: Mapping[str, Any]
) -> str:
    """Undo ``update_reservation_flights``.

    Restores the previous flights (and cabin field), appends the opposite of
    the charge/refund to the payment history and, for a gift card, credits
    (or re-debits, for a refund) the balance.  Does nothing to a reservation
    cancelled after the update.

    Args:
        store: The airline store.
        args: The call's arguments (unused; the undo data is self-contained).
        result: The call's output (unused).
        undo_data: What the tool recorded.

    Returns:
        A one-line description.
    """
    fields = {"flights": undo_data["flights_before"], "cabin": undo_data["cabin_before"]}
    return _undo_update(store, undo_data, fields, "flight update")


@atomic
def undo_update_reservation_baggages(
    store: AirlineStore, args: Mapping[str, Any], result: str, undo_data: Mapping[str, Any]
) -> str:
    """Undo ``update_reservation_baggages``.

    Restores both bag counts and reverses the bag fee (history entry plus
    gift-card credit).  Does nothing to a reservation cancelled after the
    update.

    Args:
        store: The airline store.
        args: The call's arguments (unused).
        result: The call's output (unused).
        undo_data: What the tool recorded.

    Returns:
        A one-line description.
    """
    fields = {
        "total_baggages": undo_data["total_baggages_before"],
        "nonfree_baggages": undo_data["nonfree_baggages_before"],
    }
    return _undo_update(store, undo_data, fields, "baggage update")


@atomic
def undo_update_reservation_passengers(
    store: AirlineStore, args: Mapping[str, Any], result: str, undo_data: Mapping[str, Any]
) -> str:
    """Undo ``update_reservation_passengers`` (restore the previous passengers).

    Args:
        store: The airline store.
        args: The call's arguments (unused).
        result: The call's output (unused).
        undo_data: What the tool recorded.

    Returns:
        A one-line description.
    """
    fields = {"passengers": undo_data["passengers_before"]}
    return _undo_update(store, {**undo_data, "amount": 0}, fields, "passenger update")


def _restore_booking_payments(user: dict[str, Any], undo_data: Mapping[str, Any]) -> list[str]:
    """Credit gift cards and re-create used-up certificates of a booking.

    Args:
        user: The booking user as it is now (modified in place).
        undo_data: The booking's undo data.

    Returns:
        Descriptions of what was credited back.
    """
    notes = []
    methods = user["payment_methods"]
    for charge in undo_data["charges"]:
        payment_id, amount, source = charge["payment_id"], charge["amount"], charge["source"]
        if source == "gift_card" and payment_id in methods:
            methods[payment_id]["amount"] += amount
            notes.append(f"credited {amount} to {payment_id}")
        elif source == "certificate" and payment_id not in methods:
            methods[payment_id] = _copy(undo_data["payment_methods_before"][payment_id])
            notes.append(f"re-created {payment_id} ({methods[payment_id]['amount']})")
    order = {pid: i for i, pid in enumerate(undo_data["payment_method_order"])}
    user["payment_methods"] = dict(
        sorted(methods.items(), key=lambda item: order.get(item[0], len(order)))
    )
    return notes


@atomic
def undo_book_reservation(
    store: AirlineStore, args: Mapping[str, Any], result: str, undo_data: Mapping[str, Any]
) -> str:
    """Undo ``book_reservation``.

    Deletes the reservation, removes its id from the user's reservations,
    credits each gift card its share and re-creates each used-up certificate
    with its previous amount.  A booking whose reservation was cancelled
    afterwards (by an approved ``cancel_reservation``, which refunded every
    payment entry) is kept as it is: it is inactive and already settled.

    Args:
        store: The airline store.
        args: The call's arguments (unused).
        result: The call's output (unused).
        undo_data: What the tool recorded.

    Returns:
        A one-line description.
    """
    reservation_id, user_id = undo_data["reservation_id"], undo_data["user_id"]
    reservation = store.get_reservation(reservation_id)
    if reservation is None:
        return f"booking {reservation_id}: reservation no longer exists, nothing to undo"
    if reservation.get("status") == "cancelled":
        return (
            f"booking {reservation_id}: kept; it was cancelled afterwards and that "
            "cancellation already refunded every payment entry"
        )
    replaced = undo_data.get("replaced_reservation")
    if replaced is not None:  # the original overwrites HATHAV when all ids are taken
        store.put_reservation(reservation_id, replaced)
    else:
        store.delete_reservation(reservation_id)
    user = store.get_user(user_id)
    notes = []
    if user is not None:
        if reservation_id in user["reservations"]:
            user["reservations"].reverse()
            user["reservations"].remove(reservation_id)  # the last occurrence
            user["reservations"].reverse()
        notes = _restore_booking_payments(user, undo_data)
        store.put_user(user_id, user)
    detail = "; ".join(notes) if notes else "no balance to restore"
    return f"booking {reservation_id}: removed; {detail}"
